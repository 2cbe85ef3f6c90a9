//! What a locked call gives back: the body's result, and a lock failure
//! either converted into the body's error type or kept apart from it.

use crate::error::LockError;

/// How a [`Locked`](super::Locked) call gives back a lock failure beside
/// what the body returned.
pub(crate) trait Outcome<T, E> {
    /// The call's output.
    type Output;

    /// The output for what the body returned.
    fn body(result: Result<T, E>) -> Self::Output;

    /// The output for a lock failure.
    fn lock(error: LockError) -> Self::Output;
}

/// `Result<T, E>`, a lock failure as `Err(E::from(error))`: the output of
/// [`LockClient::run_locked`](crate::LockClient::run_locked) and
/// [`crate::run_locked`].
pub(crate) enum Joined {}

impl<T, E: From<LockError>> Outcome<T, E> for Joined {
    type Output = Result<T, E>;

    fn body(result: Result<T, E>) -> Result<T, E> {
        result
    }

    fn lock(error: LockError) -> Result<T, E> {
        Err(E::from(error))
    }
}

/// `Result<Result<T, E>, LockError>`, a lock failure kept apart: the
/// attribute's calls, which convert it after the `.await`
/// (`__private::finish`). No bound on `E` here, so that an error type
/// without `From<LockError>` fails one bound, at that conversion, rather
/// than also at the `.await` of a future whose type needs it.
pub(crate) enum Apart {}

impl<T, E> Outcome<T, E> for Apart {
    type Output = Result<Result<T, E>, LockError>;

    fn body(result: Result<T, E>) -> Self::Output {
        Ok(result)
    }

    fn lock(error: LockError) -> Self::Output {
        Err(error)
    }
}
