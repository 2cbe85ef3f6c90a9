//! What a worker task does next: a seeded plan of one locked call, with
//! what its body does (sleep, nested calls, siblings, detached calls,
//! error, panic); for the kinds workload, calls of every lock kind on keys
//! that each keep to kinds that can share them.

use crate::history::LockKind;
use crate::rng::Rng;

/// How many keys the tasks share (few, for contention).
pub const KEYS: u64 = 4;

/// Which set of keys a call is on, and so which kinds share its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Space {
    /// `k0`..`k3`: plain calls (the default workload).
    Plain,
    /// `rw0`, `rw1`: readers, writers and plain calls.
    ReadWrite,
    /// `p2`, `p3`: permit holders, at most 2 on `p2` and 3 on `p3` (the
    /// step's `key` is the count).
    Permits,
    /// `f0`, `f1`: fair calls.
    Fair,
    /// `{t}k0`..`{t}k3`: on Cluster, the keys of the multi-key calls whose
    /// keys share one hash tag, so one slot (`crate::multi`).
    Tagged,
}

/// The read-write keys of the kinds workload (`rw0`, `rw1`).
pub const RW_KEYS: u64 = 2;

/// The counts of the permit keys, one key each (`p2`, `p3`).
pub const PERMIT_COUNTS: [u64; 2] = [2, 3];

/// The fair keys (`f0`, `f1`).
pub const FAIR_KEYS: u64 = 2;

/// The waiter lease that half of the fair calls and of the writers on
/// read-write keys set (ms); the others keep the runtime's default (5 s).
/// Shorter leases make a lapsed heartbeat, and a place left behind by a
/// waiter that could not withdraw it, matter sooner. The fair-order rule
/// assumes that no waiter stalls for 2/3 of it without a fault: 1.3 s.
pub const WAITER_LEASE_MS: u64 = 2000;

/// The runtime's default waiter lease (ms), 5 s.
pub const DEFAULT_WAITER_LEASE_MS: u64 =
    lock_runtime::LockOptions::DEFAULT_WAITER_LEASE.as_millis() as u64;

/// How the call is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    /// The `#[distributed_lock]` function (global client, lease 500 ms,
    /// wait 1 s).
    Annotated,
    /// `run_locked` with the step's options, on the step's client.
    RunLocked,
}

/// What the body does between its first and last statement.
#[derive(Debug, Clone)]
pub enum Inner {
    /// Nothing but sleep.
    Nothing,
    /// A nested call on the same key and client: a declared re-entry.
    Reenter(Box<Step>),
    /// A nested call on another key: a separate acquisition.
    Nested(Box<Step>),
    /// Two sibling calls joined (`tokio::join!`) on keys the body does not
    /// hold (possibly the same key twice): separate acquisitions.
    Siblings(Box<Step>, Box<Step>),
    /// Two sibling calls joined (`tokio::join!`) on the key the body holds,
    /// through the same client: declared re-entries, each sometimes with a
    /// re-entry of its own nested in it.
    HeldSiblings(Box<Step>, Box<Step>),
    /// A nested call on the key the body holds, through the same client (a
    /// declared re-entry): polled for [`DETACH_POLL_MS`], then spawned when
    /// the body returns, so that it may outlive the outer call. Its body
    /// ticks ([`Inner::Ticks`]).
    Detached(Box<Step>),
    /// Sleeps of `tick_ms`, `ticks` times, recording each resume: the body
    /// of a detached call. The step's `sleep_ms` is 0.
    Ticks {
        /// How many sleeps.
        ticks: u64,
        /// Each sleep (ms).
        tick_ms: u64,
    },
}

/// How long a body polls its detached call before it goes on (ms).
pub const DETACH_POLL_MS: u64 = 10;

/// The most ticks of a detached call's body.
pub const MAX_TICKS: u64 = 200;

