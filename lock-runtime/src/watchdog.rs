//! One task per client renews every held lock at a third of its lease, and
//! marks a lock lost at its trusted end (its lease less the drift margin,
//! moved by each confirmed renewal) when no renewal confirmed it in time
//! (no timer per lock).
//!
//! The mark never waits for renewal I/O: the task sends renewal calls (a
//! few at a time, the rest in turn) and goes on keeping time while they are
//! out, each with a deadline of its own (past the end of every lock it
//! carries, its answer could not save any), so a connection that stalls
//! without a reset delays no expiry. A lock with a renewal call out or
//! waiting its turn gets no second one until that call answers or fails.
//!
//! Locks that fall due close together (within a quarter of their renewal
//! interval) are renewed together, in the order they were taken, by script
//! calls of at most `renewal_batch_size` locks each (256 by default) and
//! about 64 KiB of keys and values, so a client holding many locks with
//! the same lease sends a few commands per period, not one per lock, and
//! each call blocks Redis for a bounded time. A renewal that finds a lock
//! gone or taken marks it lost at once; a renewal that fails (Redis down or
//! slow, or on Redlock too few nodes answering either way) is retried until
//! the lock's trusted end, where the clock marks it lost. Either way the
//! client's line for the key is woken at once, so that its head tries the
//! lock rather than sleeping until its own deadline. A lock whose body has
//! ended (unregistered) is neither sent for renewal nor marked by a late
//! answer.

use std::borrow::Borrow;
use std::collections::{HashSet, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::backend::Backend;
use crate::error::FoundBy;
use crate::held::{HeldLock, Loss};
use crate::kind::{RenewItem, Renewal};
use crate::owner_id::OwnerId;
use crate::telemetry;
use crate::wakeup::Waiters;

/// A lock the watchdog watches, found by its id: one pointer per entry
/// (the id is the lock's own).
struct Watched(Arc<HeldLock>);

impl Borrow<u64> for Watched {
    fn borrow(&self) -> &u64 {
        &self.0.id
    }
}

// As its id, so that a set of them is searched by id.
impl Hash for Watched {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.id.hash(state);
    }
}

impl PartialEq for Watched {
    fn eq(&self, other: &Self) -> bool {
        self.0.id == other.0.id
    }
}

impl Eq for Watched {}

/// The locks that the watchdog renews.
pub(crate) struct Registry {
    locks: Mutex<HashSet<Watched>>,
    /// When the task will wake next, in ms after `epoch` (`u64::MAX` while
    /// it is awake).
    wake_at_ms: AtomicU64,
    epoch: Instant,
    changed: Notify,
    /// Woken on a key when its lock is found lost.
    waiters: Arc<Waiters>,
}

impl Registry {
    pub(crate) fn new(waiters: Arc<Waiters>) -> Arc<Self> {
        Arc::new(Registry {
            locks: Mutex::new(HashSet::new()),
            wake_at_ms: AtomicU64::new(u64::MAX),
            epoch: Instant::now(),
            changed: Notify::new(),
            waiters,
        })
    }

    /// Marks `held` lost and wakes this client's line for its key.
    fn lose(&self, held: &HeldLock, loss: Loss) {
        held.lose(loss);
        self.waiters.wake_release(held.key.as_bytes(), 0);
    }

    fn with<R>(&self, f: impl FnOnce(&mut HashSet<Watched>) -> R) -> R {
        f(&mut self.locks.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn ms(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.epoch).as_millis()).unwrap_or(u64::MAX)
    }

    /// Starts watching `held` (and renewing it, if it renews); wakes the
    /// task only if it sleeps past the lock's first renewal or expiry.
    pub(crate) fn register(&self, held: Arc<HeldLock>) {
        let due = self.ms(next_event(&held).unwrap_or(self.epoch));
        telemetry::held(&held);
        self.with(|locks| locks.insert(Watched(held)));
        if due < self.wake_at_ms.load(Ordering::Acquire) {
            self.changed.notify_one();
        }
    }

    /// Stops renewing the lock `id`; whether it was watched.
    pub(crate) fn unregister(&self, id: u64) -> bool {
        let Some(Watched(held)) = self.with(|locks| locks.take(&id)) else {
            return false;
        };
        telemetry::unheld(&held);
        true
    }

    /// The locks of `due` still watched: a lock whose body ended since is
    /// not renewed (its release may have kept it until a `hold_at_least`
    /// end that a renewal must not move).
    fn still_watched(&self, due: &mut Vec<Arc<HeldLock>>) {
        self.with(|locks| due.retain(|held| locks.contains(&held.id)));
    }

    /// Whether a lock on `key` (full key) is watched now: held by a body
    /// of this client.
    pub(crate) fn holds(&self, key: &str) -> bool {
        self.with(|locks| locks.iter().any(|Watched(held)| held.key == key))
    }

    /// The locks watched now.
    pub(crate) fn snapshot(&self) -> Vec<Arc<HeldLock>> {
        self.with(|locks| locks.iter().map(|Watched(held)| held.clone()).collect())
    }

