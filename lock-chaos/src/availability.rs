//! Rule 4: a call that timed out waited on a key that something held, or
//! that a fault could have kept held; rule 7: or that a call released
//! shortly before (a failover may keep it held until the release is sent
//! again). A multi-key call that timed out waited on a key of its set that
//! qualifies. See [`crate::checker`].

use std::collections::HashMap;

use crate::history::{LockKind, Outcome};
use crate::index::{Index, Limits, Violation};

/// How long before a fault's start the state it may bring back can date
/// from (ns): a restore's snapshot is taken at the start, and a promoted
/// replica lags its master by a little.
const REVERT_SLACK: u64 = 1_000_000_000;

/// Whether fault `f` can bring back older state: a restore from a
/// snapshot, and on Cluster and Sentinel (`release_bound` set) a promoted
/// replica: a master killed or failed over, or paused past the failure
/// detection.
fn reverts(f: &crate::history::Fault, limits: &Limits) -> bool {
    let replicated = limits.release_bound.is_some();
    f.kind == "restore"
        || (replicated
            && (f.kind == "kill-master" || f.kind == "failover" || f.kind.starts_with("pause")))
}

/// The intervals in which a holder of `key` is recorded: bodies (from
/// `grant_lead` before), a lease after every body whose call did not end
/// cleanly, and a lease after every unclean call without a body (from
/// `grant_lead` before its end). And the places in a line that a call may
/// have left behind, for calls that keep one (a fair call; a writer on a
/// key with readers, whose claim holds new readers back):
/// - stranded: a waiter lease after a call without a body that ended
///   within a fault window or the longest lease and a connect timeout
///   after it: its withdrawal, sent as it ends, may not have arrived;
/// - revived: a fault that can bring back older state ([`reverts`]: a
///   restore's snapshot, a promoted replica) and started while the call
///   was in line (from its start until it entered, or ended; up to
///   [`REVERT_SLACK`] later) may bring its place back, alive until a
///   waiter lease after the fault's start.
fn held(ix: &Index<'_>, key: &str, limits: &Limits) -> Vec<(u64, u64)> {
    let h = ix.history;
    let mut spans = Vec::new();
    for b in h.bodies.iter().filter(|b| b.key == key) {
        spans.push((b.enter.saturating_sub(limits.grant_lead), b.exit));
        if !ix.clean(b) {
            let lease = ix.call(b.proc, b.acq).map_or(limits.lease_max, |c| c.lease);
            spans.push((b.exit, b.exit + lease));
        }
    }
    let readers = h
        .calls
        .iter()
        .any(|c| c.key == key && c.kind == LockKind::Read);
    let after = limits.lease_max + limits.connect_timeout;
    for c in h.calls.iter().filter(|c| c.key == key && !c.is_reentry()) {
        let entered = ix.body(c.proc, c.call).map(|b| b.enter);
        if entered.is_none() && !c.outcome.is_clean() && c.outcome != Outcome::Timeout {
            let from = c.start.max(c.end.saturating_sub(limits.grant_lead));
            spans.push((from, c.end + c.lease));
        }
        // A multi-key call keeps no place in any line: its script withdraws
        // a writer's claim at once.
        let in_line = !c.in_set()
            && match c.kind {
                LockKind::Fair => true,
                LockKind::Write | LockKind::Plain => readers,
                LockKind::Read | LockKind::Permits(_) => false,
            };
        if !in_line || c.waiter_lease == 0 {
            continue;
        }
        let stranded = entered.is_none()
            && h.faults
                .iter()
                .any(|f| f.start <= c.end && c.end <= f.end + after);
        if stranded {
            spans.push((c.end, c.end + c.waiter_lease));
        }
        let left_line = entered.unwrap_or(c.end) + REVERT_SLACK;
        for f in h
            .faults
            .iter()
            .filter(|f| reverts(f, limits) && c.start <= f.start && f.start <= left_line)
        {
            spans.push((f.start, f.start + c.waiter_lease));
        }
    }
    spans
}

/// Rule 4's explanation of why `key` may have been unavailable: its
/// holders, and fault windows followed by the longest lease and a connect
/// timeout.
fn explained(ix: &Index<'_>, key: &str, limits: &Limits) -> Vec<(u64, u64)> {
    let h = ix.history;
    let mut spans = held(ix, key, limits);
    let after = limits.lease_max + limits.connect_timeout;
    for f in &h.faults {
        spans.push((f.start, f.end + after));
    }
    spans.sort_unstable();
    spans
}

/// The longest stretch of `[from, to]` that no span covers: (start, length).
pub fn longest_gap(spans: &[(u64, u64)], from: u64, to: u64) -> (u64, u64) {
    let mut covered_to = from;
    let mut best = (from, 0);
    for &(s, e) in spans {
        if s >= to {
            break;
        }
        if s > covered_to && s - covered_to > best.1 {
            best = (covered_to, s - covered_to);
        }
        covered_to = covered_to.max(e);
    }
    if to > covered_to && to - covered_to > best.1 {
        best = (covered_to, to - covered_to);
    }
    best
}

