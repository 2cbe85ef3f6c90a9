//! Lock kinds: what each kind keeps in Redis, its scripts and how their
//! answers read, and its operations. A kind knows nothing of deployments:
//! it asks a route (`crate::route`) to run its script calls, and the same
//! scripts run on every route, the embedded backend's included.

pub(crate) mod admin;
mod answers;
mod calls;
pub(crate) mod exclusive;
pub(crate) mod fenced;
pub(crate) mod quorum;
pub(crate) mod quorum_several;
pub(crate) mod scripted;
pub(crate) mod several;
pub(crate) mod shared;
pub(crate) mod sources;

use std::time::Duration;

pub(crate) use answers::kind_mismatch;

use crate::error::LossReason;
use crate::options::{LockMode, LockOptions};

/// Which kind of lock a call takes (see the kinds guide).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// The plain lock, and `mode = "write"`: one holder.
    Exclusive,
    /// `mode = "read"`: any number of readers, no writer.
    Read,
    /// `permits = n`: at most n holders.
    Permits(u32),
    /// `fair = true`: one holder, waiters served in arrival order.
    Fair,
}

impl Kind {
    /// The kind as the attribute writes it, for errors.
    pub(crate) fn name(self) -> String {
        match self {
            Kind::Exclusive => "a plain or write lock (no mode, or mode = \"write\")".into(),
            Kind::Read => "a read-write lock as a reader (mode = \"read\")".into(),
            Kind::Permits(n) => format!("a counted lock (permits = {n})"),
            Kind::Fair => "a fair lock (fair = true)".into(),
        }
    }
}

impl Kind {
    /// The kind `options` ask for, or what is wrong with them.
    pub(crate) fn of(options: &LockOptions) -> Result<Kind, &'static str> {
        match (
            options.lock_mode(),
            options.permit_count(),
            options.is_fair(),
        ) {
            (_, Some(0), _) => Err("permits must be at least 1"),
            (LockMode::Read, Some(_), _) => Err(
                "permits and mode = read together: a counted lock has no readers; \
                 choose one of them",
            ),
            (LockMode::Read, None, true) | (_, Some(_), true) => Err(
                "fair with mode = read or permits: only the exclusive lock has a fair \
                 kind; drop fair, or the other option",
            ),
            (LockMode::Write, Some(n), false) => Ok(Kind::Permits(n)),
            (LockMode::Read, None, false) => Ok(Kind::Read),
            (LockMode::Write, None, true) => Ok(Kind::Fair),
            (LockMode::Write, None, false) => Ok(Kind::Exclusive),
        }
    }

    /// Whether calls of this kind and of `other` can share a key (see the
    /// kinds guide, "Which kinds share a key"): plain, write and read are
    /// one read-write lock; permits only with the same count; fair only
    /// with fair.
    pub(crate) fn shares_key_with(self, other: Kind) -> bool {
        match (self, other) {
            (Kind::Exclusive | Kind::Read, Kind::Exclusive | Kind::Read)
            | (Kind::Fair, Kind::Fair) => true,
            (Kind::Permits(a), Kind::Permits(b)) => a == b,
            _ => false,
        }
    }

    /// Whether a call asking for `asked` re-enters a hold of this kind
    /// around it: `Ok(true)` it does, `Ok(false)` it asks for another kind
    /// (a mismatch), `Err` for a write under a read hold (an upgrade, which
    /// would wait for the body's own hold).
    pub(crate) fn reenters(self, asked: Kind) -> Result<bool, &'static str> {
        match (self, asked) {
            (Kind::Exclusive | Kind::Fair, _) | (Kind::Read, Kind::Read) => Ok(true),
            (Kind::Permits(held), Kind::Permits(n)) => Ok(held == n),
            (Kind::Read, Kind::Exclusive) => Err(
                "a write (or plain) lock inside a read hold of the same key: the upgrade \
                 would wait for the body's own read hold; take the write lock around the \
                 read, or end the read first",
            ),
            _ => Ok(false),
        }
    }
}

