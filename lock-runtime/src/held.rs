//! A lock this client holds: its key, owner, lease and how long it is known
//! to be valid; and the chain of held locks that a body runs in.

use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::Waker;
use std::time::Duration;

use futures_util::task::AtomicWaker;
use tokio::time::Instant;

use crate::error::{FoundBy, LossReason};
use crate::kind::{Kind, Tail};
use crate::owner_id::{ClientTag, OwnerId};
use crate::turn::Turn;

/// One link of the chain of held locks that a locked body runs in,
/// innermost first.
#[derive(Clone)]
pub(crate) enum Frame {
    /// A lock that the body's call took; its parent is in it.
    Taken(Arc<HeldLock>),
    /// A lock held further out, re-entered by a nested call: its body sees
    /// that lock as the innermost, with the rest of the chain behind it.
    Reentered(Arc<Reentry>),
}

/// A nested call's re-entry of a lock held further out.
pub(crate) struct Reentry {
    /// The lock re-entered.
    held: Arc<HeldLock>,
    /// The chain around the nested call.
    outer: Frame,
    /// The frame whose turn the call holds: the nearest one of `outer` on
    /// the same lock.
    turn_of: Frame,
    /// The turn of calls made inside this one's body on the same lock.
    turn: Turn,
}

impl Frame {
    /// A re-entry of `turn_of`'s lock by a call made in the chain `outer`,
    /// which has taken `turn_of`'s turn.
    pub(crate) fn reentered(turn_of: Frame, outer: Frame) -> Frame {
        Frame::Reentered(Arc::new(Reentry {
            held: turn_of.held().clone(),
            outer,
            turn_of,
            turn: Turn::new(),
        }))
    }

    /// The lock of this link.
    pub(crate) fn held(&self) -> &Arc<HeldLock> {
        match self {
            Frame::Taken(held) => held,
            Frame::Reentered(link) => &link.held,
        }
    }

    /// The lock of this link, taking the link apart.
    pub(crate) fn into_held(self) -> Arc<HeldLock> {
        match self {
            Frame::Taken(held) => held,
            Frame::Reentered(link) => link.held.clone(),
        }
    }

    /// The next link out.
    pub(crate) fn parent(&self) -> Option<&Frame> {
        match self {
            Frame::Taken(held) => held.parent.as_ref(),
            Frame::Reentered(link) => Some(&link.outer),
        }
    }

    /// The turn of calls on this lock made inside this frame's body.
    pub(crate) fn turn(&self) -> &Turn {
        match self {
            Frame::Taken(held) => &held.turn,
            Frame::Reentered(link) => &link.turn,
        }
    }

    /// Ends this frame when its call ends: calls waiting for its turn fail,
    /// and calls that re-entered under it stop at their next poll.
    pub(crate) fn end(&self) {
        self.turn().end();
    }

    /// Ends a re-entry's frame and gives back the turn it took.
    pub(crate) fn leave(&self) {
        self.end();
        if let Frame::Reentered(link) = self {
            link.turn_of.turn().give_back();
        }
    }

    /// Whether this frame's call, or a call whose hold it runs under, has
    /// ended.
    pub(crate) fn has_ended(&self) -> bool {
        match self {
            Frame::Taken(held) => held.turn.has_ended(),
            Frame::Reentered(link) => link.turn.has_ended() || link.turn_of.has_ended(),
        }
    }

    /// Why this frame's body may not run on, if it may not: the hold it
    /// runs under has ended, or the lock is lost (checked against the clock
    /// now).
    pub(crate) fn check_now(&self) -> Option<Loss> {
        if self.has_ended() {
            return Some(Loss::DETACHED);
        }
        self.held().check_now()
    }

    /// The fencing token of this frame's lock while its hold lasts.
    pub(crate) fn token(&self) -> Option<u64> {
        (!self.has_ended()).then(|| self.held().token)
    }
}