/// Rule 7's explanation: the holders, and after each call on `key` that
/// returned with its release awaited, its body's exit until `bound` after
/// its end (the release may reach the key's master only after a failover).
fn released(ix: &Index<'_>, key: &str, limits: &Limits, bound: u64) -> Vec<(u64, u64)> {
    let mut spans = held(ix, key, limits);
    for b in ix
        .history
        .bodies
        .iter()
        .filter(|b| b.key == key && b.call == b.acq)
    {
        if let Some(c) = ix.call(b.proc, b.call).filter(|c| c.outcome.is_clean()) {
            spans.push((b.exit, c.end + bound));
        }
    }
    spans.sort_unstable();
    spans
}

/// The keys of each multi-key call's set, by (process, the set's id).
fn sets<'a>(ix: &Index<'a>) -> HashMap<(u32, u64), Vec<&'a str>> {
    let mut sets: HashMap<(u32, u64), Vec<&str>> = HashMap::new();
    for c in ix.history.calls.iter().filter(|c| c.in_set()) {
        sets.entry((c.proc, c.set))
            .or_default()
            .push(c.key.as_str());
    }
    sets
}

/// The timed-out calls whose wait window has an uncovered stretch longer
/// than `gap_slack` under `spans_of` (per key): rule `rule`, its message
/// `name: <the call> timed out ...; <what> for N ms`.
///
/// A multi-key call is checked once, over its set: its window is covered
/// where any key of the set is. The runtime's `Timeout` names the key that
/// refused last, but the call's wait spans every refusal before it, each
/// on whichever key of the set was taken then (it waits in that key's line
/// until news, then asks for the whole set again), and a set is free only
/// when all its keys are: so a stretch in which another key of the set was
/// held explains the wait as well as one on the named key.
fn uncovered<'a>(
    ix: &Index<'a>,
    limits: &Limits,
    (rule, name, what): (u8, &str, &str),
    spans_of: impl Fn(&str) -> Vec<(u64, u64)>,
) -> Vec<Violation> {
    let mut cache: HashMap<&str, Vec<(u64, u64)>> = HashMap::new();
    let sets = sets(ix);
    let mut checked_sets = std::collections::HashSet::new();
    let mut out = Vec::new();
    for c in &ix.history.calls {
        if c.outcome != Outcome::Timeout || c.is_reentry() {
            continue;
        }
        let keys = match sets.get(&(c.proc, c.set)) {
            Some(keys) if c.in_set() => {
                if !checked_sets.insert((c.proc, c.set)) {
                    continue;
                }
                keys.clone()
            }
            _ => vec![c.key.as_str()],
        };
        let mut spans = Vec::new();
        for &key in &keys {
            spans.extend_from_slice(cache.entry(key).or_insert_with(|| spans_of(key)));
        }
        if keys.len() > 1 {
            spans.sort_unstable();
        }
        let to = c.end.min(c.start + c.wait);
        let (at, len) = longest_gap(&spans, c.start, to);
        if len > limits.gap_slack {
            let (of, what) = if keys.len() > 1 {
                let what = what.replacen("the key was", "its keys were", 1);
                (format!(" on the set {}", keys.join(", ")), what)
            } else {
                (String::new(), what.to_owned())
            };
            out.push(Violation {
                rule,
                key: c.key.clone(),
                at,
                shape: if keys.len() > 1 { "multi-key" } else { "" }.to_owned(),
                message: format!(
                    "{name}: p{}t{} call {}{of} timed out after waiting {:.0} ms; {what} for {:.0} ms",
                    c.proc,
                    c.task,
                    c.call,
                    (c.end - c.start) as f64 / 1e6,
                    len as f64 / 1e6
                ),
            });
        }
    }
    out
}

/// Rule 4.
pub fn availability(ix: &Index<'_>, limits: &Limits) -> Vec<Violation> {
    let what = "the key was unavailable with no holder and no fault";
    uncovered(ix, limits, (4, "availability", what), |key| {
        explained(ix, key, limits)
    })
}

/// Rule 7 (when `limits.release_bound` is set).
pub fn released_keys(ix: &Index<'_>, limits: &Limits) -> Vec<Violation> {
    let Some(bound) = limits.release_bound else {
        return Vec::new();
    };
    let what = format!(
        "the key was unavailable with no holder and no release within {:.0} s before",
        bound as f64 / 1e9
    );
    uncovered(ix, limits, (7, "released key held", &what), |key| {
        released(ix, key, limits, bound)
    })
}

#[cfg(test)]
mod tests {
    use super::longest_gap;

    #[test]
    fn gaps() {
        assert_eq!(longest_gap(&[], 10, 20), (10, 10));
        assert_eq!(longest_gap(&[(0, 12), (15, 30)], 10, 20), (12, 3));
        assert_eq!(longest_gap(&[(0, 30)], 10, 20), (10, 0));
        assert_eq!(longest_gap(&[(11, 13)], 10, 20), (13, 7));
    }
}