/// One locked call.
#[derive(Debug, Clone)]
pub struct Step {
    /// Key index (`k0`..).
    pub key: u64,
    /// 0: the global client, 1: the second client.
    pub client: u8,
    /// Attribute or `run_locked`.
    pub how: How,
    /// Lease (ms).
    pub lease_ms: u64,
    /// Wait (ms).
    pub wait_ms: u64,
    /// Whether the watchdog renews.
    pub renew: bool,
    /// How long the body sleeps in total (ms).
    pub sleep_ms: u64,
    /// Whether the body returns its own error.
    pub fail: bool,
    /// Whether the body panics at its end.
    pub panic: bool,
    /// Nested calls.
    pub inner: Inner,
    /// Which set of keys `key` is in.
    pub space: Space,
    /// The kind of lock the call asks for.
    pub kind: LockKind,
    /// The waiter lease it sets (ms), if any.
    pub waiter_lease_ms: Option<u64>,
    /// For a multi-key call (`run_locked_all`), the keys it lists, in the
    /// order listed (sometimes one twice; `key` is the first); empty for a
    /// call on one key.
    pub set: Vec<u64>,
}

impl Step {
    /// The key, without prefix.
    pub fn key_name(&self) -> String {
        self.name_of(self.key)
    }

    /// The name of key `key` of the step's set of keys, without prefix.
    pub fn name_of(&self, key: u64) -> String {
        let prefix = match self.space {
            Space::Plain => "k",
            Space::ReadWrite => "rw",
            Space::Permits => "p",
            Space::Fair => "f",
            Space::Tagged => "{t}k",
        };
        format!("{prefix}{key}")
    }
}

/// One top-level operation of a task.
#[derive(Debug, Clone)]
pub struct Op {
    /// The call.
    pub step: Step,
    /// A client-side `tokio::time::timeout` around the call (ms).
    pub timeout_ms: Option<u64>,
    /// Whether the call runs in a spawned task (needed for panics).
    pub spawn: bool,
}

/// The lease and wait of the annotated function (ms).
pub const ANNOTATED: (u64, u64) = (500, 1000);

/// A random call on `key` (or a random key), without nested calls.
pub fn step(rng: &mut Rng, key: Option<u64>, client: Option<u8>) -> Step {
    let key = key.unwrap_or_else(|| rng.range(0, KEYS - 1));
    let client = client.unwrap_or_else(|| u8::from(rng.chance(30)));
    let annotated = client == 0 && rng.chance(35);
    let (how, lease_ms, wait_ms, renew) = if annotated {
        (How::Annotated, ANNOTATED.0, ANNOTATED.1, true)
    } else {
        let wait = if rng.chance(15) {
            0
        } else {
            rng.range(50, 2000)
        };
        (How::RunLocked, rng.range(300, 1000), wait, !rng.chance(8))
    };
    // Mostly short; some outlast a renewal period (a third of the lease);
    // a few outlast the lease.
    let sleep_ms = if rng.chance(6) || (!renew && rng.chance(50)) {
        lease_ms * 3 / 2
    } else if rng.chance(25) {
        rng.range(20, 200)
    } else {
        rng.range(1, 20)
    };
    Step {
        key,
        client,
        how,
        lease_ms,
        wait_ms,
        renew,
        sleep_ms,
        fail: rng.chance(5),
        panic: false,
        inner: Inner::Nothing,
        space: Space::Plain,
        kind: LockKind::Plain,
        waiter_lease_ms: None,
        set: Vec::new(),
    }
}

/// A sibling on the key `outer` holds, through its client; sometimes with a
/// re-entry nested in it.
fn held_sibling(rng: &mut Rng, outer: &Step) -> Step {
    let mut sibling = step(rng, Some(outer.key), Some(outer.client));
    if rng.chance(30) {
        let nested = step(rng, Some(outer.key), Some(outer.client));
        sibling.inner = Inner::Reenter(Box::new(nested));
    }
    sibling
}

/// A detached call on the key `outer` holds, through its client. A quarter
/// end within the outer body's first poll of them; the rest tick on for 50
/// to 400 ms more than the whole outer body sleeps.
fn detached(rng: &mut Rng, outer: &Step) -> Step {
    let mut call = step(rng, Some(outer.key), Some(outer.client));
    let (ticks, tick_ms) = if rng.chance(25) {
        (rng.range(1, 3), rng.range(1, 2))
    } else {
        let total = outer.sleep_ms + rng.range(50, 400);
        let tick_ms = rng.range(5, 20).max(total.div_ceil(MAX_TICKS));
        (total.div_ceil(tick_ms), tick_ms)
    };
    call.sleep_ms = 0;
    call.inner = Inner::Ticks { ticks, tick_ms };
    call
}

