//! Where locks live: one Redis node, a master found through Sentinel, a
//! quorum of independent Redis masters (Redlock), a Redis Cluster, or this
//! process's memory.
//!
//! Every backend answers the same three questions, each decided atomically:
//! take a lock for one acquisition, free it, and reset the leases of a batch
//! of held locks. Each acquisition has an owner id of its own (see
//! `docs/redis-layout.md`); re-entry is decided in the process and never
//! reaches a backend.

pub(crate) mod cluster;
mod cluster_check;
mod cluster_replicas;
pub(crate) mod local;
pub(crate) mod node;
mod notices;
pub(crate) mod redlock;
mod replicas;
pub(crate) mod sentinel;
pub(crate) mod target;

use std::time::Duration;

use ::redis::aio::MultiplexedConnection;
use ::redis::RedisError;
use tokio::runtime;

use crate::error::{LockError, NodeFailure};
use crate::io::polled_on;
use crate::kind::memory;
use crate::kind::{Acquire, Release, RenewItem, Renewal};

/// Why a backend could not answer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BackendError {
    /// The one Redis node failed.
    #[error(transparent)]
    Redis(RedisError),
    /// Too few Redlock nodes answered to reach a quorum.
    #[error("{reached} of the {needed} Redis nodes needed answered; {}", NodeFailure::list(.failures))]
    NoQuorum {
        needed: usize,
        reached: usize,
        failures: Vec<NodeFailure>,
    },
}

impl BackendError {
    /// The caller's error for this failure on the lock `key`, at `node`
    /// (the client's place: its node's address, without credentials).
    pub(crate) fn on_key(self, key: &str, node: &str) -> LockError {
        match self {
            BackendError::Redis(source) => LockError::Backend {
                key: key.to_owned(),
                node: node.to_owned(),
                source,
            },
            BackendError::NoQuorum {
                needed,
                reached,
                failures,
            } => LockError::NoQuorum {
                key: key.to_owned(),
                needed,
                reached,
                failures,
            },
        }
    }

    /// Whether the server answered that the lock's key holds something that
    /// is not a lock of this layout (`LOCKLAYOUT`, or `WRONGTYPE`).
    pub(crate) fn is_foreign(&self) -> bool {
        match self {
            BackendError::Redis(e) => matches!(e.code(), Some("LOCKLAYOUT" | "WRONGTYPE")),
            BackendError::NoQuorum { .. } => false,
        }
    }

    /// Whether the request may still have run (or may yet run) on the
    /// server: a timeout, a dropped connection, too few Redlock nodes.
    pub(crate) fn outcome_unknown(&self) -> bool {
        match self {
            BackendError::Redis(e) => {
                e.is_timeout() || e.is_io_error() || e.is_connection_dropped()
            }
            BackendError::NoQuorum { .. } => true,
        }
    }
}

impl From<RedisError> for BackendError {
    fn from(error: RedisError) -> Self {
        BackendError::Redis(error)
    }
}

/// The connection that one call's requests take, chosen once per call: a
/// release sent while the call's acquire is in flight must follow it on the
/// same connection.
#[derive(Clone)]
pub(crate) enum Lane {
    /// The client's connection (and every connection of other backends).
    Home,
    /// The connection driven by the caller's runtime (see
    /// [`local::LocalConnections`]).
    Local(runtime::Id, MultiplexedConnection),
}

/// The backends, dispatched by match: all are known to this crate.
#[derive(Clone)]
pub(crate) enum Backend {
    Redis(node::RedisBackend),
    Redlock(redlock::RedlockBackend),
    Cluster(cluster::ClusterBackend),
    Memory(memory::MemoryBackend),
    /// A master found through Sentinel, followed across failovers.
    Sentinel(sentinel::SentinelBackend),
}

impl Backend {
    /// The connection for one call made from the current task.
    pub(crate) fn lane(&self) -> Lane {
        match self {
            Backend::Redis(b) => b.lane(),
            _ => Lane::Home,
        }
    }

    pub(crate) async fn acquire(
        &self,
        lane: &Lane,
        key: &str,
        owner: &str,
        lease: Duration,
    ) -> Result<Acquire, BackendError> {
        match self {
            Backend::Redis(b) => Ok(b.acquire(lane, key, owner, lease).await?),
            Backend::Redlock(b) => polled_on(b.home(), b.acquire(key, owner, lease)).await,
            Backend::Cluster(b) => Ok(b.acquire(key, owner, lease).await?),
            Backend::Memory(b) => Ok(b.acquire(key, owner, lease)),
            Backend::Sentinel(b) => Ok(b.acquire(key, owner, lease).await?),
        }
    }

    /// Frees the lock if `owner` (one acquisition) holds it; `token` goes
    /// out with the release notice, so that a waiter told by several nodes
    /// wakes once.
    pub(crate) async fn release(
        &self,
        lane: &Lane,
        key: &str,
        owner: &str,
        token: u64,
    ) -> Result<Release, BackendError> {
        match self {
            Backend::Redis(b) => Ok(b.release(lane, key, owner, token).await?),
            Backend::Redlock(b) => polled_on(b.home(), b.release(key, owner, token)).await,
            Backend::Cluster(b) => Ok(b.release(key, owner, token).await?),
            Backend::Memory(b) => Ok(b.release(key, owner)),
            Backend::Sentinel(b) => Ok(b.release(key, owner, token).await?),
        }
    }

    /// What the renewal found, per item.
    pub(crate) async fn renew(
        &self,
        items: &[RenewItem<'_>],
    ) -> Result<Vec<Renewal>, BackendError> {
        match self {
            Backend::Redis(b) => Ok(b.renew(items).await?),
            Backend::Redlock(b) => b.renew(items).await,
            Backend::Cluster(b) => Ok(b.renew(items).await),
            Backend::Memory(b) => Ok(b.renew(items)),
            Backend::Sentinel(b) => Ok(b.renew(items).await?),
        }
    }

    /// Makes sure a release of `key` by another client will wake this one.
    pub(crate) async fn watch_releases(&self, key: &str) -> Result<(), BackendError> {
        match self {
            Backend::Redis(b) => Ok(b.subscribe(key).await?),
            Backend::Redlock(b) => b.subscribe(key).await,
            Backend::Cluster(b) => Ok(b.subscribe(key).await?),
            Backend::Memory(_) => Ok(()),
            Backend::Sentinel(b) => Ok(b.subscribe(key).await?),
        }
    }

    /// Stops listening for releases of `key` once nobody here waits on it.
    pub(crate) async fn unwatch_releases(&self, key: &str) -> Result<(), BackendError> {
        match self {
            Backend::Redis(b) => Ok(b.unsubscribe(key).await?),
            Backend::Redlock(b) => b.unsubscribe(key).await,
            Backend::Cluster(b) => Ok(b.unsubscribe(key).await?),
            Backend::Memory(_) => Ok(()),
            Backend::Sentinel(b) => Ok(b.unsubscribe(key).await?),
        }
    }

    /// Whether releases reach this client through pub/sub subscriptions.
    pub(crate) fn subscribes(&self) -> bool {
        !matches!(self, Backend::Memory(_))
    }
}

/// Milliseconds for a Redis argument, at least 1.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}