/// A loss as the call reports it: what showed it, and which step found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Loss {
    pub reason: LossReason,
    pub found_by: FoundBy,
}

impl Loss {
    /// A renewal found the lock gone or taken.
    pub(crate) const TAKEN: Loss = Loss::new(LossReason::Taken, FoundBy::Renewal);
    /// `force_unlock` on this client freed it.
    pub(crate) const FORCED: Loss = Loss::new(LossReason::ForceUnlocked, FoundBy::ForceUnlock);
    /// Its validity ran out by the clock.
    pub(crate) const EXPIRED: Loss = Loss::new(LossReason::Expired, FoundBy::Clock);
    /// The client's shutdown deadline passed.
    pub(crate) const SHUT_DOWN: Loss = Loss::new(LossReason::ShutDown, FoundBy::ShutDown);
    /// The hold a nested call re-entered ended.
    pub(crate) const DETACHED: Loss = Loss::new(LossReason::Detached, FoundBy::HoldEnded);

    pub(crate) const fn new(reason: LossReason, found_by: FoundBy) -> Loss {
        Loss { reason, found_by }
    }
}

/// How far the lock's validity is trusted, as the watchdog and the body see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Validity {
    /// Valid until this instant unless renewed.
    Until(Instant),
    /// Known lost.
    Lost(Loss),
}

/// Shared by the body's loss watcher, the watchdog and the release.
///
/// One lives for every lock held, so it is kept small: durations as
/// nanoseconds, the owner id written from its number (see [`OwnerId`]).
pub(crate) struct HeldLock {
    pub id: u64,
    /// The client that took it: keys are per client.
    pub client: Arc<ClientTag>,
    /// The chain around the body that took this one, in the same task.
    pub parent: Option<Frame>,
    /// The full key: the client's prefix, then the rendered key.
    pub key: String,
    /// Where the rendered key starts in `key`.
    prefix_len: u32,
    /// Whether the watchdog renews it (otherwise it only watches its expiry).
    pub renew: bool,
    /// The call's label, for its events and metrics.
    pub label: &'static str,
    /// The lease, in nanoseconds.
    lease_ns: u64,
    /// How long a lease is trusted, in nanoseconds: the lease less the
    /// margin for clock-rate drift between this process and the servers.
    valid_ns: u64,
    /// The fencing token this acquisition got.
    pub token: u64,
    /// The kind of lock it holds.
    pub kind: Kind,
    /// How its release keeps it after the body (`hold_at_least`); boxed,
    /// so that a lock without it keeps one word for it.
    tail: Option<Box<Tail>>,
    /// How far the lock is trusted: [`Validity`] packed into a word (see
    /// `pack`), so that renewals and checks are lock-free.
    validity: AtomicU64,
    /// The waker of the call that took the lock, woken when the lock is
    /// found lost. One slot is enough: a re-entered call runs inside the
    /// body of the call that took the lock, which stops it on loss; one
    /// moved out of that body checks its frame at its next poll.
    lost: AtomicWaker,
    /// Told of the loss besides the taking call, by the same mark (a
    /// leader's term, which tells every task that waits on it). Boxed: a
    /// thin pointer, one word on every held lock (few have a listener).
    listener: OnceLock<Box<Arc<dyn OnLoss>>>,
    /// When the watchdog should renew next, in ms after `epoch`
    /// ([`IN_FLIGHT`] while a renewal call is out).
    next_renew_ms: AtomicU64,
    epoch: Instant,
    /// The turn of calls re-entering it from the taking call's body; ended
    /// when that call's body ends.
    turn: Turn,
}

/// One that hears a hold's loss at the moment it is marked, whatever marked
/// it (see [`HeldLock::lose`]).
pub(crate) trait OnLoss: Send + Sync {
    /// The hold was found lost. Called once, on the thread that marked it
    /// (the watchdog's, a renewal's, a release's, a `force_unlock`'s):
    /// quick, and without locks of the caller's.
    fn lost(&self, loss: Loss);
}