    /// How many locks are being renewed.
    pub(crate) fn renewing(&self) -> usize {
        self.with(|locks| locks.iter().filter(|Watched(held)| held.renew).count())
    }

    /// Marks the locks whose validity has run out lost, and returns the
    /// locks due for renewal at `now` and when the next event falls due.
    ///
    /// When one lock is due, the locks due within the next quarter of their
    /// renewal interval go with it, so that locks taken at different moments
    /// gather into a few batches per period rather than one call each.
    fn due(&self, now: Instant) -> (Vec<Arc<HeldLock>>, Option<Instant>) {
        self.with(|locks| {
            locks.retain(|Watched(held)| match held.valid_until() {
                Some(until) if until > now => true,
                _ => {
                    self.lose(held, Loss::EXPIRED);
                    telemetry::unheld(held);
                    false
                }
            });
            let next = locks
                .iter()
                .filter_map(|Watched(held)| next_event(held))
                .min();
            if next.is_none_or(|n| n > now) {
                return (Vec::new(), next);
            }
            let due = locks
                .iter()
                .map(|Watched(held)| held)
                .filter(|held| held.renew)
                .filter(|held| {
                    held.next_renewal()
                        .is_some_and(|at| at <= now + held.renew_interval() / 4)
                })
                .cloned()
                .collect();
            (due, next)
        })
    }
}

/// When the watchdog must next look at `held`: its renewal, or the end of
/// its validity, whichever is first (the end alone while a renewal call is
/// out).
fn next_event(held: &HeldLock) -> Option<Instant> {
    let until = held.valid_until()?;
    Some(match held.next_renewal() {
        Some(renewal) if held.renew => renewal.min(until),
        _ => until,
    })
}

/// How many renewal calls are out at once, at most; the others wait their
/// turn (their locks are not due again meanwhile). One: Redis runs each
/// call in about the same time whatever the client does meanwhile, and
/// measured (lock-bench (e), 100,000 locks) a second call out beside it
/// made each call slower in Redis (about 1.5 times the Redis time per held
/// lock, as client and server share the cores), and all of them out at
/// once queued on the connection until a third of them timed out. The
/// expiry pass does not wait for them either way.
const CALLS_OUT: usize = 1;

/// Runs until the client's background runtime stops.
///
/// A renewal call renews at most `batch` locks
/// ([`LockClientBuilder::renewal_batch_size`](crate::LockClientBuilder::renewal_batch_size)).
/// The calls run inside this task, beside the pass that marks expiries
/// ([`CALLS_OUT`] at a time): the task sleeps until the next renewal or
/// trusted end, a registration that falls due earlier, or a call's answer,
/// whichever comes first.
pub(crate) async fn run(registry: Arc<Registry>, backend: Backend, batch: usize) {
    let mut calls = FuturesUnordered::new();
    let mut waiting: VecDeque<Vec<Arc<HeldLock>>> = VecDeque::new();
    // The next event the last pass over the locks found, and the earliest
    // that a call's answer set since (a renewal, or a retry).
    let (mut next, mut set): (Option<Instant>, Option<Instant>) = (None, None);
    // Whether to pass over every lock: at an event or a registration, not
    // at a call's answer (a pass reads every held lock, which at 100,000
    // locks costs the next call's Redis time in cache misses).
    let mut pass = true;
    loop {
        let now = Instant::now();
        if pass {
            let (mut due, found) = registry.due(now);
            (next, set) = (found, None);
            // In the order they were taken: Redis made their keys in about
            // that order, close together in its memory, so a batch of
            // them is read with fewer cache misses than one in the
            // registry's order (a third less Redis time at 100,000 locks).
            due.sort_unstable_by_key(|held| held.id);
            waiting.extend(split(due, batch));
        }
        while calls.len() < CALLS_OUT {
            let Some(call) = waiting.pop_front() else {
                break;
            };
            calls.push(renew_batch(&registry, &backend, call));
        }
        let wake = next
            .into_iter()
            .chain(set)
            .min()
            .unwrap_or(now + Duration::from_secs(3600));
        registry
            .wake_at_ms
            .store(registry.ms(wake), Ordering::Release);
        pass = tokio::select! {
            () = tokio::time::sleep_until(wake) => true,
            () = registry.changed.notified() => true,
            Some(again) = calls.next(), if !calls.is_empty() => {
                set = set.into_iter().chain(again).min();
                false
            }
        };
        // Awake: any registration from now until the next sleep notifies,
        // leaving a permit, so none is missed.
        registry.wake_at_ms.store(u64::MAX, Ordering::Release);
    }
}

/// `due` split into renewal calls of at most `most` locks and about
/// [`CALL_BYTES`] each, each lock marked as having a call out.
fn split(due: Vec<Arc<HeldLock>>, most: usize) -> Vec<Vec<Arc<HeldLock>>> {
    let mut calls = Vec::new();
    let mut rest = &due[..];
    while !rest.is_empty() {
        let (call, after) = rest.split_at(batch_len(rest, most));
        call.iter().for_each(|held| held.renewal_sent());
        calls.push(call.to_vec());
        rest = after;
    }
    calls
}

