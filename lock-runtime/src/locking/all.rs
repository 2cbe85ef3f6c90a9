//! A call that locks several keys at once, all or nothing.

use std::future::Future;
use std::panic::Location;

use crate::client::ClientRef;
use crate::error::LockError;
use crate::locking::outcome::Outcome;
use crate::options::LockOptions;

/// Runs `body` once every key of `keys` (full backend keys) is held on
/// `client`, giving back a lock failure as `O` says, as a call made `at`.
pub(crate) async fn run_all_at<O, T, E, F>(
    client: ClientRef<'_>,
    keys: Vec<String>,
    options: LockOptions,
    body: F,
    at: &'static Location<'static>,
) -> O::Output
where
    F: Future<Output = Result<T, E>>,
    O: Outcome<T, E>,
{
    let _ = (client, options, at);
    drop(body);
    let key = keys.into_iter().next().unwrap_or_default();
    O::lock(LockError::Invalid {
        key,
        message: "several keys at once are not supported yet",
    })
}