/// `next_renew_ms` while a renewal call is out: the watchdog does not send
/// another one for the lock until the call answers or fails.
const IN_FLIGHT: u64 = u64::MAX;

/// How long a lock was granted for: its lease, less the drift margin, and
/// whether it is renewed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Grant {
    pub lease: Duration,
    pub drift: Duration,
    pub renew: bool,
    /// The call's label (see [`crate::LockOptions::label`]).
    pub label: &'static str,
    /// The kind of lock.
    pub kind: Kind,
    /// How long a place in a line lives without a heartbeat.
    pub waiter_lease: Duration,
    /// How long after its acquisition the lock stays taken at least
    /// (`hold_at_least`; never zero: no hold is `None`).
    pub hold_at_least: Option<Duration>,
}

impl HeldLock {
    /// A lock taken by a request sent at `sent`: valid until
    /// `sent + lease - drift`. Granted with `token`, and for a grant with
    /// `hold_at_least`, at `since` (each node's time, see
    /// [`Acquire::Timed`](crate::kind::Acquire::Timed)).
    pub(crate) fn new(
        id: u64,
        (client, parent): (Arc<ClientTag>, Option<Frame>),
        (mut key, prefix_len): (String, usize),
        Grant {
            lease,
            drift,
            renew,
            label,
            kind,
            waiter_lease: _,
            hold_at_least,
        }: Grant,
        (token, since): (u64, Option<Box<[u64]>>),
        sent: Instant,
    ) -> Self {
        // Kept as long as the hold: no spare capacity (the key was
        // rendered into a buffer with room to spare).
        key.shrink_to_fit();
        let valid = lease.saturating_sub(drift);
        let tail = hold_at_least
            .zip(since)
            .map(|(at_least, since)| Box::new(Tail::new(at_least, since)));
        let held = HeldLock {
            id,
            client,
            parent,
            key,
            // A prefix is a few bytes; the clamp only keeps `user_key` in
            // bounds.
            prefix_len: u32::try_from(prefix_len).unwrap_or(u32::MAX),
            renew,
            label,
            lease_ns: nanos(lease),
            valid_ns: nanos(valid),
            token,
            kind,
            tail,
            validity: AtomicU64::new(pack_until(sent, sent + valid)),
            lost: AtomicWaker::new(),
            listener: OnceLock::new(),
            next_renew_ms: AtomicU64::new(0),
            epoch: sent,
            turn: Turn::new(),
        };
        held.schedule_renewal(sent + lease / 3);
        held.client.life.hold_started();
        held
    }

    /// The owner id the backend knows this hold by.
    pub(crate) fn owner_id(&self) -> OwnerId {
        OwnerId::new(&self.client.id, self.owner_number())
    }

    /// The number in its owner id: its own `id`. (The checker's proof can
    /// make nested calls take the outermost call's instead.)
    pub(crate) fn owner_number(&self) -> u64 {
        match &self.parent {
            Some(parent) if cfg!(feature = "defect-shared-owner") => parent.held().owner_number(),
            _ => self.id,
        }
    }

    /// When the request that took the lock was sent.
    pub(crate) fn held_since(&self) -> Instant {
        self.epoch
    }

    /// How the release keeps the lock after its body (`hold_at_least`):
    /// `None` without it, and for a lock known lost (a lost lock gets no
    /// tail: its release only frees what may remain of it).
    pub(crate) fn tail(&self) -> Option<&Tail> {
        self.tail.as_deref().filter(|_| !self.is_lost())
    }

    /// How long the lock lives in the backend without a renewal.
    pub(crate) fn lease(&self) -> Duration {
        Duration::from_nanos(self.lease_ns)
    }

    /// The interval between renewals: a third of the lease.
    pub(crate) fn renew_interval(&self) -> Duration {
        self.lease() / 3
    }

