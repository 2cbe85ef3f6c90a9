//! What a locked call gives back: the body's result, and a lock failure
//! either converted into the body's error type, kept apart from it, or told
//! in full ([`Outcome`]: whether the body ran, ran to its end, and whether
//! the lock held throughout).

use crate::error::LockError;

/// How a locked call ends, for a caller that must act on what happened
/// under faults: whether the body ran, ran to its end and what it returned,
/// and whether the lock held throughout. Given by
/// [`LockClient::run_locked_outcome`](crate::LockClient::run_locked_outcome),
/// [`LockClient::run_locked_all_outcome`](crate::LockClient::run_locked_all_outcome)
/// and the lazy [`run_locked_outcome`](crate::run_locked_outcome) and
/// [`run_locked_all_outcome`](crate::run_locked_all_outcome).
///
/// `run_locked` folds it into `Result<T, E>`: `Held(result)` is `result`,
/// every other case `Err(E::from(error))`, so that a body that ran to its
/// end before its lock was found lost loses its result there; this type
/// keeps it ([`RanButLost`](Outcome::RanButLost)).
#[derive(Debug)]
#[non_exhaustive]
#[must_use = "an outcome says whether the body ran: act on it"]
pub enum Outcome<T, E> {
    /// The body ran to its end, and the lock held throughout: what it
    /// returned.
    Held(Result<T, E>),
    /// The body ran to its end and returned `body`, but the lock may not
    /// have held to the end: `error` says why (a release or renewal that
    /// found it lost or freed, a release that could not reach Redis, or
    /// one Redis refused; on Redlock, a release that reached only a
    /// minority). What the body did happened; whether another owner ran
    /// beside it is what `error` tells.
    RanButLost {
        /// What the body returned.
        body: Result<T, E>,
        /// Why the lock may not have held to the end.
        error: LockError,
    },
    /// The body began and was dropped before its end, at an `.await`,
    /// because the lock was lost: it may have done part of its work.
    Stopped(LockError),
    /// The body never began: the lock was not taken (a timeout, a backend
    /// or connect error, an invalid call), or the hold was found lost
    /// before the body's first poll.
    NotRun(LockError),
}

impl<T, E> Outcome<T, E> {
    /// What the body returned, when it ran to its end.
    pub fn body(&self) -> Option<&Result<T, E>> {
        match self {
            Outcome::Held(body) | Outcome::RanButLost { body, .. } => Some(body),
            Outcome::Stopped(_) | Outcome::NotRun(_) => None,
        }
    }

    /// The lock's error, unless the lock held throughout.
    pub fn error(&self) -> Option<&LockError> {
        match self {
            Outcome::Held(_) => None,
            Outcome::RanButLost { error, .. }
            | Outcome::Stopped(error)
            | Outcome::NotRun(error) => Some(error),
        }
    }

    /// Whether the body began (it ran to its end, or was stopped).
    pub fn body_began(&self) -> bool {
        !matches!(self, Outcome::NotRun(_))
    }

    /// The outcome as `run_locked` gives it: the body's result when the
    /// lock held throughout, else `Err(E::from(error))` (a body's result
    /// after which the lock was found lost is dropped).
    pub fn into_result(self) -> Result<T, E>
    where
        E: From<LockError>,
    {
        match self {
            Outcome::Held(body) => body,
            Outcome::RanButLost { error, .. }
            | Outcome::Stopped(error)
            | Outcome::NotRun(error) => Err(E::from(error)),
        }
    }
}

/// How a [`Locked`](super::Locked) call gives back a lock failure beside
/// what the body returned.
pub(crate) trait Report<T, E> {
    /// The call's output.
    type Output;

    /// The body ran to its end under the lock, held throughout.
    fn held(result: Result<T, E>) -> Self::Output;

    /// The body never began.
    fn not_run(error: LockError) -> Self::Output;

    /// The body began and was dropped on loss.
    fn stopped(error: LockError) -> Self::Output {
        Self::not_run(error)
    }

    /// The body ran to its end and returned `result`; then `error` showed
    /// that the lock may not have held to the end. Unless the output keeps
    /// both, the result is dropped, and that is traced.
    fn ran_but_lost(result: Result<T, E>, error: LockError) -> Self::Output {
        tracing::warn!(
            key = error.key().unwrap_or_default(),
            body = if result.is_ok() { "Ok" } else { "Err" },
            "the body ran to its end, but its lock may not have held to the end: the call \
             returns the lock's error and drops what the body returned (run_locked_outcome \
             gives both)"
        );
        Self::not_run(error)
    }
}

/// `Result<T, E>`, a lock failure as `Err(E::from(error))`: the output of
/// [`LockClient::run_locked`](crate::LockClient::run_locked) and
/// [`crate::run_locked`].
pub(crate) enum Joined {}

impl<T, E: From<LockError>> Report<T, E> for Joined {
    type Output = Result<T, E>;

    fn held(result: Result<T, E>) -> Result<T, E> {
        result
    }

    fn not_run(error: LockError) -> Result<T, E> {
        Err(E::from(error))
    }
}

/// `Result<Result<T, E>, LockError>`, a lock failure kept apart: the
/// attribute's calls, which convert it after the `.await`
/// (`__private::finish`). No bound on `E` here, so that an error type
/// without `From<LockError>` fails one bound, at that conversion, rather
/// than also at the `.await` of a future whose type needs it.
pub(crate) enum Apart {}

impl<T, E> Report<T, E> for Apart {
    type Output = Result<Result<T, E>, LockError>;

    fn held(result: Result<T, E>) -> Self::Output {
        Ok(result)
    }

    fn not_run(error: LockError) -> Self::Output {
        Err(error)
    }
}

/// [`Outcome`], every case told apart.
pub(crate) enum Told {}

impl<T, E> Report<T, E> for Told {
    type Output = Outcome<T, E>;

    fn held(result: Result<T, E>) -> Self::Output {
        Outcome::Held(result)
    }

    fn not_run(error: LockError) -> Self::Output {
        Outcome::NotRun(error)
    }

    fn stopped(error: LockError) -> Self::Output {
        Outcome::Stopped(error)
    }

    fn ran_but_lost(body: Result<T, E>, error: LockError) -> Self::Output {
        Outcome::RanButLost { body, error }
    }
}
