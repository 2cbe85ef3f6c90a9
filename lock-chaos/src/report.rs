//! What the harness prints: the context of a violation, and the summary.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::history::{Call, History, LockKind, NestKind, Outcome, Resume, OUTCOMES};
use crate::index::{Index, Limits, Violation};
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
                "    body p{}t{} call {} acq {} client {}{}{}{}: enter {} exit {} token {} {} -> {}",
                b.proc,
                b.task,
                b.call,
                b.acq,
                b.client,
                kind_word(ix.kind(b)),
                made(ix, b.proc, b.call),
                set_word(ix, b.proc, b.call),
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
                "    call p{}t{} call {} acq {} client {}{}{}{}: start {} end {} wait {} ms lease {} ms{} -> {}",
                c.proc,
                c.task,
                c.call,
                c.acq,
                c.client,
                kind_word(c.kind),
                made(ix, c.proc, c.call),
                set_word(ix, c.proc, c.call),
                rel(c.start, origin),
                rel(c.end, origin),
                c.wait / 1_000_000,
                c.lease / 1_000_000,
                waiter_word(c),
                c.outcome
            ),
        ));
    }
    lines.extend(resumes(ix, &v.key, (from, to), origin));
    lines.extend(crate::election_report::context(h, &v.key, v.at, (from, to)));
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

/// The kind in a record's line: nothing for a plain call.
fn kind_word(kind: LockKind) -> String {
    match kind {
        LockKind::Plain => String::new(),
        kind => format!(" {kind}"),
    }
}

/// The waiter lease in a fair call's line.
fn waiter_word(c: &Call) -> String {
    if c.kind == LockKind::Fair {
        format!(" waiter lease {} ms", c.waiter_lease / 1_000_000)
    } else {
        String::new()
    }
}

/// How a sibling on a held key or a detached call was made, for its lines.
fn made(ix: &Index<'_>, proc: u32, call: u64) -> String {
    ix.nesting(proc, call).map_or(String::new(), |n| {
        format!(" ({} in call {})", n.kind.as_str(), n.parent)
    })
}

/// The set of a multi-key call's record, for its lines: the set's id and
/// its keys.
fn set_word(ix: &Index<'_>, proc: u32, call: u64) -> String {
    let Some(set) = ix.call(proc, call).filter(|c| c.in_set()).map(|c| c.set) else {
        return String::new();
    };
    let keys: Vec<&str> = ix
        .history
        .calls
        .iter()
        .filter(|c| c.proc == proc && c.set == set)
        .map(|c| c.key.as_str())
        .collect();
    format!(" (set {set}: {})", keys.join(", "))
}

/// One line for each body on `key` with resumes within `[from, to]`: how
/// many, the first and last, and the tokens seen.
fn resumes(ix: &Index<'_>, key: &str, (from, to): (u64, u64), origin: u64) -> Vec<(u64, String)> {
    let mut by_call: BTreeMap<(u32, u64), Vec<&Resume>> = BTreeMap::new();
    for r in ix
        .history
        .resumes
        .iter()
        .filter(|r| r.at >= from && r.at <= to)
    {
        let on_key = ix
            .call(r.proc, r.acq)
            .or_else(|| ix.call(r.proc, r.call))
            .is_some_and(|c| c.key == key);
        if on_key {
            by_call.entry((r.proc, r.call)).or_default().push(r);
        }
    }
    let mut lines = Vec::new();
    for ((proc, call), list) in by_call {
        let (first, last) = (list[0], list[list.len() - 1]);
        let mut tokens: Vec<u64> = list.iter().map(|r| r.token).collect();
        tokens.dedup();
        let tokens: Vec<String> = tokens.iter().map(u64::to_string).collect();
        lines.push((
            first.at,
            format!(
                "    resumes p{proc}t{} call {call} acq {}: {} from {} to {} tokens {}",
                first.task,
                first.acq,
                list.len(),
                rel(first.at, origin),
                rel(last.at, origin),
                tokens.join(",")
            ),
        ));
    }
    lines
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
    out.push_str(&nested_summary(h));
    out.push_str(&multi_summary(h));
    out.push_str(&kinds_summary(h));
    let mut rules = [0usize; 17];
    for v in violations {
        rules[usize::from(v.rule).min(16)] += 1;
    }
    let _ = writeln!(
        out,
        "violations: {} (mutual exclusion {}, fencing {}, bounded calls {}, availability {}, siblings {}, after hold {}, released keys {}, permits {}, fair order {}, kinds apart {}, hold's end {})",
        violations.len(),
        rules[1],
        rules[2],
        rules[3],
        rules[4],
        rules[5],
        rules[6],
        rules[7],
        rules[8],
        rules[9],
        rules[10],
        rules[16]
    );
    if !h.election.is_empty() {
        let _ = writeln!(
            out,
            "election violations: ticks in Redis order {}, terms' tokens rise {}, stale ticks {}, hand-over {}, many terms {}",
            rules[11], rules[12], rules[13], rules[14], rules[15]
        );
    }
    if h.bad_lines > 0 {
        let _ = writeln!(out, "unparsed lines: {}", h.bad_lines);
    }
    out
}