/// What one acquire request asks for: the kind, the lease, and how long a
/// place in a line lives without a heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Claim {
    pub kind: Kind,
    pub lease: Duration,
    pub waiter_lease: Duration,
    /// Whether other callers of this client wait behind this one on the
    /// key: a shared kind's grant then keeps the key marked as waited for,
    /// so that the next release that opens a place tells them.
    pub others_wait: bool,
    /// Whether the call keeps the lock taken some time after it took it
    /// (`hold_at_least`, the exclusive lock only): a grant then answers the
    /// node's time too ([`Acquire::Timed`]), from which the release counts
    /// the hold's end on that node.
    pub timed: bool,
}

impl Claim {
    /// How long a release that gives back what a request of this claim
    /// took lives in the backend: a hold lives for the lease, a place in a
    /// line (a writer's claim, a fair ticket) for the waiter lease. A route
    /// that fails over keeps such a release that long, to send it again to
    /// a new master (see `route/replay.rs`): kept for the lease alone, a
    /// withdrawn place of a longer waiter lease would come back there.
    pub(crate) fn give_back_lease(&self) -> Duration {
        self.lease.max(self.waiter_lease)
    }
}

/// The answer to an acquire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Acquire {
    /// The owner holds the lock now, with this fencing token.
    Acquired(u64),
    /// The owner holds the lock now, with this fencing token, for a timed
    /// claim ([`Claim::timed`]): `since` is each node's time when it
    /// granted it, in ms since the epoch by that node's clock; one on a
    /// route, one per node in node order on Redlock (0 where a node did
    /// not grant it).
    Timed { token: u64, since: Box<[u64]> },
    /// A shared kind (reader, permit holder, fair holder) holds it now,
    /// with this fencing token; `room` when another caller of the kind
    /// could enter now too (the next waiter here should try).
    Shared { token: u64, room: bool },
    /// Another owner holds it for about this long more (`None`: no expiry).
    Held(Option<Duration>),
    /// Not taken, and the owner now keeps a place in a line (a fair
    /// waiter's ticket, a writer's claim ahead of new readers) for the
    /// claim's waiter lease: the caller asks again within that time to keep
    /// it, and withdraws it (a release of the same owner id) when it gives
    /// up.
    Queued {
        /// As for `Held`: when to ask again without news (the holder's
        /// expiry, or a fair place ahead's when that comes first).
        ttl: Option<Duration>,
        /// What the holder's lease has left, for the caller's events (zero
        /// when nobody holds a fair lock and a waiter ahead goes first; for
        /// a writer's claim, `ttl`).
        holder_ttl: Option<Duration>,
    },
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

impl Acquire {
    /// The fencing token of a granting answer.
    pub(crate) fn token(&self) -> Option<u64> {
        match *self {
            Acquire::Acquired(token)
            | Acquire::Timed { token, .. }
            | Acquire::Shared { token, .. }
            | Acquire::NotReplicated { token, .. } => Some(token),
            Acquire::Held(_) | Acquire::Queued { .. } => None,
        }
    }

    /// What the holder's lease has left, by a refusal (for the caller's
    /// events); `None` for a grant, or a holder without an expiry.
    pub(crate) fn holder_ttl(&self) -> Option<Duration> {
        match *self {
            Acquire::Held(ttl)
            | Acquire::Queued {
                holder_ttl: ttl, ..
            } => ttl,
            _ => None,
        }
    }
}

/// How a hold taken with `hold_at_least` ends after its body: kept until
/// `at_least` after its acquisition by each node's clock, then free by
/// itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tail {
    /// The `hold_at_least` of the call.
    pub at_least: Duration,
    /// The end on each node, in ms since the epoch by that node's clock:
    /// the time its grant answered plus `at_least`. One on a route, one
    /// per node in node order on Redlock (0 where a node did not grant).
    pub ends: Box<[u64]>,
}

impl Tail {
    /// The tail of a hold granted at `since` (each node's time, as
    /// [`Acquire::Timed`] gives it), kept `at_least` after it.
    pub(crate) fn new(at_least: Duration, mut since: Box<[u64]>) -> Tail {
        let add = u64::try_from(at_least.as_millis()).unwrap_or(u64::MAX);
        for at in since.iter_mut().filter(|at| **at > 0) {
            *at = at.saturating_add(add);
        }
        Tail {
            at_least,
            ends: since,
        }
    }

