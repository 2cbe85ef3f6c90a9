//! The rules, checked from the history alone.
//!
//! A body's *kind* is the kind its acquisition's call asked for (a
//! re-entry runs under its outer call's hold): plain, write and fair
//! holders are *exclusive*; readers share with readers, and permit holders
//! with permit holders of the same count.
//!
//! A multi-key call (`run_locked_all`) is recorded as one acquisition per
//! distinct key of its set: a call and a body on that key, with an id of
//! their own, the key's fencing token (`fencing_token_of`), the set's
//! times and outcome, and the set's id (`Call::set`). So every rule reads
//! it as a hold of each of its keys, unchanged: no key of the set has two
//! holders (rule 1), each key's tokens rise (rule 2), the call is bounded
//! (rule 3). A call told `Lost` (the error names one key) counts as lost on
//! every key of its set: the other keys may have been lost too, unseen.
//! Rules 4 and 7 read a multi-key timeout over its set (below).
//!
//! 1. Mutual exclusion, across kinds: two bodies on one key do not overlap
//!    in time unless the call of one of them (or of the acquisition it
//!    re-entered) ended in `Lost`, or both are readers, or both are permit
//!    holders of one count (rule 8 counts those). A re-entered body that
//!    was dropped before its last statement (a detached call stopped at
//!    its next poll) is inside until it was last seen running, not until
//!    its drop: dropping it runs none of its statements. So an exclusive holder
//!    (plain, writer, fair) is inside with nobody, reader or writer. Bodies
//!    of the same acquisition (a declared re-entry and its outer call: same
//!    process, same `acq`) are one holder. Sibling calls are separate
//!    acquisitions.
//! 2. Fencing tokens, across kinds: for distinct acquisitions X, Y on one
//!    key whose holds are ordered in time, X.token < Y.token unless Y's
//!    call ended in `Lost`. They are ordered when X entered before Y and
//!    one of them is exclusive (an exclusive hold overlaps no other, so the
//!    earlier body's hold ended before the later one's grant), or when X
//!    entered before Y's call started (X's grant came before Y's, whatever
//!    the kinds; two readers or permit holders otherwise may be granted in
//!    one order and enter in the other). Every body has a token, and a
//!    re-entry has its outer call's token.
//! 3. Bounded calls: the acquire phase (call start to the body's first
//!    statement, or to the call's end when no body ran) is at most
//!    `wait + 4 × command timeout + 1 s`, plus, for each fault window that
//!    overlaps the phase, its length + a lease + a connect timeout. Calls cut
//!    by the worker (cancelled, dropped, panicked) and re-entries are exempt.
//! 4. Availability: a call that ended in `Timeout` has its wait window
//!    `[start, start + wait]` covered, but for stretches of at most
//!    `gap_slack`, by: bodies on the key; a lease after every body whose
//!    call did not end cleanly (ok or body error); a lease after every call
//!    on the key that ended without a body and not cleanly (cancelled,
//!    backend error...: its grant may be held unseen); the places in a line
//!    (fair tickets, writers' claims) that a fault may have stranded or
//!    brought back, for a waiter lease; and fault windows plus the longest
//!    lease and a connect timeout after each. A multi-key call that timed
//!    out is checked once, over its set: its window is covered where any
//!    key of its set is (it waits on whichever key refused it last, and
//!    the set is free only when every key is).
//! 5. Siblings on a held key: two calls joined with `tokio::join!` in a
//!    body, on the key that body holds (through the same client), are never
//!    inside their bodies at once: their body intervals under the same
//!    outer call do not overlap.
//! 6. No body after its hold: a re-entered body never runs after the hold
//!    it re-entered has ended, that is after the call that took the hold
//!    returned or was dropped (`resume_slack` later at most). Running is
//!    its first statement, its last (if reached) and each recorded resume.
//! 7. Released keys stay free (Cluster and Sentinel: `release_bound` set):
//!    a call that ended in `Timeout` has its wait window covered, but for
//!    stretches of at most `gap_slack`, by the holders of rule 4 (bodies,
//!    a lease after unclean ones) and, after each call on the key that
//!    returned with its release awaited (ok or body error), the time from
//!    its body's exit until `release_bound` after its end. Fault windows
//!    explain nothing: a failover may cost the calls in flight, not the
//!    keys released before it. A multi-key timeout: over its set, as in
//!    rule 4.
//! 8. Permits (`crate::kinds`): on a key of `permits = N`, at most N
//!    permit holders that were not told `Lost` are inside at once.
//! 9. Fair order (`crate::kinds`): of two fair calls on one key that both
//!    entered and had to wait, the one that began waiting clearly first
//!    enters first, unless a fault could have cost it its place.
//! 10. Kinds stay apart (`crate::kinds`): no call fails with
//!     `KindMismatch` on a key that the workload keeps to kinds that can
//!     share it.
//!
//! 16. The hold's own end (one node: `stall_slack` set): a stall of a
//!     worker's link that neither answers nor resets (a pause of the node,
//!     a black hole of its proxy, for every worker or that worker's link)
//!     that outlasts a lease confirms no renewal after it starts, so a hold
//!     granted before the stall is trusted until the stall's start plus the
//!     lease at most. A body inside its hold when the stall starts does not
//!     run past that by more than `stall_slack`: the client marks the hold
//!     lost at its trusted end whatever its stalled renewal calls do, and
//!     the body is dropped there. A re-entered body runs under its
//!     acquisition's lease.
//!
//! Rules 11 to 15 are the election mode's, on its terms and ticks
//! (`crate::election_rules`): ticks in Redis order, terms' tokens rise, no
//! stale tick after a newer term's, hand-over within 1 s of a
//! resignation, many terms.

