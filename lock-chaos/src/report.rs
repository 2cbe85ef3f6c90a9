//! What the harness prints: the context of a violation, and the summary.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::checker::{Index, Violation};
use crate::history::{History, OUTCOMES};
use std::collections::HashMap;

/// Milliseconds since `origin`, for reading.
fn rel(t: u64, origin: u64) -> String {
    format!("{:.3}", (t as f64 - origin as f64) / 1e6)
}

/// The minimal history around a violation: the records on its key within
/// ±1 s, and the faults overlapping that span. Times in ms from `origin`.
pub fn context(ix: &Index<'_>, v: &Violation, origin: u64) -> String {
    let h = ix.history;
    let (from, to) = (v.at.saturating_sub(1_000_000_000), v.at + 1_000_000_000);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "  records on {} within ±1 s (ms from run start):",
        v.key
    );
    let mut lines: Vec<(u64, String)> = Vec::new();
    for b in h
        .bodies
        .iter()
        .filter(|b| b.key == v.key && b.enter <= to && b.exit >= from)
    {
        let outcome = ix
            .call(b.proc, b.call)
            .map_or("?".to_owned(), |c| c.outcome.to_string());
        lines.push((
            b.enter,
            format!(
                "    body p{}t{} call {} acq {} client {}: enter {} exit {} token {} {} -> {}",
                b.proc,
                b.task,
                b.call,
                b.acq,
                b.client,
                rel(b.enter, origin),
                rel(b.exit, origin),
                b.token,
                if b.done { "done" } else { "dropped" },
                outcome
            ),
        ));
    }
    for c in h
        .calls
        .iter()
        .filter(|c| c.key == v.key && c.start <= to && c.end >= from)
    {
        lines.push((
            c.start,
            format!(
                "    call p{}t{} call {} acq {} client {}: start {} end {} wait {} ms lease {} ms -> {}",
                c.proc,
                c.task,
                c.call,
                c.acq,
                c.client,
                rel(c.start, origin),
                rel(c.end, origin),
                c.wait / 1_000_000,
                c.lease / 1_000_000,
                c.outcome
            ),
        ));
    }
    for f in h.faults.iter().filter(|f| f.start <= to && f.end >= from) {
        lines.push((
            f.start,
            format!(
                "    fault {} on {}: {} .. {}",
                f.kind,
                f.target,
                rel(f.start, origin),
                rel(f.end, origin)
            ),
        ));
    }
    lines.sort();
    for (_, line) in lines {
        let _ = writeln!(out, "{line}");
    }
    out
}

/// The fault kind without its parameter (`pause1500ms` -> `pause`).
fn kind_family(kind: &str) -> &str {
    kind.trim_end_matches("ms")
        .trim_end_matches(|c: char| c.is_ascii_digit())
}

/// The end-of-run summary.
pub fn summary(h: &History, duration_s: f64, violations: &[Violation]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "duration: {duration_s:.1} s");
    let _ = writeln!(out, "bodies: {}", h.bodies.len());
    let mut calls = String::new();
    for o in OUTCOMES {
        let n = h.calls.iter().filter(|c| c.outcome == o).count();
        let _ = write!(calls, " {o}={n}");
    }
    let _ = writeln!(out, "calls: {}:{calls}", h.calls.len());
    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
    for f in &h.faults {
        *kinds.entry(kind_family(&f.kind)).or_default() += 1;
    }
    let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{k}={n}")).collect();
    let _ = writeln!(out, "faults: {}: {}", h.faults.len(), kinds.join(" "));
    let losses = h.calls.iter().filter(|c| c.outcome.is_lost()).count();
    let _ = writeln!(out, "losses: {losses}");
    let mut rules = [0usize; 5];
    for v in violations {
        rules[usize::from(v.rule).min(4)] += 1;
    }
    let _ = writeln!(
        out,
        "violations: {} (mutual exclusion {}, fencing {}, bounded calls {}, availability {})",
        violations.len(),
        rules[1],
        rules[2],
        rules[3],
        rules[4]
    );
    if h.bad_lines > 0 {
        let _ = writeln!(out, "unparsed lines: {}", h.bad_lines);
    }
    out
}

/// How many faults of each family the history holds.
pub fn fault_counts(h: &History) -> BTreeMap<String, usize> {
    let mut kinds = BTreeMap::new();
    for f in &h.faults {
        *kinds.entry(kind_family(&f.kind).to_owned()).or_default() += 1;
    }
    kinds
}

/// Every violation in one line, and the context of the first `show` of
/// each rule and shape (so that rarer cases are shown too).
pub fn findings(h: &History, violations: &[Violation], label: &str, show: usize) -> String {
    let ix = Index::new(h);
    let origin = h.origin();
    let mut shown: HashMap<(u8, &str), usize> = HashMap::new();
    let mut out = String::new();
    for v in violations {
        let n = shown.entry((v.rule, v.shape.as_str())).or_default();
        let at = (v.at as f64 - origin as f64) / 1e6;
        let _ = writeln!(
            out,
            "VIOLATION {label} rule={} key={} at={at:.3}ms: {}",
            v.rule, v.key, v.message
        );
        if *n < show {
            out.push_str(&context(&ix, v, origin));
        }
        *n += 1;
    }
    out
}
