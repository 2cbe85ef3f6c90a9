//! Waiting in line for a lock, within one client.
//!
//! Each key that somebody in this client waits on has a queue of waiters in
//! arrival order. Only the head of the queue tries the lock; the others wait
//! for their turn, so a newcomer never goes ahead of a waiter that was there
//! first, and a release costs one acquire attempt, not one per waiter.
//!
//! A release notice (from this client, or from Redis pub/sub) wakes the
//! queue and the head tries. When the head takes the lock it leaves quietly:
//! the next waiter becomes head and waits for the next release (unless a
//! shared kind has room for it too, or a permit was taken: then it tries
//! once at once). When the head gives up (timeout, cancellation) it wakes
//! the queue, so the new head tries at once.
//!
//! Between clients, a contended release of an exclusive lock names the
//! client that waited longest (the lock's record of waiting clients, see
//! `docs/redis-layout.md`): that client's head tries at once, and the
//! heads of the others hold back (see [`Waiters::hold_back`]), so that a
//! hand-off costs the server about the same whatever the number of
//! waiting clients.
//!
//! A fair line's release names the waiter that goes next; the name is kept
//! only while that waiter is in line here. A fair hold's release by this
//! client wakes its waiters of other kinds on the key, which are in no fair
//! line and would otherwise hear of nothing.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, OnceLock, PoisonError};

use tokio::sync::Notify;
use tokio::time::Instant;

#[derive(Default)]
struct Slot {
    notify: Notify,
    /// The fencing token of the last release that woke the queue, until a
    /// waiter here asks again (see [`Ticket::asking`]): the Redlock nodes
    /// each announce a release, and their notices should wake it once. A
    /// notice that comes after a waiter asked again is news again: that
    /// request may have met the same hold still on a node the release had
    /// not reached yet, and only that node's notice tells its end.
    last_release: AtomicU64,
    /// The owner number of this client's waiter that the last fair notice
    /// named (0: none): that waiter tries, not the head. Set only while
    /// that waiter is in line, and cleared when it leaves (both under the
    /// lines' lock), so that a name never outlives its waiter.
    named: AtomicU64,
    /// How many fair holds of this client on the key were released while
    /// waiters of other kinds waited on it (see
    /// [`Waiters::wake_other_kinds`]).
    fair_released: AtomicU64,
    /// How many wake-ups with news the line had (a release, a name, a
    /// reconnect, a head leaving): a hold-back (see [`Waiters::hold_back`])
    /// is not news.
    news: AtomicU64,
    /// Until when the head holds back after a release that named another
    /// client, in nanoseconds after [`EPOCH`] (0: it does not).
    held_back_until: AtomicU64,
}

/// How long the head of a line holds back after a release named a waiting
/// client of another process (that client tries first): it tries then,
/// unless another release came meanwhile (which holds it back again, or
/// wakes it). Long against a hand-off (a round trip or two), so that the
/// line's other clients ask nothing while the named one takes the lock;
/// short against the 200 ms for which a free key may stand untaken while
/// callers wait (the fault checker's availability rule), since it is what
/// a named client that went away (its waiter gave up, its process died)
/// costs the others.
pub(crate) const HOLD_BACK: std::time::Duration = std::time::Duration::from_millis(100);

/// The instant that [`Slot::held_back_until`] counts from.
static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

impl Slot {
    /// Wakes the line with news: its head tries.
    fn news(&self) {
        self.news.fetch_add(1, Ordering::AcqRel);
        self.notify.notify_waiters();
    }
}

/// One waiter in a line.
#[derive(Clone, Copy)]
struct InLine {
    /// Its ticket number.
    number: u64,
    /// The owner number of its acquisition, by which a fair notice names
    /// it.
    owner: u64,
    /// Whether it waits for a fair lock.
    fair: bool,
}

struct Line {
    slot: Arc<Slot>,
    /// The waiters in arrival order; the front is the head.
    queue: VecDeque<InLine>,
}

/// Called with a key when its first waiter comes or its last one leaves.
type OnChange = Box<dyn Fn(&str) + Send + Sync>;

