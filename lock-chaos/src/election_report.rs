//! What the harness prints of an election run: the records around a
//! violation, and the summary (terms, ticks, hand-overs).

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::election::{TickResult, Why, END_KINDS};
use crate::election_rules::{self, HANDOVER};
use crate::history::History;
use crate::index::Limits;

/// Milliseconds since `origin`, for reading.
fn rel(t: u64, origin: u64) -> String {
    format!("{:.3}", (t as f64 - origin as f64) / 1e6)
}

/// The election records on `key` around a violation: terms that began or
/// ended in `[from, to]`, and ticks within 200 ms of `at`. Each with its
/// time (ns) for sorting.
pub fn context(h: &History, key: &str, at: u64, (from, to): (u64, u64)) -> Vec<(u64, String)> {
    let r = &h.election;
    let origin = h.origin();
    let mut lines = Vec::new();
    for t in r
        .terms
        .iter()
        .filter(|t| t.key == key && (from..=to).contains(&t.at))
    {
        lines.push((
            t.at,
            format!(
                "    term p{}t{} client {} token {}: began {}",
                t.proc,
                t.task,
                t.client,
                t.token,
                rel(t.at, origin)
            ),
        ));
    }
    for e in r
        .ends
        .iter()
        .filter(|e| e.key == key && (from..=to).contains(&e.at))
    {
        lines.push((
            e.at,
            format!(
                "    term p{}t{} token {}: ended {} {} ({})",
                e.proc,
                e.task,
                e.token,
                rel(e.at, origin),
                e.end,
                e.why.as_str()
            ),
        ));
    }
    let near = |t: u64| t.abs_diff(at) <= 200_000_000;
    for k in r.ticks.iter().filter(|k| k.key == key && near(k.sent)) {
        lines.push((
            k.sent,
            format!(
                "    tick p{}t{} token {} {}: sent {} acked {} -> {}",
                k.proc,
                k.task,
                k.token,
                if k.handed { "handed" } else { "body" },
                rel(k.sent, origin),
                rel(k.acked, origin),
                k.result.as_str()
            ),
        ));
    }
    lines
}

/// The `q`th quantile (0..=100) of sorted `v` (ms).
fn quantile(v: &[u64], q: usize) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v[(v.len() - 1) * q / 100] as f64 / 1e6
}

/// The summary of an election run; nothing for another run.
pub fn summary(h: &History, limits: &Limits) -> String {
    let r = &h.election;
    let mut out = String::new();
    if r.is_empty() {
        return out;
    }
    let mut per_key: BTreeMap<&str, usize> = BTreeMap::new();
    for t in &r.terms {
        *per_key.entry(t.key.as_str()).or_default() += 1;
    }
    let keys: Vec<String> = per_key.iter().map(|(k, n)| format!("{k} {n}")).collect();
    let _ = writeln!(out, "terms: {} ({})", r.terms.len(), keys.join(", "));
    let mut ends = String::new();
    for kind in END_KINDS {
        let n = r.ends.iter().filter(|e| e.end == kind).count();
        let _ = write!(ends, " {kind}={n}");
    }
    let whys: Vec<String> = [Why::Resign, Why::Refused, Why::Stop]
        .iter()
        .map(|w| {
            let n = r.ends.iter().filter(|e| e.why == *w).count();
            format!("{}={n}", w.as_str())
        })
        .collect();
    let _ = writeln!(
        out,
        "term ends: {}:{ends} unended={}; returned as {}",
        r.ends.len(),
        r.terms.len().saturating_sub(r.ends.len()),
        whys.join(" ")
    );
    for (label, handed) in [("ticks", None), ("handed ticks", Some(true))] {
        let ticks: Vec<_> = r
            .ticks
            .iter()
            .filter(|t| handed.is_none_or(|h| t.handed == h))
            .collect();
        let count = |res| ticks.iter().filter(|t| t.result == res).count();
        let _ = writeln!(
            out,
            "{label}: {}: accepted={} refused={} error={}",
            ticks.len(),
            count(TickResult::Ok),
            count(TickResult::Fenced),
            count(TickResult::Error)
        );
    }
    let lists: Vec<String> = r
        .lists
        .iter()
        .map(|l| format!("{} {}", l.key, l.tokens.len()))
        .collect();
    let _ = writeln!(out, "lists (tokens kept): {}", lists.join(", "));
    out.push_str(&handover_summary(h, limits));
    out
}

/// The hand-overs after resignations (rule 14) and the longest leaderless
/// stretch outside faults.
fn handover_summary(h: &History, limits: &Limits) -> String {
    let all = election_rules::handovers(h, limits);
    let mut calm: Vec<u64> = all
        .iter()
        .filter(|(_, _, _, faulted)| !*faulted)
        .map(|(_, _, took, _)| took.unwrap_or(u64::MAX))
        .collect();
    calm.sort_unstable();
    let late = calm.iter().filter(|&&t| t > HANDOVER).count();
    let mut out = format!(
        "hand-overs after resignations: {} ({} during or after faults); outside faults {}: median {:.1} ms, p99 {:.1} ms, longest {:.1} ms, over 1 s {late}\n",
        all.len(),
        all.len() - calm.len(),
        calm.len(),
        quantile(&calm, 50),
        quantile(&calm, 99),
        quantile(&calm, 100),
    );
    out.push_str(&kill_summary(h));
    let origin = h.origin();
    match election_rules::longest_leaderless(h, limits) {
        Some((key, at, len)) => {
            let _ = writeln!(
                out,
                "longest stretch between two terms' ticks outside faults: {:.1} ms on {key} at {:.1} s",
                len as f64 / 1e6,
                at.saturating_sub(origin) as f64 / 1e9
            );
        }
        None => out.push_str("longest stretch between two terms' ticks outside faults: none\n"),
    }
    out
}

/// The terms whose worker was killed (no end recorded, begun before a
/// kill of their worker): how long from the kill until a newer term on
/// the key ticked accepted. Nothing when no worker was killed.
fn kill_summary(h: &History) -> String {
    let r = &h.election;
    let accepted = election_rules::accepted(r);
    let mut took: Vec<u64> = Vec::new();
    let mut never = 0;
    for f in h.faults.iter().filter(|f| f.kind == "wkill") {
        let Some(proc) = f
            .target
            .strip_prefix("worker")
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let killed = r.terms.iter().filter(|t| {
            t.proc == proc
                && t.at < f.start
                && !r.ends.iter().any(|e| e.key == t.key && e.token == t.token)
        });
        for t in killed {
            let next = accepted.get(t.key.as_str()).and_then(|ticks| {
                ticks
                    .iter()
                    .filter(|k| k.token > t.token && k.acked > f.start)
                    .map(|k| k.acked - f.start)
                    .min()
            });
            match next {
                Some(d) => took.push(d),
                None => never += 1,
            }
        }
    }
    if took.is_empty() && never == 0 {
        return String::new();
    }
    took.sort_unstable();
    format!(
        "leaders killed: {}: a newer term ticked after median {:.1} ms, longest {:.1} ms (leases up to {} ms){}\n",
        took.len() + never,
        quantile(&took, 50),
        quantile(&took, 100),
        crate::election_worker::LEASES_MS.iter().max().unwrap_or(&0),
        if never > 0 {
            format!("; {never} with no newer term")
        } else {
            String::new()
        }
    )
}
