//! Where locks live: one Redis node, or this process's memory.
//!
//! Both backends answer the same three questions, each decided atomically:
//! take (or re-enter) a lock, give one hold back, and reset the leases of a
//! batch of held locks.

pub(crate) mod memory;
pub(crate) mod redis;

use std::time::Duration;

use ::redis::RedisError;

/// The answer to an acquire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acquire {
    /// The owner holds the lock now, with this fencing token.
    Acquired(u64),
    /// Another owner holds it for about this long more (`None`: no expiry).
    Held(Option<Duration>),
}

/// The answer to a release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Release {
    /// The lock is free: waiters should be woken.
    Freed,
    /// The owner still holds it (a hold count above one).
    StillHeld,
    /// The owner did not hold it any more.
    NotHeld,
}

/// One lock to renew: its key, its owner and its lease.
pub(crate) struct RenewItem<'a> {
    pub key: &'a str,
    pub owner: &'a str,
    pub lease: Duration,
}

/// The backends, dispatched by match: both are known to this crate.
#[derive(Clone)]
pub(crate) enum Backend {
    Redis(redis::RedisBackend),
    Memory(memory::MemoryBackend),
}

impl Backend {
    pub(crate) async fn acquire(
        &self,
        key: &str,
        owner: &str,
        lease: Duration,
    ) -> Result<Acquire, RedisError> {
        match self {
            Backend::Redis(b) => b.acquire(key, owner, lease).await,
            Backend::Memory(b) => Ok(b.acquire(key, owner, lease)),
        }
    }

    pub(crate) async fn release(&self, key: &str, owner: &str) -> Result<Release, RedisError> {
        match self {
            Backend::Redis(b) => b.release(key, owner).await,
            Backend::Memory(b) => Ok(b.release(key, owner)),
        }
    }

    /// One flag per item: whether its lease was reset.
    pub(crate) async fn renew(&self, items: &[RenewItem<'_>]) -> Result<Vec<bool>, RedisError> {
        match self {
            Backend::Redis(b) => b.renew(items).await,
            Backend::Memory(b) => Ok(b.renew(items)),
        }
    }

    /// Makes sure a release of `key` by another client will wake this one.
    pub(crate) async fn watch_releases(&self, key: &str) -> Result<(), RedisError> {
        match self {
            Backend::Redis(b) => b.subscribe(key).await,
            Backend::Memory(_) => Ok(()),
        }
    }

    /// Stops listening for releases of `key` once nobody here waits on it.
    pub(crate) async fn unwatch_releases(&self, key: &str) -> Result<(), RedisError> {
        match self {
            Backend::Redis(b) => b.unsubscribe(key).await,
            Backend::Memory(_) => Ok(()),
        }
    }
}

/// How long a freed key keeps its last fencing token (see `release.lua`).
pub(crate) const FENCE_RETENTION: Duration = Duration::from_secs(10);

/// Milliseconds for a Redis argument, at least 1.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}
