//! What a worker task does next: a seeded plan of one locked call, with
//! what its body does (sleep, nested calls, siblings, detached calls,
//! error, panic).

use crate::rng::Rng;

/// How many keys the tasks share (few, for contention).
pub const KEYS: u64 = 4;

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
    let spawn = rng.chance(12);
    top.panic = spawn && rng.chance(40);
    let timeout_ms = rng.chance(15).then(|| rng.range(10, 1500));
    Op {
        step: top,
        timeout_ms,
        spawn,
    }
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
}