    /// What the release on node `i` (0 on a route) carries, if that node
    /// granted the hold.
    pub(crate) fn on_node(&self, i: usize) -> Option<End> {
        let at_ms = self.ends.get(i).copied().filter(|at| *at > 0)?;
        Some(End {
            at_ms,
            at_least: self.at_least,
        })
    }
}

/// What a release carries to one node for a hold taken with
/// `hold_at_least`: the hold's end there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct End {
    /// The end, in ms since the epoch by the node's clock.
    pub at_ms: u64,
    /// The call's `hold_at_least`: a route that fails over keeps the
    /// release at least this long, to send it again to a new master
    /// before the end.
    pub at_least: Duration,
}

/// The answer to a release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Release {
    /// The acquisition held the lock until now, or its own earlier release
    /// freed it (this one was sent again); it is free.
    Freed,
    /// The acquisition did not hold it any more: nothing changed.
    NotHeld(Ended),
}

/// What a release or a renewal that did not find its hold learned of its
/// end, from the freed value or the record of who freed the key (see
/// `ended` in `lua/exclusive/read.lua`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// Another owner holds it, or held it since (a value that is not a
    /// lock of this layout counts as one).
    Taken,
    /// Gone or free, with nothing naming who freed it: erased, expired in
    /// Redis, or freed longer ago than the record keeps.
    Gone,
    /// An operator freed it (`force_unlock`).
    ForceUnlocked,
}

impl Ended {
    /// The loss it means for the hold.
    pub(crate) fn reason(self) -> LossReason {
        match self {
            Ended::Taken => LossReason::Taken,
            Ended::Gone => LossReason::Gone,
            Ended::ForceUnlocked => LossReason::ForceUnlocked,
        }
    }

    /// The end that several nodes' answers (Redlock) tell together: an
    /// operator's free over a taking, a taking over a key gone.
    pub(crate) fn worst(self, other: Ended) -> Ended {
        let rank = |e: Ended| match e {
            Ended::Gone => 0,
            Ended::Taken => 1,
            Ended::ForceUnlocked => 2,
        };
        if rank(other) > rank(self) {
            other
        } else {
            self
        }
    }
}

/// What a renewal found, for one lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renewal {
    /// Its lease was reset.
    Renewed,
    /// It is not held by its owner any more (on Redlock: a quorum said
    /// so), and what ended it.
    Gone(Ended),
    /// Not known (nodes did not answer in time): try again.
    Unknown,
}

/// One lock to renew: its key, its owner, the fencing token its acquire
/// answered, and its lease.
pub(crate) struct RenewItem<'a> {
    pub key: &'a str,
    pub owner: &'a str,
    pub token: u64,
    pub lease: Duration,
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Claim, End, Kind, Tail};

    #[test]
    fn a_tail_ends_on_each_node_by_its_own_clock() {
        let at_least = Duration::from_millis(1500);
        // Two nodes granted at their own times; the second did not.
        let tail = Tail::new(at_least, Box::new([1_000_000, 0, 2_000_000]));
        let end = |at_ms| Some(End { at_ms, at_least });
        assert_eq!(tail.on_node(0), end(1_001_500));
        assert_eq!(tail.on_node(1), None, "no grant there: freed at once");
        assert_eq!(tail.on_node(2), end(2_001_500));
        assert_eq!(tail.on_node(3), None);
    }

    #[test]
    fn a_give_back_is_kept_as_long_as_what_it_gives_back_lives() {
        let claim = |lease, waiter_lease| Claim {
            kind: Kind::Exclusive,
            lease: Duration::from_secs(lease),
            waiter_lease: Duration::from_secs(waiter_lease),
            others_wait: false,
            timed: false,
        };
        // A writer's claim (a place) outlives the hold's lease.
        assert_eq!(claim(1, 30).give_back_lease(), Duration::from_secs(30));
        assert_eq!(claim(60, 5).give_back_lease(), Duration::from_secs(60));
    }
}
