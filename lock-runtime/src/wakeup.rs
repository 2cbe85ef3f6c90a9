//! Waking waiters when a lock is freed, one at a time in arrival order.
//!
//! Each key that somebody in this client waits on has a slot with a
//! [`Notify`]. A release wakes one waiter (tokio's `notify_one` is FIFO); if
//! that waiter then fails to take the lock it waits again. A waiter that was
//! woken but gives up before trying passes the wake-up on, so a freed lock
//! never sits unclaimed while others sleep.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use tokio::sync::Notify;

#[derive(Default)]
struct Slot {
    notify: Notify,
    /// The fencing token of the last release that woke a waiter: the
    /// Redlock nodes each announce a release, and it should wake one waiter.
    last_release: AtomicU64,
}

struct Entry {
    slot: Arc<Slot>,
    waiting: usize,
}

/// Called with a key when its last waiter leaves.
type OnIdle = Box<dyn Fn(Box<str>) + Send + Sync>;

/// The waiters of one client, by full lock key.
#[derive(Default)]
pub(crate) struct Waiters {
    slots: Mutex<HashMap<Box<str>, Entry>>,
    on_idle: OnceLock<OnIdle>,
}

impl Waiters {
    fn with<R>(&self, f: impl FnOnce(&mut HashMap<Box<str>, Entry>) -> R) -> R {
        f(&mut self.slots.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Sets what runs when the last waiter on a key leaves (once).
    pub(crate) fn on_idle(&self, f: impl Fn(Box<str>) + Send + Sync + 'static) {
        let _ = self.on_idle.set(Box::new(f));
    }

    /// Registers a waiter on `key`.
    pub(crate) fn join(self: &Arc<Self>, key: &str) -> Ticket {
        let slot = self.with(|slots| {
            if let Some(entry) = slots.get_mut(key) {
                entry.waiting += 1;
                return entry.slot.clone();
            }
            let slot = Arc::new(Slot::default());
            let entry = Entry {
                slot: slot.clone(),
                waiting: 1,
            };
            slots.insert(key.into(), entry);
            slot
        });
        Ticket {
            waiters: self.clone(),
            key: key.into(),
            slot,
            holds_wake: AtomicBool::new(false),
        }
    }

    /// A hold of `key` with fencing token `token` was released: wakes the
    /// longest waiting waiter, skipping repeats of the same release.
    pub(crate) fn wake_release(&self, key: &[u8], token: u64) {
        let Ok(key) = std::str::from_utf8(key) else {
            return;
        };
        if let Some(slot) = self.with(|slots| slots.get(key).map(|e| e.slot.clone())) {
            // Token 0: a release whose token is unknown, always news.
            if token == 0 || slot.last_release.swap(token, Ordering::AcqRel) != token {
                slot.notify.notify_one();
            }
        }
    }

    /// Wakes every waiter: news may have been missed (a reconnect).
    pub(crate) fn wake_all(&self) {
        self.with(|slots| slots.values().for_each(|e| e.slot.notify.notify_waiters()));
    }

    /// Whether nobody waits on `key` any more.
    pub(crate) fn is_idle(&self, key: &str) -> bool {
        self.with(|slots| !slots.contains_key(key))
    }
}

/// One waiter's place. Dropping it leaves the queue (passing on a wake-up it
/// did not use); the last one out on a key runs the `on_idle` hook.
pub(crate) struct Ticket {
    waiters: Arc<Waiters>,
    key: Box<str>,
    slot: Arc<Slot>,
    holds_wake: AtomicBool,
}

impl Ticket {
    /// Waits for a wake-up. Create it, then try the lock, then await it, so
    /// a release in between is not missed.
    pub(crate) fn notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.slot.notify.notified()
    }

    /// Records that this waiter was woken and has not tried the lock yet.
    pub(crate) fn set_woken(&self, woken: bool) {
        self.holds_wake.store(woken, Ordering::Relaxed);
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if *self.holds_wake.get_mut() {
            self.slot.notify.notify_one();
        }
        let last = self.waiters.with(|slots| {
            let Some(entry) = slots.get_mut(&*self.key) else {
                return false;
            };
            entry.waiting -= 1;
            if entry.waiting > 0 {
                return false;
            }
            slots.remove(&*self.key);
            true
        });
        if last {
            if let Some(on_idle) = self.waiters.on_idle.get() {
                on_idle(std::mem::take(&mut self.key));
            }
        }
    }
}
