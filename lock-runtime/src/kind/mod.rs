//! Lock kinds: what each kind keeps in Redis, its scripts and how their
//! answers read, its operations, and the same kinds in memory. A kind
//! knows nothing of deployments: it asks a route (`crate::route`) to run
//! its script calls.

pub(crate) mod admin;
pub(crate) mod exclusive;
pub(crate) mod memory;
mod ops;
mod quorum;
pub(crate) mod sources;

use std::time::Duration;

/// The answer to an acquire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acquire {
    /// The owner holds the lock now, with this fencing token.
    Acquired(u64),
    /// Another owner holds it for about this long more (`None`: no expiry).
    Held(Option<Duration>),
    /// The owner took the lock, but fewer replicas than the client's
    /// `sync_replicas` asks for acknowledged the write in time: the caller
    /// gives it back in the background and fails.
    NotReplicated {
        /// The fencing token of the hold to give back.
        token: u64,
        /// How many replicas acknowledged it.
        acked: usize,
    },
}

/// The answer to a release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Release {
    /// The acquisition held the lock until now; it is free.
    Freed,
    /// The acquisition did not hold it any more (it expired, or was erased
    /// or taken): nothing changed.
    NotHeld,
}

/// What a renewal found, for one lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renewal {
    /// Its lease was reset.
    Renewed,
    /// It is gone, held by another owner, or replaced by a value that is
    /// not a lock of this layout (on Redlock: a quorum said so).
    Gone,
    /// Not known (nodes did not answer in time): try again.
    Unknown,
}

/// One lock to renew: its key, its owner and its lease.
pub(crate) struct RenewItem<'a> {
    pub key: &'a str,
    pub owner: &'a str,
    pub lease: Duration,
}
