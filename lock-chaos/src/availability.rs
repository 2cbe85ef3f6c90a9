//! Rule 4: a call that timed out waited on a key that something held, or
//! that a fault could have kept held. See [`crate::checker`].

use crate::checker::{Index, Limits, Violation};
use crate::history::Outcome;

/// The intervals that explain why `key` may have been unavailable.
fn explained(ix: &Index<'_>, key: &str, limits: &Limits) -> Vec<(u64, u64)> {
    let h = ix.history;
    let mut spans = Vec::new();
    for b in h.bodies.iter().filter(|b| b.key == key) {
        spans.push((b.enter, b.exit));
        if !ix.clean(b) {
            let lease = ix.call(b.proc, b.acq).map_or(limits.lease_max, |c| c.lease);
            spans.push((b.exit, b.exit + lease));
        }
    }
    let mut with_body = std::collections::HashSet::new();
    for b in &h.bodies {
        with_body.insert((b.proc, b.call));
    }
    for c in h.calls.iter().filter(|c| c.key == key) {
        let unclean = !c.outcome.is_clean() && c.outcome != Outcome::Timeout;
        if unclean && !c.is_reentry() && !with_body.contains(&(c.proc, c.call)) {
            spans.push((c.end, c.end + c.lease));
        }
    }
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

/// Rule 4.
pub fn availability(ix: &Index<'_>, limits: &Limits) -> Vec<Violation> {
    let mut cache: std::collections::HashMap<&str, Vec<(u64, u64)>> = Default::default();
    let mut out = Vec::new();
    for c in &ix.history.calls {
        if c.outcome != Outcome::Timeout || c.is_reentry() {
            continue;
        }
        let spans = cache
            .entry(c.key.as_str())
            .or_insert_with(|| explained(ix, &c.key, limits));
        let to = c.end.min(c.start + c.wait);
        let (at, len) = longest_gap(spans, c.start, to);
        if len > limits.gap_slack {
            out.push(Violation {
                rule: 4,
                key: c.key.clone(),
                at,
                shape: String::new(),
                message: format!(
                    "availability: p{}t{} call {} timed out after waiting {:.0} ms; the key was unavailable with no holder and no fault for {:.0} ms",
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
