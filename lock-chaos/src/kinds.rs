//! Rules 8 to 10, on the lock kinds: permits count, fair calls enter in
//! the order they began to wait, and kinds that can share a key never
//! meet a mismatch. Rules 1 and 2 (in [`crate::checker`]) cover the kinds
//! too: exclusive holders (plain, write, fair) are inside with nobody, and
//! tokens rise across kinds for holds ordered in time.
//!
//! 8. **Permits.** On a key, the permit holders (acquisitions whose call
//!    asked for `permits = N`; a re-entry is its outer call's hold) that
//!    were not told `Lost` are inside their bodies (first statement to last
//!    or drop) N at most at once. An (N + 1)th that enters while N are
//!    inside is a violation.
//! 9. **Fair order.** Take two fair acquisitions A and B on one key such
//!    that:
//!    - both entered their bodies, and neither was told `Lost` (nor cut
//!      during a fault, nor left unreported: [`Index::lost`]);
//!    - A's call started more than [`FAIR_MARGIN`] before B's;
//!    - each had to wait: when its call started, another acquisition on the
//!      key that was not told `Lost` was inside its body, so the lock was
//!      held and the call's first request (which a fair call sends at once)
//!      took a place in the line;
//!    - B started before A entered (they waited together).
//!
//!    Then A enters before B, unless a fault could have cost A its place:
//!    a fault window that affects A (any fault on a server, or a proxy
//!    fault on every link or on A's process's link) overlapping the time
//!    from A's start to B's entry, its end stretched by A's waiter lease
//!    and a connect timeout (a place lapses when its heartbeat stops for a
//!    waiter lease; a restart, restore or failover erases the line; a
//!    pause longer than the waiter lease expires it). A call that gave up
//!    or failed never entered, so it is not in a pair. The rule assumes
//!    that no worker stalls, with no fault, for 2/3 of a waiter lease (a
//!    heartbeat's lateness before the place lapses: 1.3 s or more here).
//! 10. **Kinds stay apart.** The kinds workload keeps each key to kinds
//!     that can share it (readers and writers; permits of one count;
//!     fair), so no call fails with `KindMismatch`.

use std::collections::{BTreeMap, HashMap};

use crate::history::{Body, Call, Fault, LockKind, Outcome};
use crate::index::{Index, Limits, Violation};
use crate::plan::DEFAULT_WAITER_LEASE_MS;

/// How much earlier A must have begun to wait than B for rule 9 to expect
/// A to enter first (ns): 200 ms. The history's start is taken in the
/// worker before the call's first request leaves, and the server orders
/// the line by when requests arrive: scheduling on loaded cores, the
/// proxies and the clock reads put noise of up to tens of milliseconds
/// between the two. And within one client a fair notice wakes only the
/// waiter it names (the others keep their places by heartbeat), so a
/// waiter may enter a little later than the order alone says, though
/// never after a later one. The margin keeps such noise from being taken for disorder.
pub const FAIR_MARGIN: u64 = 200_000_000;

/// Rule 8.
pub fn permits(ix: &Index<'_>) -> Vec<Violation> {
    let mut out = Vec::new();
    for (key, bodies) in ix.by_key() {
        let mut inside: Vec<&Body> = Vec::new();
        for y in bodies.iter().filter(|b| b.call == b.acq && !ix.lost(b)) {
            let LockKind::Permits(n) = ix.kind(y) else {
                continue;
            };
            inside.retain(|x| x.exit > y.enter);
            inside.push(y);
            if inside.len() > n as usize {
                let who: Vec<String> = inside
                    .iter()
                    .map(|b| format!("p{}t{} call {}", b.proc, b.task, b.call))
                    .collect();
                out.push(Violation {
                    rule: 8,
                    key: key.to_owned(),
                    at: y.enter,
                    shape: format!("permits:{n}"),
                    message: format!(
                        "permits: {} holders inside at once on a key of permits = {n} ({}), none told Lost",
                        inside.len(),
                        who.join(", ")
                    ),
                });
            }
        }
    }
    out
}

/// The most holders of a shared kind (readers, or permit holders) that
/// were inside at once on each key that has any, with the kind: what
/// rules 1 and 8 had to check.
pub fn most_inside(ix: &Index<'_>) -> BTreeMap<String, (usize, LockKind)> {
    let mut out = BTreeMap::new();
    for (key, bodies) in ix.by_key() {
        let mut inside: Vec<&Body> = Vec::new();
        for y in bodies.iter().filter(|b| b.call == b.acq && !ix.lost(b)) {
            let kind = ix.kind(y);
            if kind.is_exclusive() {
                continue;
            }
            inside.retain(|x| x.exit > y.enter);
            inside.push(y);
            let most = out.entry(key.to_owned()).or_insert((0, kind));
            most.0 = most.0.max(inside.len());
        }
    }
    out
}

/// Whether fault `f` can have affected the calls of process `proc`: a
/// fault on a server (or a deployment's node), or a proxy fault on every
/// link of a node or on `proc`'s own (`nodeN/wK`).
pub fn affects(f: &Fault, proc: u32) -> bool {
    match f.target.split_once("/w") {
        Some((_, worker)) => worker.parse::<u32>().is_ok_and(|w| w == proc),
        None => true,
    }
}