    /// When the watchdog should renew this lock next; `None` while a
    /// renewal call is out ([`renewal_sent`](HeldLock::renewal_sent)).
    pub(crate) fn next_renewal(&self) -> Option<Instant> {
        match self.next_renew_ms.load(Ordering::Relaxed) {
            IN_FLIGHT => None,
            ms => Some(self.epoch + Duration::from_millis(ms)),
        }
    }

    /// A renewal call for this lock is out: no other is sent until it
    /// answers or fails (which schedules the next one).
    pub(crate) fn renewal_sent(&self) {
        self.next_renew_ms.store(IN_FLIGHT, Ordering::Relaxed);
    }

    /// Sets when the watchdog should renew this lock next.
    pub(crate) fn schedule_renewal(&self, at: Instant) {
        let ms = at.saturating_duration_since(self.epoch).as_millis();
        self.next_renew_ms.store(
            u64::try_from(ms)
                .unwrap_or(IN_FLIGHT - 1)
                .min(IN_FLIGHT - 1),
            Ordering::Relaxed,
        );
    }

    /// A renewal sent at `sent` succeeded: the lock is valid for another lease.
    pub(crate) fn renewed(&self, sent: Instant) {
        let until = pack_until(self.epoch, sent + Duration::from_nanos(self.valid_ns));
        // Lost states pack above every instant: a renewal cannot undo a loss.
        self.validity.fetch_max(until, Ordering::AcqRel);
        self.schedule_renewal(sent + self.renew_interval());
    }

    /// Marks the lock lost, unless it already is: the one path of every
    /// loss, whatever found it (the clock, a renewal's or a release's
    /// answer, `force_unlock`, the shutdown). The first mark wins; it wakes
    /// the taking call (whose next poll drops the body) and tells the
    /// listener, once. Answers the loss the hold is marked with.
    pub(crate) fn lose(&self, loss: Loss) -> Loss {
        let lost = pack_lost(loss);
        let marked = self
            .validity
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| {
                (v < LOST_FIRST).then_some(lost)
            });
        match marked {
            Ok(_) => {
                self.lost.wake();
                // Paired with the fence in `listen`: a listener set
                // meanwhile is seen here, or sees the mark there.
                fence(Ordering::SeqCst);
                if let Some(listener) = self.listener.get() {
                    listener.lost(loss);
                }
                loss
            }
            Err(word) => match unpack(self.epoch, word) {
                Validity::Lost(first) => first,
                Validity::Until(_) => loss,
            },
        }
    }

    /// Has `listener` told of this hold's loss, at once if it is lost
    /// already. One listener per hold (a later one is ignored).
    pub(crate) fn listen(&self, listener: Arc<dyn OnLoss>) {
        if self.listener.set(Box::new(listener)).is_err() {
            return;
        }
        fence(Ordering::SeqCst);
        if let (Validity::Lost(loss), Some(listener)) = (self.validity(), self.listener.get()) {
            // Told twice at most (here and by the mark): listeners keep
            // the first.
            listener.lost(loss);
        }
    }

    /// Until when the lock is trusted; `None` once it is lost.
    pub(crate) fn valid_until(&self) -> Option<Instant> {
        match self.validity() {
            Validity::Until(until) => Some(until),
            Validity::Lost(_) => None,
        }
    }

    /// Has `waker` woken when the lock is found lost, in place of the waker
    /// given before. Call it before checking the lock ([`check_now`]), so
    /// that a loss in between is not missed.
    ///
    /// [`check_now`]: HeldLock::check_now
    pub(crate) fn wake_on_loss(&self, waker: &Waker) {
        self.lost.register(waker);
    }

    fn validity(&self) -> Validity {
        unpack(self.epoch, self.validity.load(Ordering::Acquire))
    }

    /// The key as the caller wrote it, without the client's prefix.
    pub(crate) fn user_key(&self) -> &str {
        self.key.get(self.prefix_len as usize..).unwrap_or_default()
    }

    /// Whether the lock is lost, checking its validity against the clock
    /// now rather than waiting for the timer.
    pub(crate) fn check_now(&self) -> Option<Loss> {
        match self.validity() {
            Validity::Lost(loss) => Some(loss),
            Validity::Until(until) if Instant::now() >= until => Some(self.lose(Loss::EXPIRED)),
            Validity::Until(_) => None,
        }
    }

    /// Whether the lock is known lost.
    pub(crate) fn is_lost(&self) -> bool {
        matches!(self.validity(), Validity::Lost(_))
    }
}

