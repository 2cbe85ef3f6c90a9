//! Rules 11 to 15: the election mode's, on its terms, ticks and lists
//! ([`crate::election`]). A tick is *accepted* when its fenced write
//! answered `ok`. A term *lost* when its end says so, or when it has no end
//! (its worker was killed).
//!
//! 11. Ticks in Redis order: in each key's list as Redis kept it at the
//!     end, the tokens never go down (a stale leader never wrote after a
//!     newer term did).
//! 12. Terms' tokens rise: a term that began after another on its key has
//!     a greater token, unless it lost (a grant erased by a fault may begin
//!     late with a smaller token, but must be lost).
//! 13. No stale tick after a newer term's: an accepted tick of a term is
//!     never sent after a newer term's (greater token) first accepted tick
//!     was answered, unless a fault that can lose writes (a restart or
//!     restore; on Cluster and Sentinel a master killed, failed over or
//!     paused) overlaps the stretch between them: it can take the newer
//!     write and its fence back.
//! 14. Hand-over after a resignation: after a leader resigned (its future
//!     returned `Ok` by plan, and its task campaigns again), a newer term
//!     on the key ticks accepted within [`HANDOVER`], unless a fault window
//!     (followed by the longest lease and a connect timeout; a worker's
//!     kill or pause by a connect timeout) overlaps that second, or the run
//!     ended within it.
//! 15. Many terms: each key had at least 3 terms, and one per
//!     [`SECONDS_PER_TERM`] s of the run.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::election::{EndKind, Records, Tick, TickResult, Why};
use crate::history::{Fault, History};
use crate::index::{faults_over, Limits, Violation};

/// Rule 14's bound: a resignation is followed by a newer term's first
/// accepted tick within 1 s.
pub const HANDOVER: u64 = 1_000_000_000;

/// Rule 15: at least one term per key per this many seconds of the run.
pub const SECONDS_PER_TERM: u64 = 4;

/// Whether fault `f` is a worker's (a kill or pause of a worker process).
pub fn on_worker(f: &Fault) -> bool {
    f.target.starts_with("worker")
}

/// Whether fault `f` can lose writes that were answered: a restart (empty)
/// or a restore (an older dump), and on Cluster and Sentinel
/// (`release_bound` set) a promoted replica: a master killed, failed over,
/// or paused past the failure detection.
fn loses_writes(f: &Fault, limits: &Limits) -> bool {
    let replicated = limits.release_bound.is_some();
    !on_worker(f)
        && (f.kind == "restart"
            || f.kind == "restore"
            || (replicated
                && (f.kind == "kill-master"
                    || f.kind == "failover"
                    || f.kind.starts_with("pause"))))
}

/// Whether the term `token` on `key` lost (or never reported its end).
fn lost(ends: &HashMap<(&str, u64), EndKind>, key: &str, token: u64) -> bool {
    ends.get(&(key, token)).is_none_or(|e| e.is_lost())
}

/// The accepted ticks of each key, by the time they were sent.
pub fn accepted(r: &Records) -> BTreeMap<&str, Vec<&Tick>> {
    let mut map: BTreeMap<&str, Vec<&Tick>> = BTreeMap::new();
    for t in r.ticks.iter().filter(|t| t.result == TickResult::Ok) {
        map.entry(t.key.as_str()).or_default().push(t);
    }
    for ticks in map.values_mut() {
        ticks.sort_by_key(|t| (t.sent, t.acked));
    }
    map
}

/// Each term's first accepted tick, per key: (token, acked), by `acked`.
fn first_ticks<'a>(ticks: &[&'a Tick]) -> Vec<&'a Tick> {
    let mut first: HashMap<u64, &Tick> = HashMap::new();
    for t in ticks {
        let e = first.entry(t.token).or_insert(t);
        if t.acked < e.acked {
            *e = t;
        }
    }
    let mut firsts: Vec<&Tick> = first.into_values().collect();
    firsts.sort_by_key(|t| t.acked);
    firsts
}