/// What rule 9 looked at.
#[derive(Debug, Default)]
pub struct FairPairs {
    /// Pairs that waited together: A began more than the margin before B,
    /// B before A entered, both had to wait and entered, neither lost.
    pub checked: usize,
    /// Of those, pairs where B entered first, excused by a fault that
    /// affected A.
    pub excused: usize,
    /// The pairs where B entered first with no such fault.
    pub violations: Vec<Violation>,
}

/// The spans in which some acquisition on `key` that was not told `Lost`
/// was inside its body, merged.
fn known_held(ix: &Index<'_>, bodies: &[&Body]) -> Vec<(u64, u64)> {
    let mut spans: Vec<(u64, u64)> = bodies
        .iter()
        .filter(|b| b.call == b.acq && !ix.lost(b))
        .map(|b| (b.enter, b.exit))
        .collect();
    spans.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::new();
    for (s, e) in spans {
        match merged.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => merged.push((s, e)),
        }
    }
    merged
}

/// Whether `t` falls strictly inside one of the merged `spans`.
fn inside(spans: &[(u64, u64)], t: u64) -> bool {
    let i = spans.partition_point(|&(s, _)| s < t);
    i > 0 && spans[i - 1].1 > t
}

/// Rule 9, with what it looked at.
pub fn fair_pairs(ix: &Index<'_>, limits: &Limits) -> FairPairs {
    let mut out = FairPairs::default();
    let h = ix.history;
    let by_key = ix.by_key();
    let mut fair: HashMap<&str, Vec<(&Call, &Body)>> = HashMap::new();
    for c in h
        .calls
        .iter()
        .filter(|c| c.kind == LockKind::Fair && !c.is_reentry())
    {
        if let Some(b) = ix.body(c.proc, c.call).filter(|b| !ix.lost(b)) {
            fair.entry(c.key.as_str()).or_default().push((c, b));
        }
    }
    for (key, mut calls) in fair {
        let held = by_key
            .get(key)
            .map_or_else(Vec::new, |bodies| known_held(ix, bodies));
        calls.retain(|(c, _)| inside(&held, c.start));
        calls.sort_by_key(|(c, _)| (c.start, c.proc, c.call));
        for (i, &(a, a_body)) in calls.iter().enumerate() {
            let later = calls[i + 1..]
                .iter()
                .take_while(|(b, _)| b.start < a_body.enter);
            for &(b, b_body) in later {
                if b.start <= a.start + FAIR_MARGIN {
                    continue;
                }
                out.checked += 1;
                if b_body.enter >= a_body.enter {
                    continue;
                }
                let waiter_lease = match a.waiter_lease {
                    0 => DEFAULT_WAITER_LEASE_MS * 1_000_000,
                    lease => lease,
                };
                let after = waiter_lease + limits.connect_timeout;
                let fault = h.faults.iter().find(|f| {
                    affects(f, a.proc) && f.start <= b_body.enter && a.start <= f.end + after
                });
                if fault.is_some() {
                    out.excused += 1;
                    continue;
                }
                let relation = if a.proc == b.proc {
                    "same process"
                } else {
                    "across processes"
                };
                out.violations.push(Violation {
                    rule: 9,
                    key: key.to_owned(),
                    at: b_body.enter,
                    shape: relation.to_owned(),
                    message: format!(
                        "fair order: p{}t{} call {} began waiting {:.1} ms before p{}t{} call {} (both while the key was held) but entered {:.1} ms after it; no fault affected p{} from its start to the other's entry",
                        a.proc,
                        a.task,
                        a.call,
                        (b.start - a.start) as f64 / 1e6,
                        b.proc,
                        b.task,
                        b.call,
                        (a_body.enter - b_body.enter) as f64 / 1e6,
                        a.proc
                    ),
                });
            }
        }
    }
    out.violations.sort_by_key(|v| v.at);
    out
}

/// Rule 9.
pub fn fair_order(ix: &Index<'_>, limits: &Limits) -> Vec<Violation> {
    fair_pairs(ix, limits).violations
}

/// Rule 10.
pub fn kinds_apart(ix: &Index<'_>) -> Vec<Violation> {
    let h = ix.history;
    let mut kinds: HashMap<&str, Vec<String>> = HashMap::new();
    for c in &h.calls {
        let list = kinds.entry(c.key.as_str()).or_default();
        if !list.contains(&c.kind.as_str()) {
            list.push(c.kind.as_str());
        }
    }
    h.calls
        .iter()
        .filter(|c| c.outcome == Outcome::KindMismatch)
        .map(|c| Violation {
            rule: 10,
            key: c.key.clone(),
            at: c.end,
            shape: c.kind.as_str(),
            message: format!(
                "kinds apart: p{}t{} call {} ({}) failed with KindMismatch; the key's calls asked for {}",
                c.proc,
                c.task,
                c.call,
                c.kind,
                kinds[c.key.as_str()].join(", ")
            ),
        })
        .collect()
}