impl Drop for HeldLock {
    fn drop(&mut self) {
        self.client.life.hold_ended();
    }
}

/// `Validity` in a word: an instant as nanoseconds after the lock's epoch,
/// or a lost state above every instant, `LOST_FIRST` plus the loss's
/// reason and what found it (see [`pack_lost`]).
const LOST_FIRST: u64 = u64::MAX - 63;

fn pack_until(epoch: Instant, until: Instant) -> u64 {
    let nanos = until.saturating_duration_since(epoch).as_nanos();
    u64::try_from(nanos)
        .unwrap_or(LOST_FIRST - 1)
        .min(LOST_FIRST - 1)
}

/// The reasons and finders in the order their numbers pack them.
const REASONS: [LossReason; 8] = [
    LossReason::Taken,
    LossReason::Expired,
    LossReason::Unconfirmed,
    LossReason::ShutDown,
    LossReason::Detached,
    LossReason::ReleaseUnanswered,
    LossReason::ForceUnlocked,
    LossReason::Gone,
];
const FINDERS: [FoundBy; 6] = [
    FoundBy::Renewal,
    FoundBy::Release,
    FoundBy::ForceUnlock,
    FoundBy::Clock,
    FoundBy::ShutDown,
    FoundBy::HoldEnded,
];

/// A loss in a word: its reason and what found it, each by its place in
/// [`REASONS`] and [`FINDERS`].
fn pack_lost(loss: Loss) -> u64 {
    let reason = REASONS.iter().position(|r| *r == loss.reason).unwrap_or(0);
    let finder = FINDERS
        .iter()
        .position(|f| *f == loss.found_by)
        .unwrap_or(0);
    LOST_FIRST + (reason as u64) * 8 + finder as u64
}

fn unpack(epoch: Instant, word: u64) -> Validity {
    if word < LOST_FIRST {
        return Validity::Until(epoch + Duration::from_nanos(word));
    }
    let n = (word - LOST_FIRST) as usize;
    let reason = REASONS.get(n / 8).copied().unwrap_or(LossReason::Taken);
    let found_by = FINDERS.get(n % 8).copied().unwrap_or(FoundBy::Renewal);
    Validity::Lost(Loss::new(reason, found_by))
}

/// A duration in nanoseconds, saturating (at about 584 years).
fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::HeldLock;
    use crate::turn::Turn;

    /// Every loss packs into the word and comes back as it was marked.
    #[test]
    fn a_loss_packs_and_unpacks() {
        let epoch = tokio::time::Instant::now();
        for reason in super::REASONS {
            for found_by in super::FINDERS {
                let loss = super::Loss::new(reason, found_by);
                let word = super::pack_lost(loss);
                assert!(word >= super::LOST_FIRST);
                assert_eq!(
                    super::unpack(epoch, word),
                    super::Validity::Lost(loss),
                    "{loss:?}"
                );
            }
        }
    }

    /// One lives for every lock held, with its renewal's state: a field
    /// more is memory on every held lock (see lock-bench's workload (e)).
    #[test]
    fn a_held_lock_stays_small() {
        assert!(std::mem::size_of::<Turn>() <= 24);
        let size = std::mem::size_of::<HeldLock>();
        assert!(size <= 216, "a held lock takes {size} bytes");
    }
}