/// Rule 11.
pub fn redis_order(r: &Records) -> Vec<Violation> {
    let mut out = Vec::new();
    for list in &r.lists {
        for (i, pair) in list.tokens.windows(2).enumerate() {
            if pair[1] < pair[0] {
                // The time of the stale tick, if the history has it.
                let at = r
                    .ticks
                    .iter()
                    .filter(|t| t.key == list.key && t.token == pair[1])
                    .map(|t| t.sent)
                    .max()
                    .unwrap_or(0);
                out.push(Violation {
                    rule: 11,
                    key: list.key.clone(),
                    at,
                    shape: "token down".into(),
                    message: format!(
                        "ticks in Redis order: token {} follows {} at {} of {} in the list of {}",
                        pair[1],
                        pair[0],
                        i + 1,
                        list.tokens.len(),
                        list.key
                    ),
                });
            }
        }
    }
    out
}

/// Rule 12.
pub fn terms_rise(r: &Records) -> Vec<Violation> {
    let ends = end_map(r);
    let mut by_key: BTreeMap<&str, Vec<_>> = BTreeMap::new();
    for t in &r.terms {
        by_key.entry(t.key.as_str()).or_default().push(t);
    }
    let mut out = Vec::new();
    for (key, mut terms) in by_key {
        terms.sort_by_key(|t| t.at);
        let mut top: Option<&crate::election::TermStart> = None;
        for y in terms {
            if let Some(x) = top.filter(|x| x.token >= y.token && x.at < y.at) {
                if !lost(&ends, key, y.token) {
                    out.push(Violation {
                        rule: 12,
                        key: key.to_owned(),
                        at: y.at,
                        shape: if x.proc == y.proc {
                            "same process".into()
                        } else {
                            "across processes".into()
                        },
                        message: format!(
                            "terms' tokens rise: p{}t{}'s term began after p{}t{}'s with token {} <= {}, and was not lost",
                            y.proc, y.task, x.proc, x.task, y.token, x.token
                        ),
                    });
                }
            }
            if top.is_none_or(|x| y.token > x.token) {
                top = Some(y);
            }
        }
    }
    out
}

/// The end of each term, by (key, token).
fn end_map(r: &Records) -> HashMap<(&str, u64), EndKind> {
    r.ends
        .iter()
        .map(|e| ((e.key.as_str(), e.token), e.end))
        .collect()
}

/// Rule 13.
pub fn no_stale_tick(h: &History, limits: &Limits) -> Vec<Violation> {
    let mut out = Vec::new();
    for (key, ticks) in accepted(&h.election) {
        let firsts = first_ticks(&ticks);
        for x in &ticks {
            // The newest term whose first accepted tick was answered before
            // X was sent.
            let before = firsts.partition_point(|y| y.acked < x.sent);
            let Some(y) = firsts[..before].iter().max_by_key(|y| y.token) else {
                continue;
            };
            if y.token <= x.token {
                continue;
            }
            let excused =
                faults_over(&h.faults, y.acked, x.sent, 0).any(|f| loses_writes(f, limits));
            if excused {
                continue;
            }
            out.push(Violation {
                rule: 13,
                key: key.to_owned(),
                at: x.sent,
                shape: if x.handed { "handed".into() } else { "body".into() },
                message: format!(
                    "stale tick: p{}t{} wrote token {} ({}) {:.1} ms after p{}t{}'s newer term {} had ticked, and it was accepted",
                    x.proc,
                    x.task,
                    x.token,
                    if x.handed { "handed" } else { "body" },
                    (x.sent - y.acked) as f64 / 1e6,
                    y.proc,
                    y.task,
                    y.token
                ),
            });
        }
    }
    out
}

/// The fault windows that excuse a slow hand-over, stretched: a server's
/// or a link's by the longest lease and a connect timeout, a worker's by a
/// connect timeout (a killed worker is started again and reconnects).
fn excusing(h: &History, limits: &Limits) -> Vec<(u64, u64)> {
    h.faults
        .iter()
        .map(|f| {
            let after = if on_worker(f) {
                limits.connect_timeout
            } else {
                limits.lease_max + limits.connect_timeout
            };
            (f.start, f.end + after)
        })
        .collect()
}

/// When the run stopped campaigning: the first term that ended because the
/// run ended, else the last tick.
fn run_end(r: &Records) -> u64 {
    let stop = r
        .ends
        .iter()
        .filter(|e| e.why == Why::Stop)
        .map(|e| e.at)
        .min();
    stop.or_else(|| r.ticks.iter().map(|t| t.acked).max())
        .unwrap_or(0)
}