/// The waiters of one client, by full lock key.
#[derive(Default)]
pub(crate) struct Waiters {
    lines: Mutex<HashMap<Box<str>, Line>>,
    tickets: AtomicU64,
    on_change: OnceLock<OnChange>,
}

impl Waiters {
    fn with<R>(&self, f: impl FnOnce(&mut HashMap<Box<str>, Line>) -> R) -> R {
        f(&mut self.lines.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Sets what runs when the first waiter on a key comes or the last one
    /// leaves (once).
    pub(crate) fn on_change(&self, f: impl Fn(&str) + Send + Sync + 'static) {
        let _ = self.on_change.set(Box::new(f));
    }

    fn changed(&self, key: &str) {
        if let Some(on_change) = self.on_change.get() {
            on_change(key);
        }
    }

    /// Whether somebody here waits on `key`: a newcomer then queues behind.
    pub(crate) fn is_waited(&self, key: &str) -> bool {
        self.with(|lines| lines.contains_key(key))
    }

    /// Queues a waiter on `key` (the acquisition with owner number
    /// `owner`, for a fair lock if `fair`), behind those already there.
    pub(crate) fn join(self: &Arc<Self>, key: &str, owner: u64, fair: bool) -> Ticket {
        let number = self.tickets.fetch_add(1, Ordering::Relaxed);
        let (slot, first) = self.with(|lines| {
            let mut first = false;
            let line = lines.entry(key.into()).or_insert_with(|| {
                first = true;
                Line {
                    slot: Arc::default(),
                    queue: VecDeque::new(),
                }
            });
            line.queue.push_back(InLine {
                number,
                owner,
                fair,
            });
            (line.slot.clone(), first)
        });
        if first {
            self.changed(key);
        }
        let fair_released = slot.fair_released.load(Ordering::Acquire);
        let seen_news = AtomicU64::new(slot.news.load(Ordering::Acquire));
        Ticket {
            waiters: self.clone(),
            key: key.into(),
            slot,
            number,
            owner,
            wake_on_leave: AtomicBool::new(true),
            fair_released: AtomicU64::new(fair_released),
            seen_news,
        }
    }

    /// A hold of `key` with fencing token `token` was released (0: a token
    /// not known): the head of the queue should try, once per release and
    /// request (see `Slot::last_release`).
    pub(crate) fn wake_release(&self, key: &[u8], token: u64) {
        if let Some(slot) = self.slot(key) {
            if token == 0 || slot.last_release.swap(token, Ordering::AcqRel) != token {
                slot.news();
            }
        }
    }

    /// A fair line's release named this client's waiter `owner` (its
    /// owner number) on `key`: that waiter should try. A name for a waiter
    /// that is not in line here (it left before the notice came: it took
    /// the lock on its heartbeat, or gave up) is dropped: kept, it would
    /// make the other waiters here wait for a name that never comes.
    pub(crate) fn wake_named(&self, key: &[u8], owner: u64) {
        let Ok(key) = std::str::from_utf8(key) else {
            return;
        };
        let slot = self.with(|lines| {
            let line = lines.get(key)?;
            let waits = line.queue.iter().any(|waiter| waiter.owner == owner);
            waits.then(|| {
                line.slot.named.store(owner, Ordering::Release);
                line.slot.clone()
            })
        });
        if let Some(slot) = slot {
            slot.news();
        }
    }

    /// A release of `key` named a waiting client of another process: the
    /// head here holds back for [`HOLD_BACK`] (woken, so that it sleeps
    /// until then at most), then tries unless news came meanwhile.
    pub(crate) fn hold_back(&self, key: &[u8]) {
        if let Some(slot) = self.slot(key) {
            let until = (Instant::now() + HOLD_BACK).saturating_duration_since(*EPOCH);
            let until = u64::try_from(until.as_nanos()).unwrap_or(u64::MAX).max(1);
            slot.held_back_until.store(until, Ordering::Release);
            slot.notify.notify_waiters();
        }
    }

    /// A fair hold of this client on `key` was released: its notice names
    /// only the fair line's next waiter (or nobody, when the line is
    /// empty), so this client's waiters of other kinds on the key (which
    /// sit in no fair line) should each try now, head or not: the key is
    /// free, or still a fair lock, which they are told at once
    /// (`KindMismatch`). Nothing happens when only fair waiters wait here.
    pub(crate) fn wake_other_kinds(&self, key: &str) {
        let slot = self.with(|lines| {
            let line = lines.get(key)?;
            let others = line.queue.iter().any(|waiter| !waiter.fair);
            others.then(|| {
                line.slot.fair_released.fetch_add(1, Ordering::AcqRel);
                line.slot.clone()
            })
        });
        if let Some(slot) = slot {
            slot.news();
        }
    }

    /// The wake-up slot of the line on `key` (a key as a notice carries
    /// it), if somebody here waits on it.
    fn slot(&self, key: &[u8]) -> Option<Arc<Slot>> {
        let key = std::str::from_utf8(key).ok()?;
        self.with(|lines| lines.get(key).map(|l| l.slot.clone()))
    }

    /// Wakes every queue: news may have been missed (a reconnect).
    pub(crate) fn wake_all(&self) {
        self.with(|lines| lines.values().for_each(|l| l.slot.news()));
    }
}

/// One waiter's place in line. Dropping it leaves the line; the last one
/// out on a key runs the `on_change` hook.
pub(crate) struct Ticket {
    waiters: Arc<Waiters>,
    key: Box<str>,
    slot: Arc<Slot>,
    number: u64,
    /// The owner number of the waiting acquisition.
    owner: u64,
    wake_on_leave: AtomicBool,
    /// The slot's count of fair releases that this waiter has seen.
    fair_released: AtomicU64,
    /// The slot's count of news that this waiter has seen.
    seen_news: AtomicU64,
}

impl Ticket {
    /// Waits for news of a release. Create and enable it before trying the
    /// lock, so a release in between is not missed.
    pub(crate) fn notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.slot.notify.notified()
    }

    /// This waiter asks for the lock now: notices of the release that
    /// woke the line are news again from here on (see `Slot::last_release`).
    pub(crate) fn asking(&self) {
        self.slot.last_release.store(0, Ordering::Release);
    }

    /// Whom the last fair notice on this key named: `Some(true)` this
    /// waiter (the name is taken, so it tries once), `Some(false)` another
    /// waiter here, `None` nobody.
    pub(crate) fn named(&self) -> Option<bool> {
        match self.slot.named.load(Ordering::Acquire) {
            0 => None,
            named => Some(named == self.owner && self.take_name()),
        }
    }

    /// Clears the name if it is this waiter's; whether it was.
    fn take_name(&self) -> bool {
        let (owner, named) = (self.owner, &self.slot.named);
        named
            .compare_exchange(owner, 0, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Whether a fair hold of this client on the key was released since
    /// this waiter joined or last asked (see [`Waiters::wake_other_kinds`]).
    pub(crate) fn fair_released(&self) -> bool {
        let count = self.slot.fair_released.load(Ordering::Acquire);
        self.fair_released.swap(count, Ordering::AcqRel) != count
    }

    /// After a wake-up: `Some(until)` when nothing but a release that named
    /// another client's waiter came since this waiter last looked (see
    /// [`Waiters::hold_back`]): it holds back until then; `None` when news
    /// came, or the hold-back is over.
    pub(crate) fn held_back(&self) -> Option<Instant> {
        let news = self.slot.news.load(Ordering::Acquire);
        if self.seen_news.swap(news, Ordering::AcqRel) != news {
            return None;
        }
        match self.slot.held_back_until.load(Ordering::Acquire) {
            0 => None,
            until => Some(*EPOCH + std::time::Duration::from_nanos(until)),
        }
        .filter(|until| *until > Instant::now())
    }

    /// Whether other waiters are in this line besides this one.
    pub(crate) fn others_wait(&self) -> bool {
        self.waiters
            .with(|lines| lines.get(&*self.key).is_some_and(|l| l.queue.len() > 1))
    }

    /// Whether this waiter is first in line, the one that tries.
    pub(crate) fn is_head(&self) -> bool {
        self.waiters.with(|lines| {
            lines
                .get(&*self.key)
                .and_then(|l| l.queue.front())
                .is_some_and(|head| head.number == self.number)
        })
    }

    /// Leaves the line holding the lock: the next waiter becomes head and,
    /// if `next_tries` (there is room for it too, or it needs to learn when
    /// to try: see `locking::acquire`), tries at once; otherwise it waits
    /// for this holder's release.
    pub(crate) fn acquired(&self, next_tries: bool) {
        self.wake_on_leave.store(next_tries, Ordering::Relaxed);
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let (was_head, last) = self.waiters.with(|lines| {
            // A name left for this waiter would keep the head from trying;
            // cleared under the lock that `wake_named` names it under.
            self.take_name();
            let Some(line) = lines.get_mut(&*self.key) else {
                return (false, false);
            };
            let was_head = line.queue.front().map(|head| head.number) == Some(self.number);
            line.queue.retain(|waiter| waiter.number != self.number);
            if !line.queue.is_empty() {
                return (was_head, false);
            }
            lines.remove(&*self.key);
            (was_head, true)
        });
        if was_head && *self.wake_on_leave.get_mut() && !last {
            // A release may have come for the head that is leaving: the new
            // head must try.
            self.slot.news();
        }
        if last {
            self.waiters.changed(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Waker};

    use super::*;

    /// Whether `ticket` hears news from `wake`.
    fn hears(ticket: &Ticket, wake: impl FnOnce()) -> bool {
        let mut notified = pin!(ticket.notified());
        notified.as_mut().enable();
        wake();
        let mut cx = Context::from_waker(Waker::noop());
        notified.poll(&mut cx).is_ready()
    }

    #[test]
    fn a_release_wakes_once_until_a_waiter_asks_again() {
        let waiters = Arc::new(Waiters::default());
        let waiter = waiters.join("k", 1, false);
        assert!(hears(&waiter, || waiters.wake_release(b"k", 7)));
        // The other Redlock nodes' notices of that release.
        assert!(!hears(&waiter, || waiters.wake_release(b"k", 7)));
        assert!(!hears(&waiter, || waiters.wake_release(b"k", 7)));
        // The waiter asked, and a node the release had not reached yet
        // refused it: that node's notice is news.
        waiter.asking();
        assert!(hears(&waiter, || waiters.wake_release(b"k", 7)));
        assert!(hears(&waiter, || waiters.wake_release(b"k", 8)));
        assert!(hears(&waiter, || waiters.wake_release(b"k", 0)));
    }

    #[test]
    fn a_name_lives_only_while_its_waiter_is_in_line() {
        let waiters = Arc::new(Waiters::default());
        let plain = waiters.join("k", 1, false);
        // A notice for a waiter that has left (or never came): nobody is
        // named, nobody woken.
        assert!(!hears(&plain, || waiters.wake_named(b"k", 2)));
        assert_eq!(plain.named(), None);
        let fair = waiters.join("k", 2, true);
        assert!(hears(&plain, || waiters.wake_named(b"k", 2)));
        assert_eq!(plain.named(), Some(false));
        // The named waiter leaves before it looked: its name goes with it.
        drop(fair);
        assert_eq!(plain.named(), None);
    }

    #[test]
    fn a_fair_release_here_is_news_once_to_the_waiters_of_other_kinds() {
        let waiters = Arc::new(Waiters::default());
        let fair = waiters.join("k", 1, true);
        // Only fair waiters: the notice that names the next one does.
        assert!(!hears(&fair, || waiters.wake_other_kinds("k")));
        let plain = waiters.join("k", 2, false);
        assert!(!plain.fair_released());
        assert!(hears(&plain, || waiters.wake_other_kinds("k")));
        assert!(plain.fair_released());
        assert!(!plain.fair_released(), "once per release");
    }
}
