//! A client's life: open, then shut down (see `shutdown.rs`), and how many
//! of its holds are still alive.
//!
//! A hold is alive from its acquire's success until its last reference is
//! gone, which is after its release has finished (a call awaiting its
//! release, or a background release, keeps it), so "no hold alive" means
//! every lock the client took has been given back or given up.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::io::Io;

/// Whether the client is shut down, and its live holds.
#[derive(Default)]
pub(crate) struct Lifecycle {
    closed: AtomicBool,
    live: AtomicUsize,
    /// Woken when the last live hold ends.
    idle: Notify,
    /// Woken when the client is shut down.
    closing: Notify,
}

impl Lifecycle {
    /// From now on the client takes no new locks.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.closing.notify_waiters();
    }

    /// Completes once the client is shut down (at once if it is).
    pub(crate) async fn closed(&self) {
        let closing = self.closing.notified();
        tokio::pin!(closing);
        closing.as_mut().enable();
        if !self.is_closed() {
            closing.await;
        }
    }

    /// Whether the client takes no new locks.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// A hold was taken.
    pub(crate) fn hold_started(&self) {
        self.live.fetch_add(1, Ordering::AcqRel);
    }

    /// A hold is gone (released, or given up).
    pub(crate) fn hold_ended(&self) {
        if self.live.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.idle.notify_waiters();
        }
    }

    /// Waits until no hold is alive or `deadline`; whether none is.
    pub(crate) async fn idle_by(&self, io: &Io, deadline: Instant) -> bool {
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.live.load(Ordering::Acquire) == 0 {
                return true;
            }
            // The client's timer: the caller's runtime may have none.
            let sleep = io.sleep_until(deadline);
            tokio::select! {
                () = &mut idle => {}
                () = sleep => return self.live.load(Ordering::Acquire) == 0,
            }
        }
    }
}
