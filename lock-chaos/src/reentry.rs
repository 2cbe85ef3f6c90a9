//! Rules 5 and 6, on the re-entries made side by side with their outer
//! body: siblings joined on the key the body holds, and detached calls.
//! See [`crate::checker`].

use std::collections::BTreeMap;

use crate::history::{Body, NestKind};
use crate::index::{Index, Limits, Violation};

/// Rule 5: two siblings joined on a held key are never inside their bodies
/// at once.
pub fn siblings(ix: &Index<'_>) -> Vec<Violation> {
    let h = ix.history;
    let mut groups: BTreeMap<(u32, u64), Vec<&Body>> = BTreeMap::new();
    for n in h.nestings.iter().filter(|n| n.kind == NestKind::Sibling) {
        if let Some(b) = ix.body(n.proc, n.call) {
            groups.entry((n.proc, n.parent)).or_default().push(b);
        }
    }
    let mut out = Vec::new();
    for ((proc, parent), mut list) in groups {
        list.sort_by_key(|b| (b.enter, b.exit));
        for (i, x) in list.iter().enumerate() {
            for y in list[i + 1..].iter().take_while(|y| y.enter < x.exit) {
                out.push(Violation {
                    rule: 5,
                    key: y.key.clone(),
                    at: y.enter,
                    shape: "siblings".to_owned(),
                    message: format!(
                        "siblings on a held key: p{proc}t{} calls {} and {} (joined in the body of call {parent}, acq {}) were in their bodies at once for {:.1} ms",
                        y.task,
                        x.call,
                        y.call,
                        y.acq,
                        (x.exit.min(y.exit) - y.enter) as f64 / 1e6
                    ),
                });
            }
        }
    }
    out
}

/// A moment a body was seen running, and the fencing token it saw then
/// (`None` where the record has none).
type Event = (u64, Option<u64>);

/// The moments each re-entered body was seen running, by (process, call),
/// with its acquisition: its first statement, its last (if reached), and
/// its resumes.
fn running(ix: &Index<'_>) -> BTreeMap<(u32, u64), (u64, Vec<Event>)> {
    let h = ix.history;
    let mut map: BTreeMap<(u32, u64), (u64, Vec<Event>)> = BTreeMap::new();
    for b in h.bodies.iter().filter(|b| b.call != b.acq) {
        let (_, events) = map.entry((b.proc, b.call)).or_insert((b.acq, Vec::new()));
        events.push((b.enter, Some(b.token)));
        if b.done {
            events.push((b.exit, None));
        }
    }
    for r in h.resumes.iter().filter(|r| r.call != r.acq) {
        let (_, events) = map.entry((r.proc, r.call)).or_insert((r.acq, Vec::new()));
        events.push((r.at, Some(r.token)));
    }
    map
}

/// Rule 6: a re-entered body never runs after the hold it re-entered has
/// ended, that is after the call that took it returned or was dropped.
pub fn after_hold(ix: &Index<'_>, limits: &Limits) -> Vec<Violation> {
    let mut out = Vec::new();
    for ((proc, call), (acq, mut events)) in running(ix) {
        // A hold whose call never reported (the worker died) has no known end.
        let Some(hold) = ix.call(proc, acq) else {
            continue;
        };
        events.retain(|&(at, _)| at > hold.end + limits.resume_slack);
        events.sort_unstable();
        let Some(&(first, token)) = events.first() else {
            continue;
        };
        let kind = ix
            .nesting(proc, call)
            .map_or("re-entry", |n| n.kind.as_str());
        let outcome = ix
            .call(proc, call)
            .map_or("?".to_owned(), |c| c.outcome.to_string());
        let token = token.map_or("-".to_owned(), |t| t.to_string());
        out.push(Violation {
            rule: 6,
            key: hold.key.clone(),
            at: first,
            shape: kind.to_owned(),
            message: format!(
                "after its hold: p{proc}t{} call {call} ({kind} of acq {acq}) ran {} times after call {acq}, which took the hold, ended ({}); the first {:.1} ms after, with fencing token {token}; the call ended {outcome}",
                hold.task,
                events.len(),
                hold.outcome,
                (first - hold.end) as f64 / 1e6,
            ),
        });
    }
    out
}