/// A random top-level operation. Siblings sometimes lock one key twice,
/// unless `distinct_siblings`.
pub fn op(rng: &mut Rng, distinct_siblings: bool) -> Op {
    let mut top = step(rng, None, None);
    let roll = rng.range(0, 99);
    top.inner = if roll < 15 {
        Inner::Reenter(Box::new(step(rng, Some(top.key), Some(top.client))))
    } else if roll < 25 {
        let other = (top.key + rng.range(1, KEYS - 1)) % KEYS;
        Inner::Nested(Box::new(step(rng, Some(other), None)))
    } else if roll < 37 {
        let a = (top.key + rng.range(1, KEYS - 1)) % KEYS;
        let b = if !distinct_siblings && rng.chance(50) {
            a
        } else {
            // Another key than the body's and than `a`.
            let others: Vec<u64> = (0..KEYS).filter(|&k| k != top.key && k != a).collect();
            *rng.pick(&others)
        };
        // Siblings on the global client (where owners could be confused).
        Inner::Siblings(
            Box::new(step(rng, Some(a), Some(top.client))),
            Box::new(step(rng, Some(b), Some(top.client))),
        )
    } else if roll < 43 {
        let a = held_sibling(rng, &top);
        let b = held_sibling(rng, &top);
        Inner::HeldSiblings(Box::new(a), Box::new(b))
    } else if roll < 48 {
        Inner::Detached(Box::new(detached(rng, &top)))
    } else {
        Inner::Nothing
    };
    finish(rng, top)
}

/// The operation around `top`: whether it runs in a task of its own (and
/// then may panic), and the caller's timeout around it, if any.
pub(crate) fn finish(rng: &mut Rng, mut top: Step) -> Op {
    let spawn = rng.chance(12);
    top.panic = spawn && rng.chance(40);
    let timeout_ms = rng.chance(15).then(|| rng.range(10, 1500));
    Op {
        step: top,
        timeout_ms,
        spawn,
    }
}

/// A key of the kinds workload: 40 % read-write, 25 % permits, 35 % fair;
/// on Redlock, which refuses permits and fair locks, read-write only.
fn kind_key(rng: &mut Rng, redlock: bool) -> (Space, u64) {
    let roll = rng.range(0, 99);
    if redlock || roll < 40 {
        (Space::ReadWrite, rng.range(0, RW_KEYS - 1))
    } else if roll < 65 {
        (Space::Permits, *rng.pick(&PERMIT_COUNTS))
    } else {
        (Space::Fair, rng.range(0, FAIR_KEYS - 1))
    }
}

/// A random call of the kinds workload on `at` (or a random key), without
/// nested calls. On a read-write key: 3 readers per writer, the writers
/// half `mode(Write)` and half plain (some of those through the
/// attribute). Writers and fair calls set a waiter lease half the time.
/// A third of the fair calls that would hold for less than 20 ms hold for
/// 50 to 250 ms instead.
pub fn kind_step(
    rng: &mut Rng,
    at: Option<(Space, u64)>,
    client: Option<u8>,
    redlock: bool,
) -> Step {
    let (space, key) = at.unwrap_or_else(|| kind_key(rng, redlock));
    let mut s = step(rng, Some(key), client);
    s.space = space;
    if space == Space::Fair && s.sleep_ms < 20 && rng.chance(35) {
        // Longer holds, so that waiters line up behind them.
        s.sleep_ms = rng.range(50, 250);
    }
    let kind = match space {
        Space::Plain | Space::Tagged => LockKind::Plain,
        Space::ReadWrite if rng.chance(75) => LockKind::Read,
        Space::ReadWrite if rng.chance(50) => LockKind::Write,
        Space::ReadWrite => LockKind::Plain,
        Space::Permits => LockKind::Permits(key as u32),
        Space::Fair => LockKind::Fair,
    };
    set_kind(rng, &mut s, kind);
    s
}