/// The most bytes of keys and owner ids that one renewal call carries
/// (with at least one lock), whatever `renewal_batch_size` allows: Redis
/// reads each byte of a call's keys and values (it hashes and copies them),
/// so that a batch of long keys blocks it about as long as a batch of
/// short ones. 256 locks of keys up to some 150 bytes fit.
const CALL_BYTES: usize = 64 * 1024;

/// What one held lock adds to a renewal call besides its key: its owner id
/// (at most 53 bytes, see [`OwnerId`]) in the value renew.lua expects, and
/// the framing.
const ITEM_BYTES: usize = 53 + 48;

/// How many of the first locks of `due` the next renewal call carries: at
/// most `most`, and no more than [`CALL_BYTES`] (at least one).
fn batch_len(due: &[Arc<HeldLock>], most: usize) -> usize {
    fitting(due.iter().map(|held| held.key.len()), most)
}

/// How many of the first keys of these lengths one renewal call carries:
/// at most `most`, and no more than [`CALL_BYTES`] (at least one).
fn fitting(key_lens: impl ExactSizeIterator<Item = usize>, most: usize) -> usize {
    let n = key_lens.len().min(most);
    let mut bytes = 0;
    let over = key_lens.take(n).position(|len| {
        bytes += len + ITEM_BYTES;
        bytes > CALL_BYTES
    });
    over.map_or(n, |at| at.max(1))
}

/// One renewal call's locks: renewed, lost, or to try again soon. Answers
/// the earliest renewal it scheduled, if any.
///
/// The call's deadline is the latest trusted end among its locks: by then
/// the clock has marked every one of them lost, and no answer could renew
/// them. The locks whose body ended before the call goes out are left out.
async fn renew_batch(
    registry: &Registry,
    backend: &Backend,
    mut batch: Vec<Arc<HeldLock>>,
) -> Option<Instant> {
    registry.still_watched(&mut batch);
    let deadline = batch.iter().filter_map(|held| held.valid_until()).max()?;
    let owners: Vec<OwnerId> = batch.iter().map(|h| h.owner_id()).collect();
    let items: Vec<RenewItem<'_>> = batch
        .iter()
        .zip(&owners)
        .map(|(h, owner)| RenewItem {
            key: &h.key,
            owner,
            token: h.token,
            lease: h.lease(),
        })
        .collect();
    let sent = Instant::now();
    let answer = tokio::time::timeout_at(deadline, backend.renew(&items)).await;
    let found = match answer {
        Ok(Ok(found)) => found,
        Ok(Err(error)) => {
            telemetry::renewal_failed(&batch, &error);
            return batch.iter().map(|held| retry_soon(held)).min();
        }
        Err(_elapsed) => {
            let error = "no answer before the trusted end of every lock of the call";
            telemetry::renewal_failed(&batch, &error);
            return batch.iter().map(|held| retry_soon(held)).min();
        }
    };
    let mut next = None;
    for (held, renewal) in batch.iter().zip(found) {
        match renewal {
            Renewal::Renewed => {
                held.renewed(sent);
                telemetry::renewed(held);
                next = next.into_iter().chain(held.next_renewal()).min();
            }
            // A lock whose body ended meanwhile: its release tells.
            Renewal::Gone(_) if !registry.unregister(held.id) => {}
            Renewal::Gone(ended) => {
                telemetry::renewal_found_gone(held);
                registry.lose(held, Loss::new(ended.reason(), FoundBy::Renewal));
            }
            Renewal::Unknown => {
                let error = "too few nodes answered in time";
                telemetry::renewal_failed(std::slice::from_ref(held), &error);
                next = next.into_iter().chain([retry_soon(held)]).min();
            }
        }
    }
    next
}

/// Schedules another renewal of `held` soon: a third of its interval.
fn retry_soon(held: &HeldLock) -> Instant {
    let retry = (held.renew_interval() / 3).max(Duration::from_millis(10));
    let at = Instant::now() + retry;
    held.schedule_renewal(at);
    at
}

#[cfg(test)]
mod tests {
    use super::{fitting, CALL_BYTES, ITEM_BYTES};

    #[test]
    fn a_renewal_call_carries_at_most_the_batch_size_and_the_bytes() {
        let short = || std::iter::repeat_n(20, 2_000);
        assert_eq!(
            fitting(short(), 512),
            512,
            "the batch size bounds short keys"
        );
        assert_eq!(
            fitting(std::iter::repeat_n(20, 100), 512),
            100,
            "all there are"
        );
        // Keys of 1 KiB: the bytes bound the call, below the batch size.
        let long = std::iter::repeat_n(1024, 2_000);
        assert_eq!(fitting(long, 512), CALL_BYTES / (1024 + ITEM_BYTES));
        // One key longer than the bound still goes, alone.
        let huge = [CALL_BYTES * 2, 10].into_iter();
        assert_eq!(fitting(huge, 512), 1);
        assert_eq!(fitting(std::iter::empty(), 512), 0);
    }
}
