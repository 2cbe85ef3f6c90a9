//! Fencing tokens: the token of the lock a running body holds.
//!
//! How tokens are made and how a store checks them (Lua and SQL) is the
//! public guide [`crate::guide::fencing`].

use crate::ownership;

/// The fencing token of the lock of the innermost locked call whose body is
/// running (the lock it took, or the one it re-entered), or `None` outside a
/// locked body, or once that call's hold has ended (a nested call that
/// outlived its body). In the body of a call on several keys
/// ([`run_locked_all`](crate::run_locked_all), `keys = [...]`), the token
/// of the first key listed; [`fencing_token_of`] gives each key's. Pass it
/// to the store the lock protects, which refuses a token smaller than one
/// it has seen; see [the fencing guide](crate::guide::fencing) for Lua and
/// SQL.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_runtime::LockError> {
/// use lock_runtime::{distributed_lock, LockClient, LockError};
///
/// #[distributed_lock(key = "account:<id>")]
/// async fn deposit(id: u64) -> Result<u64, LockError> {
///     let token = lock_runtime::fencing_token().expect("inside a locked body");
///     // store.write_if_token_at_least(token, ...)
///     Ok(token)
/// }
///
/// lock_runtime::init(LockClient::in_memory())?;
/// let first = deposit(1).await?;
/// let second = deposit(1).await?;
/// assert!(second > first);
/// assert_eq!(lock_runtime::fencing_token(), None);
/// # Ok(())
/// # }
/// ```
pub fn fencing_token() -> Option<u64> {
    ownership::innermost().and_then(|frame| frame.token())
}

/// The fencing token of the lock `key` (as written in the attribute or
/// given to `run_locked`, without the client's prefix) if the running body
/// holds it (among the keys of a call on several keys too); `None`
/// otherwise.
pub fn fencing_token_of(key: &str) -> Option<u64> {
    ownership::held_user_key(key).and_then(|frame| frame.token())
}
