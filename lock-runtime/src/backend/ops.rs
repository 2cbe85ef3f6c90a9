//! A lock call's operations on whatever the client has: scripts on one
//! route, a Redlock quorum, or memory. The call layer asks these; they pick
//! the kind's code for the deployment.

use std::time::Duration;

use super::{Backend, Routed};
use crate::io::polled_on;
use crate::kind::exclusive::renew;
use crate::kind::{quorum, scripted};
use crate::kind::{Acquire, Claim, Kind, Release, RenewItem, Renewal};
use crate::route::{BackendError, Lane};

impl Backend {
    /// Takes `key` for `owner` (one acquisition) as `claim` asks.
    pub(crate) async fn acquire(
        &self,
        lane: &Lane,
        key: &str,
        owner: &str,
        claim: Claim,
    ) -> Result<Acquire, BackendError> {
        match self.routed() {
            Routed::Scripts(route) => Ok(scripted::acquire(&route, lane, key, owner, claim).await?),
            Routed::Quorum(b) => polled_on(b.home(), quorum::acquire(b, key, owner, claim)).await,
            Routed::Memory(b) => b.acquire(key, owner, claim).map_err(BackendError::Redis),
        }
    }

    /// Frees the lock if `owner` (one acquisition of `kind`, of lease
    /// `lease`) holds it, or withdraws its place in a line; `token` goes out
    /// with the release notice, so that a waiter told by several nodes
    /// wakes once.
    pub(crate) async fn release(
        &self,
        lane: &Lane,
        key: &str,
        (owner, token): (&str, u64),
        (kind, lease): (Kind, Duration),
    ) -> Result<Release, BackendError> {
        let hold = (owner, token);
        match self.routed() {
            Routed::Scripts(route) => {
                Ok(scripted::release(&route, lane, key, hold, (kind, lease)).await?)
            }
            Routed::Quorum(b) => {
                polled_on(b.home(), quorum::release(b, key, hold, (kind, lease))).await
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
