//! The deployments a client can have, and the one place that dispatches
//! among them: between the call layer, which names no deployment, and the
//! lock kinds (`crate::kind`), which see a [`Routed`]: scripts on one route
//! (one node, the Sentinel master, Cluster, the embedded backend), or a
//! Redlock quorum.
//!
//! Here: the deployment enum ([`Backend`]) and its dispatch ([`Routed`],
//! [`Scripted`]) and a lock call's operations on it (acquire, release,
//! renew: they pick the kind's code for the deployment); the operator's
//! (`admin.rs`: inspect, force-unlock; `registry.rs`: the client's
//! registry entry); connecting it (`connect.rs`).

pub(crate) mod admin;
pub(crate) mod connect;
mod registry;

use std::time::Duration;

use ::redis::{Cmd, FromRedisValue, RedisError, Value};

#[cfg(feature = "embedded")]
use crate::embedded::EmbeddedBackend;
use crate::error::LockError;
use crate::io::polled_on;
use crate::kind::exclusive::renew;
use crate::kind::{quorum, scripted};
use crate::kind::{Acquire, Claim, Kind, Release, RenewItem, Renewal};
use crate::replica_sync::ReplicaSync;
use crate::route::cluster::ClusterBackend;
use crate::route::node::RedisBackend;
use crate::route::redlock::RedlockBackend;
use crate::route::sentinel::SentinelBackend;
use crate::route::{BackendError, Lane, Notices, Route, ScriptCall};

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

/// A deployment where one route runs each script call.
pub(crate) enum Scripted<'a> {
    Node(&'a RedisBackend),
    Sentinel(&'a SentinelBackend),
    Cluster(&'a ClusterBackend),
    #[cfg(feature = "embedded")]
    Embedded(&'a EmbeddedBackend),
}

/// What a lock kind runs its operations on.
pub(crate) enum Routed<'a> {
    /// Scripts on one route.
    Scripts(Scripted<'a>),
    /// The same scripts on N independent masters, decided by quorum.
    Quorum(&'a RedlockBackend),
}

impl Backend {
    /// What a lock kind runs its operations on.
    pub(crate) fn routed(&self) -> Routed<'_> {
        match self {
            Backend::Redis(b) => Routed::Scripts(Scripted::Node(b)),
            Backend::Sentinel(b) => Routed::Scripts(Scripted::Sentinel(b)),
            Backend::Cluster(b) => Routed::Scripts(Scripted::Cluster(b)),
            Backend::Redlock(b) => Routed::Quorum(b),
            #[cfg(feature = "embedded")]
            Backend::Embedded(b) => Routed::Scripts(Scripted::Embedded(b)),
        }
    }

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

    /// Makes sure a release of `key` by another client will wake this one.
    pub(crate) async fn watch_releases(&self, key: &str) -> Result<(), BackendError> {
        match self.routed() {
            Routed::Scripts(route) => Ok(route.subscribe(key).await?),
            Routed::Quorum(b) => b.subscribe(key).await,
        }
    }

    /// Stops listening for releases of `key` once nobody here waits on it.
    pub(crate) async fn unwatch_releases(&self, key: &str) -> Result<(), BackendError> {
        match self.routed() {
            Routed::Scripts(route) => Ok(route.unsubscribe(key).await?),
            Routed::Quorum(b) => b.unsubscribe(key).await,
        }
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

/// A lock call's operations.
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
        }
    }
}

/// Each call goes to the deployment's own route.
impl Route for Scripted<'_> {
    async fn run<T: FromRedisValue + Send>(
        &self,
        lane: &Lane,
        call: &ScriptCall<'_>,
    ) -> Result<T, RedisError> {
        match self {
            Scripted::Node(b) => b.run(lane, call).await,
            Scripted::Sentinel(b) => b.run(lane, call).await,
            Scripted::Cluster(b) => b.run(lane, call).await,
            #[cfg(feature = "embedded")]
            Scripted::Embedded(b) => b.run(lane, call).await,
        }
    }

    fn sync(&self) -> Option<ReplicaSync> {
        match self {
            Scripted::Node(b) => b.sync(),
            Scripted::Sentinel(b) => b.sync(),
            Scripted::Cluster(b) => b.sync(),
            #[cfg(feature = "embedded")]
            Scripted::Embedded(b) => b.sync(),
        }
    }

    async fn run_synced(
        &self,
        call: ScriptCall<'_>,
        undo: Option<Cmd>,
    ) -> Result<(Value, usize), RedisError> {
        match self {
            Scripted::Node(b) => b.run_synced(call, undo).await,
            Scripted::Sentinel(b) => b.run_synced(call, undo).await,
            Scripted::Cluster(b) => b.run_synced(call, undo).await,
            #[cfg(feature = "embedded")]
            Scripted::Embedded(b) => b.run_synced(call, undo).await,
        }
    }

    fn batches(&self, keys: &[&str]) -> Vec<Vec<usize>> {
        match self {
            Scripted::Node(b) => b.batches(keys),
            Scripted::Sentinel(b) => b.batches(keys),
            Scripted::Cluster(b) => b.batches(keys),
            #[cfg(feature = "embedded")]
            Scripted::Embedded(b) => b.batches(keys),
        }
    }

    fn notices(&self) -> Notices {
        match self {
            Scripted::Node(b) => b.notices(),
            Scripted::Sentinel(b) => b.notices(),
            Scripted::Cluster(b) => b.notices(),
            #[cfg(feature = "embedded")]
            Scripted::Embedded(b) => b.notices(),
        }
    }

    async fn subscribe(&self, key: &str) -> Result<(), RedisError> {
        match self {
            Scripted::Node(b) => Route::subscribe(*b, key).await,
            Scripted::Sentinel(b) => Route::subscribe(*b, key).await,
            Scripted::Cluster(b) => Route::subscribe(*b, key).await,
            #[cfg(feature = "embedded")]
            Scripted::Embedded(b) => Route::subscribe(*b, key).await,
        }
    }

    async fn unsubscribe(&self, key: &str) -> Result<(), RedisError> {
        match self {
            Scripted::Node(b) => Route::unsubscribe(*b, key).await,
            Scripted::Sentinel(b) => Route::unsubscribe(*b, key).await,
            Scripted::Cluster(b) => Route::unsubscribe(*b, key).await,
            #[cfg(feature = "embedded")]
            Scripted::Embedded(b) => Route::unsubscribe(*b, key).await,
        }
    }

    fn client_id(&self) -> &str {
        match self {
            Scripted::Node(b) => b.client_id(),
            Scripted::Sentinel(b) => b.client_id(),
            Scripted::Cluster(b) => b.client_id(),
            #[cfg(feature = "embedded")]
            Scripted::Embedded(b) => b.client_id(),
        }
    }
}