use std::collections::HashMap;

use crate::history::{Body, History, LockKind};
use crate::index::{faults_over, Index, Limits, Violation};

fn same_acquisition(x: &Body, y: &Body) -> bool {
    x.proc == y.proc && x.acq == y.acq
}

/// Whether two bodies come from one task, one process, or two processes.
fn shape(x: &Body, y: &Body) -> String {
    let s = if x.proc != y.proc {
        "across processes"
    } else if x.task != y.task {
        "same process"
    } else {
        "same task"
    };
    s.to_owned()
}

fn describe(b: &Body) -> String {
    format!("p{}t{} call {} (acq {})", b.proc, b.task, b.call, b.acq)
}

/// The kinds of two bodies, for messages and shapes: empty when both are
/// plain (the plain workload's messages stay as they were).
fn kinds_of(ix: &Index<'_>, x: &Body, y: &Body) -> String {
    let (kx, ky) = (ix.kind(x), ix.kind(y));
    if kx == LockKind::Plain && ky == LockKind::Plain {
        String::new()
    } else {
        format!(" ({kx} then {ky})")
    }
}

/// When a body was inside its hold, for rule 1: from its first statement
/// to its last, or, for a re-entered body that was dropped before its last
/// statement (a detached call stopped at its next poll after its hold
/// ended), to the last moment it was seen running (its first statement or
/// a resume). Dropping a body runs none of its statements, and rule 6
/// checks that a re-entered body does not run after its hold.
fn inside_until(b: &Body, last_resume: &HashMap<(u32, u64), u64>) -> u64 {
    if b.done || b.call == b.acq {
        return b.exit;
    }
    let seen = last_resume.get(&(b.proc, b.call)).copied().unwrap_or(0);
    seen.max(b.enter).min(b.exit)
}

/// Whether `kind` (as the history names it) stalls a link without
/// resetting it, and to whom: `target` is `node0` (every worker) or
/// `node0/w<n>` (worker n's link).
fn stalled_worker(kind: &str, target: &str, proc: u32) -> bool {
    let stalls = kind.starts_with("pause") || kind == "blackhole";
    stalls
        && match target.split_once("/w") {
            Some((_, w)) => w.parse() == Ok(proc),
            None => true,
        }
}