/// The siblings on held keys and the detached calls: how many, and how
/// their calls ended.
fn nested_summary(h: &History) -> String {
    let ix = Index::new(h);
    let mut out = String::new();
    let kinds = [
        (NestKind::Sibling, "siblings on held keys"),
        (NestKind::Detached, "detached calls"),
    ];
    for (kind, label) in kinds {
        let mut outcomes: BTreeMap<Outcome, usize> = BTreeMap::new();
        let mut total = 0;
        for n in h.nestings.iter().filter(|n| n.kind == kind) {
            total += 1;
            if let Some(c) = ix.call(n.proc, n.call) {
                *outcomes.entry(c.outcome).or_default() += 1;
            }
        }
        let outcomes: Vec<String> = outcomes.iter().map(|(o, n)| format!("{o}={n}")).collect();
        let _ = writeln!(out, "{label}: {total}: {}", outcomes.join(" "));
    }
    let _ = writeln!(out, "resumes: {}", h.resumes.len());
    out
}

/// The multi-key calls (sets, not their keys' records): by outcome; then
/// how many had 2 and 3 keys, asked for read mode, and had keys of one
/// hash tag (Cluster). Nothing when there are none.
fn multi_summary(h: &History) -> String {
    let mut sets: BTreeMap<(u32, u64), Vec<&Call>> = BTreeMap::new();
    for c in h.calls.iter().filter(|c| c.in_set()) {
        sets.entry((c.proc, c.set)).or_default().push(c);
    }
    if sets.is_empty() {
        return String::new();
    }
    let mut outcomes: BTreeMap<Outcome, usize> = BTreeMap::new();
    let mut sizes: BTreeMap<usize, usize> = BTreeMap::new();
    let (mut read, mut tagged) = (0, 0);
    for calls in sets.values() {
        *outcomes.entry(calls[0].outcome).or_default() += 1;
        *sizes.entry(calls.len()).or_default() += 1;
        read += usize::from(calls[0].kind == LockKind::Read);
        tagged += usize::from(calls.iter().all(|c| c.key.starts_with("{t}")));
    }
    let outcomes: Vec<String> = outcomes.iter().map(|(o, n)| format!("{o}={n}")).collect();
    let sizes: Vec<String> = sizes.iter().map(|(k, n)| format!("{k} keys {n}")).collect();
    format!(
        "multi-key calls: {}: {}\nmulti-key sets: {}, read {read}, one hash tag {tagged}\n",
        sets.len(),
        outcomes.join(" "),
        sizes.join(", ")
    )
}