/// Makes `s` ask for `kind`: only a plain call on a read-write key goes
/// through the attribute (the attribute takes no kind option); writers
/// and fair calls set a waiter lease half the time.
pub(crate) fn set_kind(rng: &mut Rng, s: &mut Step, kind: LockKind) {
    s.kind = kind;
    if s.how == How::Annotated && !(s.space == Space::ReadWrite && kind == LockKind::Plain) {
        s.how = How::RunLocked;
    }
    let waits_in_line = matches!(kind, LockKind::Fair | LockKind::Write | LockKind::Plain);
    s.waiter_lease_ms =
        (waits_in_line && s.how == How::RunLocked && rng.chance(50)).then_some(WAITER_LEASE_MS);
}

/// A call on the key `outer` holds, through its client, of a kind that
/// re-enters its hold: a reader under a reader; a reader, writer or plain
/// call under a writer or plain holder; the same count under a permit; a
/// fair call under a fair holder.
fn kind_reentry(rng: &mut Rng, outer: &Step, redlock: bool) -> Step {
    let mut s = kind_step(
        rng,
        Some((outer.space, outer.key)),
        Some(outer.client),
        redlock,
    );
    let kind = match outer.kind {
        LockKind::Write | LockKind::Plain => {
            *rng.pick(&[LockKind::Read, LockKind::Write, LockKind::Plain])
        }
        kind => kind,
    };
    set_kind(rng, &mut s, kind);
    s
}

/// A call of the kinds workload on a key other than `outer`'s.
fn other_key_step(rng: &mut Rng, outer: &Step, client: Option<u8>, redlock: bool) -> Step {
    let mut s = kind_step(rng, None, client, redlock);
    for _ in 0..20 {
        if s.key_name() != outer.key_name() {
            break;
        }
        s = kind_step(rng, None, client, redlock);
    }
    if s.key_name() == outer.key_name() {
        // Only one key would do (never with two read-write keys).
        s.key = (s.key + 1) % RW_KEYS;
    }
    s
}

