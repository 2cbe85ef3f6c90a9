//! A lock call's operations on whatever the client has: scripts on one
//! route, a Redlock quorum, or memory. The call layer asks these; they pick
//! the kind's code for the deployment.

use std::time::Duration;

use super::exclusive::{acquire, release, renew};
use super::quorum;
use super::{Acquire, Release, RenewItem, Renewal};
use crate::io::polled_on;
use crate::route::{Backend, BackendError, Lane, Routed};

impl Backend {
    /// Takes `key` for `owner` (one acquisition) for `lease`.
    pub(crate) async fn acquire(
        &self,
        lane: &Lane,
        key: &str,
        owner: &str,
        lease: Duration,
    ) -> Result<Acquire, BackendError> {
        match self.routed() {
            Routed::Scripts(route) => Ok(acquire(&route, lane, key, owner, lease).await?),
            Routed::Quorum(b) => polled_on(b.home(), quorum::acquire(b, key, owner, lease)).await,
            Routed::Memory(b) => Ok(b.acquire(key, owner, lease)),
        }
    }

    /// Frees the lock if `owner` (one acquisition, of lease `lease`) holds
    /// it; `token` goes out with the release notice, so that a waiter told
    /// by several nodes wakes once.
    pub(crate) async fn release(
        &self,
        lane: &Lane,
        key: &str,
        (owner, token): (&str, u64),
        lease: Duration,
    ) -> Result<Release, BackendError> {
        match self.routed() {
            Routed::Scripts(route) => Ok(release(&route, lane, key, (owner, token), lease).await?),
            Routed::Quorum(b) => {
                polled_on(b.home(), quorum::release(b, key, (owner, token), lease)).await
            }
            Routed::Memory(b) => Ok(b.release(key, owner)),
        }
    }

    /// What the renewal found, per item.
    pub(crate) async fn renew(
        &self,
        items: &[RenewItem<'_>],
    ) -> Result<Vec<Renewal>, BackendError> {
        match self.routed() {
            Routed::Scripts(route) => Ok(renew(&route, items).await?),
            Routed::Quorum(b) => quorum::renew(b, items).await,
            Routed::Memory(b) => Ok(b.renew(items)),
        }
    }
}
