//! The deployments a client can have, and the one place that dispatches
//! among them: between the call layer, which names no deployment, and the
//! lock kinds (`crate::kind`), which run their scripts on one route (one
//! node, the Sentinel master, Cluster, the embedded backend: each route's
//! own type, so that a call reaches it without a second dispatch) or
//! combine a Redlock quorum's answers.
//!
//! Here: the deployment enum ([`Backend`]), its dispatch (`on_route!`) and a
//! lock call's operations on it (acquire, release, renew: they pick the
//! kind's code for the deployment); the operator's (`admin.rs`: inspect,
//! force-unlock; `registry.rs`: the client's registry entry); connecting it
//! (`connect.rs`).

/// Runs `$scripts` with `$route` bound to the deployment's route when it
/// runs scripts on one route, else `$quorum` with `$nodes` bound to the
/// Redlock nodes: the one match on the deployment that operations use.
macro_rules! on_route {
    ($backend:expr, $route:ident => $scripts:expr, $nodes:ident => $quorum:expr) => {
        match $backend {
            Backend::Redis($route) => $scripts,
            Backend::Sentinel($route) => $scripts,
            Backend::Cluster($route) => $scripts,
            #[cfg(feature = "embedded")]
            Backend::Embedded($route) => $scripts,
            Backend::Redlock($nodes) => $quorum,
        }
    };
}

pub(crate) mod admin;
pub(crate) mod connect;
pub(crate) mod fenced;
mod registry;

use std::time::Duration;

use tokio::time::Instant;

#[cfg(feature = "embedded")]
use crate::embedded::EmbeddedBackend;
use crate::error::LockError;
use crate::io::polled_on;
use crate::kind::exclusive::renew;
use crate::kind::several::{self, Several};
use crate::kind::{quorum, quorum_several, scripted};
use crate::kind::{Acquire, Claim, Kind, Release, RenewItem, Renewal, Tail};
use crate::route::cluster::ClusterBackend;
use crate::route::node::RedisBackend;
use crate::route::redlock::RedlockBackend;
use crate::route::sentinel::SentinelBackend;
use crate::route::{BackendError, Lane, Route};

/// The backends, dispatched by match: all are known to this crate.
#[derive(Clone)]
pub(crate) enum Backend {
    Redis(RedisBackend),
    Redlock(RedlockBackend),
    Cluster(ClusterBackend),
    /// The embedded backend: the same scripts, run in this process.
    #[cfg(feature = "embedded")]
    Embedded(EmbeddedBackend),
    /// A master found through Sentinel, followed across failovers.
    Sentinel(SentinelBackend),
}

impl Backend {
    /// The deployment's name, for the client's `Debug`.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Backend::Redis(_) => "redis",
            Backend::Redlock(_) => "redlock",
            Backend::Cluster(_) => "cluster",
            #[cfg(feature = "embedded")]
            Backend::Embedded(_) => "memory",
            Backend::Sentinel(_) => "sentinel",
        }
    }

    /// Why the deployment refuses locks of `kind`, if it does: a Redlock
    /// quorum refuses permits and fair locks (see [`quorum::refuses`]).
    pub(crate) fn refuses(&self, kind: Kind) -> Option<&'static str> {
        match self {
            Backend::Redlock(_) => quorum::refuses(kind),
            _ => None,
        }
    }

    /// The connection for one call made from the current task.
    pub(crate) fn lane(&self) -> Lane {
        match self {
            Backend::Redis(b) => b.lane(),
            _ => Lane::Home,
        }
    }

    /// Makes sure a release of each of `keys` (at least one) by another
    /// client will wake this one. An error: some may not be subscribed.
    pub(crate) async fn watch_releases(&self, keys: &[&str]) -> Result<(), BackendError> {
        on_route!(self,
            route => Ok(Route::subscribe(route, keys).await?),
            nodes => nodes.subscribe(keys).await)
    }

    /// Stops listening for releases of `keys` (at least one) once nobody
    /// here waits on them.
    pub(crate) async fn unwatch_releases(&self, keys: &[&str]) -> Result<(), BackendError> {
        on_route!(self,
            route => Ok(Route::unsubscribe(route, keys).await?),
            nodes => nodes.unsubscribe(keys).await)
    }

    /// Whether releases reach this client through pub/sub subscriptions.
    pub(crate) fn subscribes(&self) -> bool {
        match self {
            #[cfg(feature = "embedded")]
            Backend::Embedded(_) => false,
            _ => true,
        }
    }

    /// The caller's error for `error`, met by a request on the lock `key`,
    /// naming the node that failed: on Sentinel the master in use, on
    /// Cluster the node the error names (a redirect) or else the master of
    /// the key's hash slot; elsewhere `place`, the client's place (the one
    /// node; a Redlock error names each node itself).
    pub(crate) fn error_on_key(&self, error: BackendError, key: &str, place: &str) -> LockError {
        let node = match (&error, self) {
            (BackendError::Redis(source), Backend::Cluster(b)) => b.failed_node(key, source, place),
            (BackendError::Redis(_), Backend::Sentinel(b)) => b.master_node(),
            _ => return error.on_key(key, place),
        };
        error.on_key(key, &node)
    }
}