/// The calls of each lock kind (acquisitions, by outcome), the most
/// readers and permit holders inside at once per key, and the fair pairs
/// rule 9 checked; nothing when every call is plain.
fn kinds_summary(h: &History) -> String {
    let mut out = String::new();
    if h.calls.iter().all(|c| c.kind == LockKind::Plain) {
        return out;
    }
    let mut by_kind: BTreeMap<LockKind, BTreeMap<Outcome, usize>> = BTreeMap::new();
    for c in h.calls.iter().filter(|c| !c.is_reentry()) {
        *by_kind
            .entry(c.kind)
            .or_default()
            .entry(c.outcome)
            .or_default() += 1;
    }
    for (kind, outcomes) in &by_kind {
        let total: usize = outcomes.values().sum();
        let list: Vec<String> = outcomes.iter().map(|(o, n)| format!("{o}={n}")).collect();
        let _ = writeln!(out, "kind {kind}: {total}: {}", list.join(" "));
    }
    let ix = Index::new(h);
    let most: Vec<String> = crate::kinds::most_inside(&ix)
        .iter()
        .map(|(key, (n, kind))| format!("{key} ({kind}) {n}"))
        .collect();
    let _ = writeln!(out, "most inside at once: {}", most.join(", "));
    let fair = crate::kinds::fair_pairs(&ix, &Limits::default());
    let _ = writeln!(
        out,
        "fair pairs that waited together: {} ({} with the later one first, excused by a fault)",
        fair.checked, fair.excused
    );
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

/// Successful calls (acquisitions, not re-entries, that returned with
/// their release awaited: `ok` or `body_err`) by end time, per fault
/// window: during each fault (its start to its end) and after it (its end
/// to the next fault's start, or the last call's end). A line per fault,
/// then the totals per kind, with the calm stretches (3 s or more after a
/// fault) apart, so that a run that only shows unavailability says so.
pub fn windows(h: &History) -> String {
    let mut ends: Vec<u64> = h
        .calls
        .iter()
        .filter(|c| !c.is_reentry() && c.outcome.is_clean())
        .map(|c| c.end)
        .collect();
    ends.sort_unstable();
    let count = |from: u64, to: u64| {
        let lo = ends.partition_point(|&t| t < from);
        let hi = ends.partition_point(|&t| t < to);
        hi - lo
    };
    let last = h.calls.iter().map(|c| c.end).max().unwrap_or(0);
    let origin = h.origin();
    let mut faults: Vec<_> = h.faults.iter().collect();
    faults.sort_by_key(|f| f.start);
    let first = faults.first().map_or(last, |f| f.start);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "successful calls per window (ok or body_err, by end; s from run start):\n  before the first fault: {} in {:.1} s",
        count(origin, first),
        first.saturating_sub(origin) as f64 / 1e9
    );
    // Per kind: faults, calls during, seconds during, calls after, seconds
    // after, windows with no success during.
    let mut kinds: BTreeMap<String, [f64; 6]> = BTreeMap::new();
    for (i, f) in faults.iter().enumerate() {
        let next = faults.get(i + 1).map_or(last, |g| g.start).max(f.end);
        let (during, after) = (count(f.start, f.end), count(f.end, next));
        let (d_s, a_s) = ((f.end - f.start) as f64 / 1e9, (next - f.end) as f64 / 1e9);
        let _ = writeln!(
            out,
            "  {:7.1} {} on {}: {during} during {d_s:.1} s, {after} in the {a_s:.1} s after",
            (f.start - origin) as f64 / 1e9,
            f.kind,
            f.target
        );
        let mut add = |name: String, d: usize, ds: f64| {
            let e = kinds.entry(name).or_default();
            e[0] += 1.0;
            e[1] += d as f64;
            e[2] += ds;
            e[5] += f64::from(u8::from(d == 0));
        };
        add(kind_family(&f.kind).to_owned(), during, d_s);
        let calm = if a_s >= 3.0 {
            "calm (3 s or more)"
        } else {
            "between faults"
        };
        let e = kinds.entry(format!("~{calm}")).or_default();
        e[0] += 1.0;
        e[3] += after as f64;
        e[4] += a_s;
    }
    for (kind, [n, d, ds, a, a_s, zero]) in &kinds {
        if let Some(stretch) = kind.strip_prefix('~') {
            let _ = writeln!(
                out,
                "  after faults, {stretch}: {n} windows, {a} calls in {a_s:.1} s ({:.1}/s)",
                a / a_s.max(1e-9)
            );
        } else {
            let _ = writeln!(
                out,
                "  during {kind}: {n} faults, {d} calls in {ds:.1} s ({:.1}/s), {zero} with none",
                d / ds.max(1e-9)
            );
        }
    }
    out
}
