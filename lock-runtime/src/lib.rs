//! Distributed locks on Redis, as an attribute on async functions.
//!
//! `#[distributed_lock]` turns an async function into a critical section
//! that holds across tasks, processes and machines: the body runs only while
//! this process holds the lock in Redis, a watchdog renews the lease while
//! the body runs, nested locked calls in the same task re-enter instead of
//! deadlocking, and a dropped or panicking call releases the lock at once.
//!
//! ```
//! use lock_runtime::{distributed_lock, LockClient, LockError};
//!
//! #[derive(Debug)]
//! enum AppError {
//!     Lock(LockError),
//!     OutOfStock,
//! }
//!
//! impl From<LockError> for AppError {
//!     fn from(e: LockError) -> Self {
//!         AppError::Lock(e)
//!     }
//! }
//!
//! #[distributed_lock(key = "order:<id>", lease = "30s")]
//! async fn deduct(id: u64, qty: u32) -> Result<u32, AppError> {
//!     // Read, check and write the stock: no other holder of
//!     // `lock:order:<id>` runs this at the same time.
//!     if qty > 10 {
//!         return Err(AppError::OutOfStock);
//!     }
//!     Ok(10 - qty)
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), AppError> {
//!     // Once, at start-up. `LockClient::connect("redis://127.0.0.1/").await?`
//!     // for Redis; the embedded backend needs nothing.
//!     lock_runtime::init(LockClient::in_memory())?;
//!     assert_eq!(deduct(7, 3).await?, 7);
//!     Ok(())
//! }
//! ```
//!
//! # Options
//! - `key = "order:<id>"` (required): the lock's name. `<name>` is an
//!   argument (anything `Display`), `<name.field>` a field of one,
//!   `<self.field>` a field of the receiver. The Redis key is the client's
//!   prefix (default `lock:`) followed by the rendered key.
//! - `lease = "30s"`: how long the lock lives in Redis without a renewal
//!   (default: the client's, 30 s; at least 10 ms). Durations are `250ms`, `30s`, `5m`, `1h`.
//! - `wait = "5s"`: how long to wait for a lock that another owner holds;
//!   `"0s"` tries once (default: the client's, 10 s). Then the call returns
//!   [`LockError::Timeout`].
//! - `renew = false`: do not renew; the body is stopped with
//!   [`LockError::Lost`] when the lease runs out (default `true`).
//! - `crate = "path"`: where this crate is, if it was renamed.
//!
//! The function must be `async` and return `Result<T, E>` with
//! `E: From<LockError>`; lock failures come back as `Err(E::from(error))`
//! and the body never runs without the lock.
//!
//! # How it works
//! - A lock is a Redis string at `prefix + key`,
//!   `L1:<fence>:<state>:<owner>`, with the lease as its expiry (see
//!   `docs/redis-layout.md` in the repository). Taking, releasing and
//!   renewing are each one Lua script (loaded once, called by `EVALSHA`).
//! - Ownership is the extent of the body: a locked call made inside a
//!   locked body (same task, same client) on the same key re-enters with no
//!   round trip. Every other call is an acquisition with an owner id of its
//!   own: a spawned task, a future joined next to another inside a body.
//! - Waiters line up per key in arrival order within a client; the head of
//!   the line subscribes to the lock's release channel and retries when the
//!   holder's release publishes, or when the holder's lease runs out.
//! - Every acquisition gets a fencing token ([`fencing_token`]) that a
//!   protected store can check to refuse a holder that lost its lock; see
//!   [`fencing`](fencing_token) for how.
//! - [`LockClient::redlock`] locks by quorum across N independent Redis
//!   masters, with the same behaviour for the caller.
//! - [`LockClient::cluster`] locks on a Redis Cluster: each lock in its
//!   key's slot, released with sharded pub/sub.
//! - One watchdog task per client renews every held lock at a third of its
//!   lease, batching locks into one script call. A renewal that finds the lock
//!   gone, or a lease that runs out with no successful renewal, stops the body
//!   with [`LockError::Lost`]; so does a release that finds the lock gone or
//!   cannot reach Redis, whatever the body returned.
#![warn(missing_docs)]

mod backend;
mod client;
mod error;
mod fencing;
mod global;
mod held;
mod io;
mod locking;
mod options;
mod owner_id;
mod ownership;
mod private;
mod replica_sync;
mod subscriptions;
mod wakeup;
mod watchdog;

#[doc(hidden)]
pub mod __private {
    pub use crate::private::*;
}

pub use client::{LockClient, LockClientBuilder};
pub use error::{LockError, LossReason, NodeFailure};
pub use fencing::{fencing_token, fencing_token_of};
pub use global::{client, init};
/// Runs an async function under a distributed lock; see the
/// [crate documentation](crate) for the options.
pub use lock_macros::distributed_lock;
pub use options::LockOptions;

use std::future::Future;

/// Runs `body` under the lock `key` on the global client: the form for code
/// that cannot use the attribute (a closure, a key computed at run time).
/// Same ownership, renewal and loss rules as the attribute.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_runtime::LockError> {
/// use lock_runtime::{LockClient, LockError, LockOptions};
/// # let _ = lock_runtime::init(LockClient::in_memory());
///
/// let account = "acct-1";
/// let key = format!("account:{account}");
/// let balance = lock_runtime::run_locked(&key, LockOptions::new(), async {
///     Ok::<_, LockError>(100)
/// })
/// .await?;
/// assert_eq!(balance, 100);
/// # Ok(())
/// # }
/// ```
///
/// # Errors
/// As [`LockClient::run_locked`], and [`LockError::NotInitialized`] before
/// [`init`].
pub fn run_locked<T, E, F>(
    key: &str,
    options: LockOptions,
    body: F,
) -> impl Future<Output = Result<T, E>>
where
    F: Future<Output = Result<T, E>>,
    E: From<LockError>,
{
    private::run_locked(private::key(format_args!("{key}")), options, body)
}