/// Rule 16.
pub fn hold_end(ix: &Index<'_>, limits: &Limits) -> Vec<Violation> {
    let Some(slack) = limits.stall_slack else {
        return Vec::new();
    };
    let h = ix.history;
    let mut out = Vec::new();
    for f in &h.faults {
        for b in &h.bodies {
            let Some(lease) = ix.call(b.proc, b.acq).map(|c| c.lease) else {
                continue;
            };
            let bound = f.start + lease + slack;
            if !stalled_worker(&f.kind, &f.target, b.proc)
                || f.end <= bound
                || b.enter >= f.start
                || b.exit <= bound
            {
                continue;
            }
            out.push(Violation {
                rule: 16,
                key: b.key.clone(),
                at: b.exit,
                shape: "past its hold".to_owned(),
                message: format!(
                    "{} ran {:.1} ms past its hold's last trusted end: its link stalled ({} on {}) at {:.3} ms, a lease of {:.0} ms before",
                    describe(b),
                    (b.exit - f.start - lease) as f64 / 1e6,
                    f.kind,
                    f.target,
                    f.start as f64 / 1e6,
                    lease as f64 / 1e6
                ),
            });
        }
    }
    out
}

/// Rule 1.
pub fn mutual_exclusion(ix: &Index<'_>) -> Vec<Violation> {
    let mut last_resume: HashMap<(u32, u64), u64> = HashMap::new();
    for r in &ix.history.resumes {
        let at = last_resume.entry((r.proc, r.call)).or_insert(r.at);
        *at = (*at).max(r.at);
    }
    let mut out = Vec::new();
    for (key, bodies) in ix.by_key() {
        for (i, x) in bodies.iter().enumerate() {
            let x_until = inside_until(x, &last_resume);
            for y in bodies[i + 1..].iter().take_while(|y| y.enter < x_until) {
                if same_acquisition(x, y) || ix.lost(x) || ix.lost(y) {
                    continue;
                }
                if ix.kind(x).shares_with(ix.kind(y)) {
                    continue;
                }
                let kinds = kinds_of(ix, x, y);
                out.push(Violation {
                    rule: 1,
                    key: key.to_owned(),
                    at: y.enter,
                    shape: format!("{}{kinds}", shape(x, y)),
                    message: format!(
                        "mutual exclusion: {} and {}{kinds} held the key at once for {:.1} ms, neither was told Lost",
                        describe(x),
                        describe(y),
                        (x_until.min(inside_until(y, &last_resume)) - y.enter) as f64 / 1e6
                    ),
                });
            }
        }
    }
    out
}

/// The body of the larger token of `a` and `b` (the first on a tie).
fn larger<'a>(a: Option<&'a Body>, b: Option<&'a Body>) -> Option<&'a Body> {
    match (a, b) {
        (Some(x), Some(y)) if y.token > x.token => Some(y),
        (Some(x), _) => Some(x),
        (None, y) => y,
    }
}