/// The hand-overs after resignations: for each resignation on a key, when
/// it was recorded and how long until a newer term's first accepted tick
/// (`None`: none came), with whether a fault excuses a slow one. Those too
/// close to the run's end are left out.
pub fn handovers(h: &History, limits: &Limits) -> Vec<(String, u64, Option<u64>, bool)> {
    let r = &h.election;
    let end = run_end(r);
    let windows = excusing(h, limits);
    let accepted = accepted(r);
    let mut out = Vec::new();
    for e in r.ends.iter().filter(|e| e.why == Why::Resign) {
        if e.at + HANDOVER > end {
            continue;
        }
        let next = accepted.get(e.key.as_str()).and_then(|ticks| {
            ticks
                .iter()
                .filter(|t| t.token > e.token && t.acked > e.at)
                .map(|t| t.acked)
                .min()
        });
        let faulted = windows
            .iter()
            .any(|&(s, f)| s <= e.at + HANDOVER && e.at <= f);
        out.push((e.key.clone(), e.at, next.map(|t| t - e.at), faulted));
    }
    out
}

/// Rule 14.
pub fn handover(h: &History, limits: &Limits) -> Vec<Violation> {
    let mut out = Vec::new();
    for (key, at, took, faulted) in handovers(h, limits) {
        if faulted || took.is_some_and(|t| t <= HANDOVER) {
            continue;
        }
        let took = took.map_or("no newer term ticked".to_owned(), |t| {
            format!(
                "the next term's first tick came {:.0} ms later",
                t as f64 / 1e6
            )
        });
        out.push(Violation {
            rule: 14,
            key,
            at,
            shape: "hand-over".into(),
            message: format!("hand-over: a leader resigned and {took}, with no fault"),
        });
    }
    out
}

/// Rule 15.
pub fn many_terms(h: &History) -> Vec<Violation> {
    let r = &h.election;
    let origin = h.origin();
    let span = run_end(r).saturating_sub(origin) / 1_000_000_000;
    let least = (span / SECONDS_PER_TERM).max(3) as usize;
    let keys: HashSet<&str> = r
        .lists
        .iter()
        .map(|l| l.key.as_str())
        .chain(r.terms.iter().map(|t| t.key.as_str()))
        .collect();
    let mut keys: Vec<&str> = keys.into_iter().collect();
    keys.sort_unstable();
    let mut out = Vec::new();
    for key in keys {
        let n = r.terms.iter().filter(|t| t.key == key).count();
        if n < least {
            out.push(Violation {
                rule: 15,
                key: key.to_owned(),
                at: origin,
                shape: "few terms".into(),
                message: format!("many terms: {key} had {n} terms in {span} s, fewer than {least}"),
            });
        }
    }
    out
}

/// The longest stretch on a key between two terms' accepted ticks (a
/// term's last, the next newer term's first) that no fault window
/// (stretched as rule 14 stretches them) overlaps: (key, start, length).
pub fn longest_leaderless(h: &History, limits: &Limits) -> Option<(String, u64, u64)> {
    let windows = excusing(h, limits);
    let mut best: Option<(String, u64, u64)> = None;
    for (key, ticks) in accepted(&h.election) {
        let mut by_acked = ticks.clone();
        by_acked.sort_by_key(|t| t.acked);
        for pair in by_acked.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            if a.token == b.token || b.acked <= a.acked {
                continue;
            }
            let (from, to) = (a.acked, b.acked);
            if windows.iter().any(|&(s, e)| s <= to && from <= e) {
                continue;
            }
            if best.as_ref().is_none_or(|(_, _, len)| to - from > *len) {
                best = Some((key.to_owned(), from, to - from));
            }
        }
    }
    best
}

/// Rules 11 to 15 (none when the history has no election records).
pub fn check(h: &History, limits: &Limits) -> Vec<Violation> {
    if h.election.is_empty() {
        return Vec::new();
    }
    let mut out = redis_order(&h.election);
    out.extend(terms_rise(&h.election));
    out.extend(no_stale_tick(h, limits));
    out.extend(handover(h, limits));
    out.extend(many_terms(h));
    out
}