/// A random top-level operation of the kinds workload: a call on a key of
/// the kinds workload, sometimes with a re-entry of a kind its hold takes
/// (15 %), a nested call on another key (10 %), or two sibling calls
/// joined on other keys, half the time on one key (8 %).
pub fn kinds_op(rng: &mut Rng, redlock: bool) -> Op {
    let mut top = kind_step(rng, None, None, redlock);
    let roll = rng.range(0, 99);
    top.inner = if roll < 15 {
        Inner::Reenter(Box::new(kind_reentry(rng, &top, redlock)))
    } else if roll < 25 {
        Inner::Nested(Box::new(other_key_step(rng, &top, None, redlock)))
    } else if roll < 33 {
        let a = other_key_step(rng, &top, Some(top.client), redlock);
        let b = if rng.chance(50) {
            kind_step(rng, Some((a.space, a.key)), Some(top.client), redlock)
        } else {
            other_key_step(rng, &top, Some(top.client), redlock)
        };
        Inner::Siblings(Box::new(a), Box::new(b))
    } else {
        Inner::Nothing
    };
    finish(rng, top)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_operations() {
        let ops = |seed| {
            let mut rng = Rng::derive(seed, &[1, 2]);
            (0..50)
                .map(|_| format!("{:?}", op(&mut rng, false)))
                .collect::<Vec<_>>()
        };
        assert_eq!(ops(7), ops(7));
        assert_ne!(ops(7), ops(8));
    }

    #[test]
    fn held_siblings_and_detached_calls_stay_on_the_held_key() {
        let mut rng = Rng::new(5);
        let (mut siblings, mut detached, mut outliving) = (0, 0, 0);
        for _ in 0..4000 {
            let op = op(&mut rng, false);
            let top = &op.step;
            match &top.inner {
                Inner::HeldSiblings(a, b) => {
                    siblings += 1;
                    for s in [a, b] {
                        assert_eq!((s.key, s.client), (top.key, top.client));
                        if let Inner::Reenter(n) = &s.inner {
                            assert_eq!((n.key, n.client), (top.key, top.client));
                        }
                    }
                }
                Inner::Detached(d) => {
                    detached += 1;
                    assert_eq!((d.key, d.client), (top.key, top.client));
                    let Inner::Ticks { ticks, tick_ms } = d.inner else {
                        panic!("a detached body ticks: {d:?}");
                    };
                    assert!((1..=MAX_TICKS).contains(&ticks), "{ticks}");
                    if ticks * tick_ms > top.sleep_ms {
                        outliving += 1;
                    } else {
                        assert!(ticks * tick_ms < DETACH_POLL_MS);
                    }
                }
                _ => {}
            }
        }
        assert!(siblings > 150 && detached > 120, "{siblings} {detached}");
        assert!(outliving > detached / 2, "{outliving} of {detached}");
    }

    #[test]
    fn distinct_siblings_take_two_keys_other_than_the_body_s() {
        let mut rng = Rng::new(3);
        for _ in 0..2000 {
            let op = op(&mut rng, true);
            if let Inner::Siblings(a, b) = &op.step.inner {
                assert_ne!(a.key, b.key);
                assert_ne!(a.key, op.step.key);
                assert_ne!(b.key, op.step.key);
            }
        }
    }

    /// Every call of a step and its nested calls.
    fn calls(s: &Step) -> Vec<&Step> {
        let mut out = vec![s];
        match &s.inner {
            Inner::Reenter(n) | Inner::Nested(n) | Inner::Detached(n) => out.extend(calls(n)),
            Inner::Siblings(a, b) | Inner::HeldSiblings(a, b) => {
                out.extend(calls(a));
                out.extend(calls(b));
            }
            Inner::Nothing | Inner::Ticks { .. } => {}
        }
        out
    }

    #[test]
    fn kinds_keep_each_key_to_kinds_that_share_it() {
        let mut rng = Rng::new(9);
        let mut seen: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
            Default::default();
        let (mut readers, mut writers, mut reentries) = (0, 0, 0);
        for _ in 0..4000 {
            let op = kinds_op(&mut rng, false);
            for s in calls(&op.step) {
                let name = s.key_name();
                seen.entry(name.clone())
                    .or_default()
                    .insert(s.kind.as_str());
                if s.how == How::Annotated {
                    assert_eq!((s.space, s.kind), (Space::ReadWrite, LockKind::Plain));
                }
                match s.kind {
                    LockKind::Read => readers += 1,
                    LockKind::Write | LockKind::Plain => writers += 1,
                    _ => {}
                }
            }
            if let Inner::Reenter(n) = &op.step.inner {
                reentries += 1;
                assert_eq!(
                    (n.key_name(), n.client),
                    (op.step.key_name(), op.step.client)
                );
                if op.step.kind == LockKind::Read {
                    assert_eq!(n.kind, LockKind::Read);
                }
            }
            if let Inner::Nested(n) = &op.step.inner {
                assert_ne!(n.key_name(), op.step.key_name());
            }
        }
        for (key, kinds) in &seen {
            let kinds: Vec<&str> = kinds.iter().map(String::as_str).collect();
            let expected: &[&str] = match key.as_str() {
                "rw0" | "rw1" => &["plain", "read", "write"],
                "p2" => &["permits:2"],
                "p3" => &["permits:3"],
                "f0" | "f1" => &["fair"],
                other => panic!("unexpected key {other}"),
            };
            assert_eq!(kinds, expected, "{key}");
        }
        assert_eq!(seen.len(), 6);
        assert!(
            readers > 2 * writers && readers < 4 * writers,
            "{readers} {writers}"
        );
        assert!(reentries > 450, "{reentries}");
        // On Redlock: read-write keys only.
        let mut rng = Rng::new(9);
        for _ in 0..500 {
            let op = kinds_op(&mut rng, true);
            for s in calls(&op.step) {
                assert_eq!(s.space, Space::ReadWrite, "{s:?}");
            }
        }
    }
}