/// Rule 2.
pub fn fencing(ix: &Index<'_>) -> Vec<Violation> {
    let mut out = Vec::new();
    for (key, bodies) in ix.by_key() {
        // The acquisitions' bodies so far, by enter time, and for each
        // prefix the one of the largest token: of all, and of the
        // exclusive ones.
        let mut acquisitions: Vec<&Body> = Vec::new();
        let mut top_all: Vec<Option<&Body>> = vec![None];
        let mut top_exclusive: Vec<Option<&Body>> = vec![None];
        for (i, y) in bodies.iter().enumerate() {
            let v = |message, shape| Violation {
                rule: 2,
                key: key.to_owned(),
                at: y.enter,
                message,
                shape,
            };
            if y.token == 0 {
                out.push(v(
                    format!("fencing: {} has no token", describe(y)),
                    "no token".to_owned(),
                ));
                continue;
            }
            if y.call != y.acq {
                let outer = bodies[..i]
                    .iter()
                    .rev()
                    .find(|x| x.proc == y.proc && x.call == y.acq);
                if let Some(outer) = outer.filter(|o| o.token != y.token) {
                    out.push(v(
                        format!(
                            "fencing: re-entry {} has token {}, its outer call {}",
                            describe(y),
                            y.token,
                            outer.token
                        ),
                        "re-entry".to_owned(),
                    ));
                }
                continue;
            }
            // The holds ordered before Y's: every body entered before Y's
            // if Y is exclusive, else the exclusive ones, and every body
            // entered before Y's call started.
            let before = acquisitions.partition_point(|x| x.enter < y.enter);
            let ky = ix.kind(y);
            let x = if ky.is_exclusive() {
                top_all[before]
            } else {
                let start = ix.call(y.proc, y.call).map_or(y.enter, |c| c.start);
                let granted = acquisitions.partition_point(|x| x.enter < start);
                larger(top_exclusive[before], top_all[granted.min(before)])
            };
            if let Some(x) = x.filter(|x| x.token >= y.token) {
                if !ix.lost(y) {
                    let kinds = kinds_of(ix, x, y);
                    out.push(v(
                        format!(
                            "fencing: {} entered after {}{kinds} with token {} <= {}, and was not told Lost",
                            describe(y),
                            describe(x),
                            y.token,
                            x.token
                        ),
                        format!("{}{kinds}", shape(x, y)),
                    ));
                }
            }
            let n = acquisitions.len();
            acquisitions.push(y);
            top_all.push(larger(top_all[n], Some(y)));
            let exclusive = ix.kind(y).is_exclusive().then_some(*y);
            top_exclusive.push(larger(top_exclusive[n], exclusive));
        }
    }
    out
}

/// Rule 3.
pub fn bounded_calls(ix: &Index<'_>, limits: &Limits) -> Vec<Violation> {
    let mut entered: HashMap<(u32, u64), u64> = HashMap::new();
    for b in &ix.history.bodies {
        entered.insert((b.proc, b.call), b.enter);
    }
    let after = limits.lease_max + limits.connect_timeout;
    let mut out = Vec::new();
    for c in &ix.history.calls {
        if c.is_reentry() || c.outcome.is_cut() {
            continue;
        }
        let end = entered.get(&(c.proc, c.call)).copied().unwrap_or(c.end);
        let phase = end.saturating_sub(c.start);
        let faults: u64 = faults_over(&ix.history.faults, c.start, end, after)
            .map(|f| f.end - f.start + after)
            .sum();
        let bound = c.wait + 4 * limits.command_timeout + limits.call_slack + faults;
        if phase > bound {
            out.push(Violation {
                rule: 3,
                key: c.key.clone(),
                at: c.start,
                shape: c.outcome.to_string(),
                message: format!(
                    "bounded call: p{}t{} call {} took {:.0} ms to acquire (ended {}), bound {:.0} ms (wait {:.0} ms)",
                    c.proc,
                    c.task,
                    c.call,
                    phase as f64 / 1e6,
                    c.outcome,
                    bound as f64 / 1e6,
                    c.wait as f64 / 1e6
                ),
            });
        }
    }
    out
}

/// Every rule, violations ordered by time.
pub fn check(history: &History, limits: &Limits) -> Vec<Violation> {
    let ix = Index::new(history);
    let mut out = mutual_exclusion(&ix);
    out.extend(fencing(&ix));
    out.extend(bounded_calls(&ix, limits));
    out.extend(crate::availability::availability(&ix, limits));
    out.extend(crate::availability::released_keys(&ix, limits));
    out.extend(crate::reentry::siblings(&ix));
    out.extend(crate::reentry::after_hold(&ix, limits));
    out.extend(crate::kinds::permits(&ix));
    out.extend(crate::kinds::fair_order(&ix, limits));
    out.extend(crate::kinds::kinds_apart(&ix));
    out.extend(hold_end(&ix, limits));
    out.extend(crate::election_rules::check(history, limits));
    out.sort_by_key(|v| (v.at, v.rule));
    out
}
