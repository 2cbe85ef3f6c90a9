//! A lock this client holds: its key, owner, lease and how long it is known
//! to be valid.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::LossReason;

/// How far the lock's validity is trusted, as the watchdog and the body see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Validity {
    /// Valid until this instant unless renewed.
    Until(Instant),
    /// Known lost.
    Lost(LossReason),
}

/// Shared by the body's loss watcher, the watchdog and the release.
pub(crate) struct HeldLock {
    pub id: u64,
    /// The id of the client that took it: keys are per client.
    pub client: Arc<str>,
    /// The lock held around the body that took this one, in the same task.
    pub parent: Option<Arc<HeldLock>>,
    /// The full key: the client's prefix, then the rendered key.
    pub key: String,
    /// Where the rendered key starts in `key`.
    prefix_len: usize,
    pub owner: Arc<str>,
    pub lease: Duration,
    /// The margin kept off every lease for clock-rate drift between this
    /// process and the servers.
    drift: Duration,
    /// The fencing token this acquisition got.
    pub token: u64,
    /// Whether the watchdog renews it (otherwise it only watches its expiry).
    pub renew: bool,
    /// How far the lock is trusted: [`Validity`] packed into a word (see
    /// `pack`), so that renewals and checks are lock-free.
    validity: AtomicU64,
    /// Woken when the lock is found lost.
    lost: Notify,
    /// When the watchdog should renew next, in ms after `epoch`.
    next_renew_ms: AtomicU64,
    epoch: Instant,
}

/// How long a lock was granted for: its lease, less the drift margin, and
/// whether it is renewed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Term {
    pub lease: Duration,
    pub drift: Duration,
    pub renew: bool,
}

impl HeldLock {
    /// A lock taken by a request sent at `sent`: valid until
    /// `sent + lease - drift`.
    pub(crate) fn new(
        id: u64,
        (client, parent): (Arc<str>, Option<Arc<HeldLock>>),
        (key, prefix_len): (String, usize),
        owner: Arc<str>,
        Term {
            lease,
            drift,
            renew,
        }: Term,
        token: u64,
        sent: Instant,
    ) -> Self {
        let held = HeldLock {
            id,
            client,
            parent,
            key,
            prefix_len,
            owner,
            lease,
            drift,
            token,
            renew,
            validity: AtomicU64::new(pack_until(sent, sent + lease.saturating_sub(drift))),
            lost: Notify::new(),
            next_renew_ms: AtomicU64::new(0),
            epoch: sent,
        };
        held.schedule_renewal(sent + lease / 3);
        held
    }

    /// The interval between renewals: a third of the lease.
    pub(crate) fn renew_interval(&self) -> Duration {
        self.lease / 3
    }

    /// When the watchdog should renew this lock next.
    pub(crate) fn next_renewal(&self) -> Instant {
        self.epoch + Duration::from_millis(self.next_renew_ms.load(Ordering::Relaxed))
    }

    /// Sets when the watchdog should renew this lock next.
    pub(crate) fn schedule_renewal(&self, at: Instant) {
        let ms = at.saturating_duration_since(self.epoch).as_millis();
        self.next_renew_ms
            .store(u64::try_from(ms).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// A renewal sent at `sent` succeeded: the lock is valid for another lease.
    pub(crate) fn renewed(&self, sent: Instant) {
        let until = pack_until(self.epoch, sent + self.lease.saturating_sub(self.drift));
        // Lost states pack above every instant: a renewal cannot undo a loss.
        self.validity.fetch_max(until, Ordering::AcqRel);
        self.schedule_renewal(sent + self.renew_interval());
    }

    /// Marks the lock lost; the body's watcher stops the body.
    pub(crate) fn lose(&self, reason: LossReason) {
        let lost = pack_lost(reason);
        let first = self
            .validity
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
                (v < LOST_EXPIRED).then_some(lost)
            })
            .is_ok();
        if first {
            self.lost.notify_waiters();
        }
    }

    /// Until when the lock is trusted; `None` once it is lost.
    pub(crate) fn valid_until(&self) -> Option<Instant> {
        match self.validity() {
            Validity::Until(until) => Some(until),
            Validity::Lost(_) => None,
        }
    }

    fn validity(&self) -> Validity {
        unpack(self.epoch, self.validity.load(Ordering::Acquire))
    }

    /// The key as the caller wrote it, without the client's prefix.
    pub(crate) fn user_key(&self) -> &str {
        &self.key[self.prefix_len..]
    }

    /// Whether the lock is lost, checking its validity against the clock
    /// now rather than waiting for the timer.
    pub(crate) fn check_now(&self) -> Option<LossReason> {
        match self.validity() {
            Validity::Lost(reason) => Some(reason),
            Validity::Until(until) if Instant::now() >= until => {
                self.lose(LossReason::Expired);
                Some(LossReason::Expired)
            }
            Validity::Until(_) => None,
        }
    }

    /// Whether the lock is known lost.
    pub(crate) fn is_lost(&self) -> bool {
        matches!(self.validity(), Validity::Lost(_))
    }

    /// Resolves when the lock is lost: a renewal found it gone, or its
    /// validity ran out before a renewal extended it. The watchdog marks the
    /// expiry (no timer per lock); the body's poll checks the clock too.
    pub(crate) async fn lost(&self) -> LossReason {
        loop {
            let notified = self.lost.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(reason) = self.check_now() {
                return reason;
            }
            notified.await;
        }
    }
}

/// `Validity` in a word: an instant as nanoseconds after the lock's epoch,
/// or one of the two lost states above every instant.
const LOST_EXPIRED: u64 = u64::MAX - 1;
const LOST_TAKEN: u64 = u64::MAX;

fn pack_until(epoch: Instant, until: Instant) -> u64 {
    let nanos = until.saturating_duration_since(epoch).as_nanos();
    u64::try_from(nanos)
        .unwrap_or(LOST_EXPIRED - 1)
        .min(LOST_EXPIRED - 1)
}

fn pack_lost(reason: LossReason) -> u64 {
    match reason {
        LossReason::Taken => LOST_TAKEN,
        _ => LOST_EXPIRED,
    }
}

fn unpack(epoch: Instant, word: u64) -> Validity {
    match word {
        LOST_TAKEN => Validity::Lost(LossReason::Taken),
        LOST_EXPIRED => Validity::Lost(LossReason::Expired),
        nanos => Validity::Until(epoch + Duration::from_nanos(nanos)),
    }
}
