//! A lock this client holds: its key, owner, lease and how long it is known
//! to be valid.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
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
    /// The full key: the client's prefix, then the rendered key.
    pub key: Box<str>,
    /// Where the rendered key starts in `key`.
    prefix_len: usize,
    pub owner: Arc<str>,
    pub lease: Duration,
    /// The margin kept off every lease for clock-rate drift between this
    /// process and the servers.
    drift: Duration,
    /// The fencing token this acquisition got.
    pub token: u64,
    validity: watch::Sender<Validity>,
    /// When the watchdog should renew next, in ms after `epoch`.
    next_renew_ms: AtomicU64,
    epoch: Instant,
}

/// How long a lock was granted for: its lease, less the drift margin.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Term {
    pub lease: Duration,
    pub drift: Duration,
}

impl HeldLock {
    /// A lock taken by a request sent at `sent`: valid until
    /// `sent + lease - drift`.
    pub(crate) fn new(
        id: u64,
        (key, prefix_len): (Box<str>, usize),
        owner: Arc<str>,
        Term { lease, drift }: Term,
        token: u64,
        sent: Instant,
    ) -> Self {
        let held = HeldLock {
            id,
            key,
            prefix_len,
            owner,
            lease,
            drift,
            token,
            validity: watch::Sender::new(Validity::Until(sent + lease.saturating_sub(drift))),
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
        let until = sent + self.lease.saturating_sub(self.drift);
        self.validity.send_if_modified(|v| match v {
            Validity::Until(old) if *old < until => {
                *v = Validity::Until(until);
                true
            }
            _ => false,
        });
        self.schedule_renewal(sent + self.renew_interval());
    }

    /// Marks the lock lost; the body's watcher stops the body.
    pub(crate) fn lose(&self, reason: LossReason) {
        self.validity.send_if_modified(|v| match v {
            Validity::Until(_) => {
                *v = Validity::Lost(reason);
                true
            }
            Validity::Lost(_) => false,
        });
    }

    /// The key as the caller wrote it, without the client's prefix.
    pub(crate) fn user_key(&self) -> &str {
        &self.key[self.prefix_len..]
    }

    /// Whether the lock is lost, checking its validity against the clock
    /// now rather than waiting for the timer.
    pub(crate) fn check_now(&self) -> Option<LossReason> {
        let validity = *self.validity.borrow();
        match validity {
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
        matches!(*self.validity.borrow(), Validity::Lost(_))
    }

    /// Resolves when the lock is lost: a renewal found it gone, or its
    /// validity ran out before a renewal extended it.
    pub(crate) async fn lost(&self) -> LossReason {
        let mut rx = self.validity.subscribe();
        loop {
            let until = match *rx.borrow_and_update() {
                Validity::Lost(reason) => return reason,
                Validity::Until(until) => until,
            };
            tokio::select! {
                biased;
                changed = rx.changed() => {
                    if changed.is_err() {
                        // The sender lives in `self`: it cannot be gone here.
                        return LossReason::Expired;
                    }
                }
                () = tokio::time::sleep_until(until) => {
                    if *rx.borrow() == Validity::Until(until) {
                        self.lose(LossReason::Expired);
                    }
                }
            }
        }
    }
}