/// A request over several keys that failed: the error, and the index of
/// the key whose request failed, where the deployment tells (on Cluster,
/// a key of the slot that failed).
pub(crate) struct FailedOn {
    pub error: BackendError,
    pub key: Option<usize>,
}

/// A lock call's operations.
impl Backend {
    /// Takes `key` for `owner` (one acquisition) as `claim` asks. On
    /// Cluster, a slot's master that is changing is followed until `until`
    /// (the call's wait: see `route::cluster::Following`).
    pub(crate) async fn acquire(
        &self,
        lane: &Lane,
        key: &str,
        owner: &str,
        (claim, until): (Claim, Instant),
    ) -> Result<Acquire, BackendError> {
        if let Backend::Cluster(cluster) = self {
            let route = cluster.following(until);
            return Ok(scripted::acquire(&route, lane, key, owner, claim).await?);
        }
        on_route!(self,
            route => Ok(scripted::acquire(route, lane, key, owner, claim).await?),
            nodes => polled_on(nodes.home(), quorum::acquire(nodes, key, owner, claim)).await)
    }

    /// Takes every key of `keys` (no key twice; key `i` for `owners[i]`,
    /// one acquisition each) at once, all or nothing, as `claim` asks. On
    /// Cluster, a slot's master that is changing is followed until `until`
    /// (the call's wait), and a failure names the key whose slot failed.
    pub(crate) async fn acquire_all(
        &self,
        lane: &Lane,
        (keys, owners): (&[&str], &[&str]),
        (claim, until): (Claim, Instant),
    ) -> Result<Several, FailedOn> {
        if let Backend::Cluster(cluster) = self {
            let route = cluster.following(until);
            let taken = several::acquire(&route, lane, keys, owners, claim).await;
            return taken.map_err(|error| FailedOn {
                error: error.into(),
                key: route
                    .failed_key()
                    .and_then(|failed| keys.iter().position(|key| **key == failed)),
            });
        }
        let taken: Result<Several, BackendError> = on_route!(self,
            route => several::acquire(route, lane, keys, owners, claim).await.map_err(Into::into),
            nodes => polled_on(nodes.home(), quorum_several::acquire_all(nodes, keys, owners, claim)).await);
        taken.map_err(|error| FailedOn { error, key: None })
    }

    /// Frees the lock if `owner` (one acquisition of `kind`, of lease
    /// `lease`) holds it, or withdraws its place in a line; `token` goes out
    /// with the release notice, so that a waiter told by several nodes
    /// wakes once. With `tail` (`hold_at_least`), each node keeps the hold
    /// until its end there instead, and frees it by itself then.
    pub(crate) async fn release(
        &self,
        lane: &Lane,
        key: &str,
        (owner, token): (&str, u64),
        (kind, lease, tail): (Kind, Duration, Option<&Tail>),
    ) -> Result<Release, BackendError> {
        let hold = (owner, token);
        on_route!(self,
        route => {
            let end = tail.and_then(|tail| tail.on_node(0));
            Ok(scripted::release(route, lane, key, hold, (kind, lease, end)).await?)
        },
        nodes => {
            let kind_lease = (kind, lease, tail);
            polled_on(nodes.home(), quorum::release(nodes, key, hold, kind_lease)).await
        })
    }

    /// What the renewal found, per item.
    pub(crate) async fn renew(
        &self,
        items: &[RenewItem<'_>],
    ) -> Result<Vec<Renewal>, BackendError> {
        on_route!(self,
            route => Ok(renew(route, items).await?),
            nodes => quorum::renew(nodes, items).await)
    }
}
