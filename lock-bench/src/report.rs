//! The results as Markdown tables: medians over runs, ratios to the floor
//! from the same run, and the targets.

use std::fmt::Write as _;
use std::time::Duration;

use crate::contenders::Who;
use crate::kinds::{Handoff, Kind, Pairs, Pattern, Raw, ReadersWriter, I_READERS, ORDER_MARGIN};
use crate::stats::median;
use crate::workloads::{
    Config, Contended, Held, Mode, Nested, Parallel, Uncontended, SLOW_FROM_USEC,
};

/// The application's tokio runtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// What `#[tokio::main]` builds: a worker per core (2 here).
    MultiThread = 0,
    /// `#[tokio::main(flavor = "current_thread")]`.
    CurrentThread = 1,
}

impl Flavor {
    pub(crate) fn title(self) -> &'static str {
        match self {
            Flavor::MultiThread => "multi-thread runtime",
            Flavor::CurrentThread => "current-thread runtime",
        }
    }
}

/// Every measurement, tagged with its run and contender.
#[derive(Default)]
pub struct Runs {
    pub a: Vec<(usize, (Who, Flavor), Uncontended)>,
    pub b: Vec<(usize, (Who, Flavor), Parallel)>,
    pub c: Vec<(usize, (Who, Mode), Contended)>,
    pub d: Vec<(usize, Who, Nested)>,
    pub e: Vec<(usize, Who, Held)>,
    pub g: Vec<(usize, Pattern, Pairs)>,
    pub h: Vec<(usize, Raw, Pairs)>,
    pub i: Vec<(usize, Kind, ReadersWriter)>,
    pub j: Vec<(usize, Kind, Handoff)>,
    /// (k): the embedded backend, one entry per run.
    pub k: Vec<crate::embedded::Embedded>,
    /// (m): memory after churn, once.
    pub m: Vec<crate::churn::Churn>,
}

impl Runs {
    /// Broken locks, as opposed to slow ones.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        for (run, (who, mode), c) in &self.c {
            if c.overlaps > 0 {
                problems.push(format!(
                    "(c) {mode:?} run {run}: {who} let {} critical sections overlap",
                    c.overlaps
                ));
            }
        }
        for (run, who, e) in &self.e {
            if e.renewing.is_some_and(|r| r != e.locks) {
                problems.push(format!(
                    "(e) run {run}: the watchdog renewed {:?} of {} held locks",
                    e.renewing, e.locks
                ));
            }
            if e.expired > 0 {
                problems.push(format!(
                    "(e) run {run}: {who} lost {} of {} locks",
                    e.expired, e.locks
                ));
            }
        }
        for (run, kind, i) in &self.i {
            if i.overlaps > 0 {
                problems.push(format!(
                    "(i) run {run}: {kind}: {} critical sections overlapped a writer's (or, plain, each other)",
                    i.overlaps
                ));
            }
        }
        for (run, kind, j) in &self.j {
            if j.overlaps > 0 {
                problems.push(format!(
                    "(j) run {run}: {kind}: {} critical sections overlapped",
                    j.overlaps
                ));
            }
        }
        problems
    }
}

/// The median over runs of `f` for the rows of `who`.
pub(crate) fn med<K: PartialEq + Copy, T>(
    rows: &[(usize, K, T)],
    who: K,
    f: impl Fn(&T) -> f64,
) -> f64 {
    let v: Vec<f64> = rows
        .iter()
        .filter(|r| r.1 == who)
        .map(|r| f(&r.2))
        .collect();
    median(&v)
}

/// The largest over runs of `f` for the rows of `who`.
fn worst<K: PartialEq + Copy, T>(rows: &[(usize, K, T)], who: K, f: impl Fn(&T) -> f64) -> f64 {
    rows.iter()
        .filter(|r| r.1 == who)
        .map(|r| f(&r.2))
        .fold(f64::NAN, f64::max)
}

/// The median over runs of `f(who) / f(base)`, both from the same run.
pub(crate) fn ratio<K: PartialEq + Copy, T>(
    rows: &[(usize, K, T)],
    who: K,
    base: K,
    f: impl Fn(&T) -> f64,
) -> f64 {
    let v: Vec<f64> = rows
        .iter()
        .filter(|r| r.1 == who)
        .filter_map(|r| {
            let b = rows.iter().find(|b| b.0 == r.0 && b.1 == base)?;
            Some(f(&r.2) / f(&b.2))
        })
        .collect();
    median(&v)
}

/// The round trips and command breakdown of the median run of `who`.
fn commands_of<K: PartialEq + Copy, T>(
    rows: &[(usize, K, T)],
    who: K,
    ops: impl Fn(&T) -> u64,
    cmds: impl Fn(&T) -> &crate::stats::Commands,
) -> String {
    let mut v: Vec<&T> = rows.iter().filter(|r| r.1 == who).map(|r| &r.2).collect();
    v.sort_by_key(|t| ops(t));
    match v.get(v.len() / 2) {
        Some(t) => {
            let c = cmds(t);
            let n = ops(t).max(1);
            format!("{:.2} ({})", c.round_trips() as f64 / n as f64, c.per_op(n))
        }
        None => "-".into(),
    }
}

/// "12 / 20 (9) µs": the median over runs of the client's and the server's
/// CPU time per call, and the server's time inside the commands.
fn cpu_of<K: PartialEq + Copy, T>(
    rows: &[(usize, K, T)],
    who: K,
    f: impl Fn(&T) -> (u64, crate::cpu::Split, &crate::stats::Commands),
) -> String {
    let per = |g: &dyn Fn(&T) -> f64| {
        med(rows, who, |t| {
            let (ops, _, _) = f(t);
            g(t) / ops.max(1) as f64
        })
    };
    let client = per(&|t| secs(f(t).1.client) * 1e6);
    let server = per(&|t| secs(f(t).1.server) * 1e6);
    let inside = per(&|t| f(t).2.server_usec() as f64);
    format!("{client:.0} / {server:.0} ({inside:.0}) µs")
}

pub(crate) fn us(seconds: f64) -> String {
    if seconds.is_nan() {
        return "-".into();
    }
    let us = seconds * 1e6;
    if us >= 10_000.0 {
        format!("{:.1} ms", us / 1000.0)
    } else if us >= 1_000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{us:.0} µs")
    }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

pub(crate) fn x(r: f64) -> String {
    if r.is_nan() {
        "-".into()
    } else {
        format!("{r:.2}x")
    }
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "**missed**"
    }
}

pub fn render(cfg: &Config, runs: &Runs) -> String {
    let mut out = String::new();
    let o = &mut out;
    let mut targets: Vec<(String, String, bool)> = Vec::new();

    for flavor in [Flavor::MultiThread, Flavor::CurrentThread] {
        let a = &runs.a;
        if !a.iter().any(|r| r.1 .1 == flavor) {
            continue;
        }
        let on = flavor.title();
        let _ = writeln!(
            o,
            "### (a) Uncontended acquire + release, one task, {on} ({} calls per run)\n",
            cfg.a_ops
        );
        let _ = writeln!(o, "| contender | p50 | p99 | p50 vs floor | round trips per call (commands) | allocations per call | context switches per call | CPU per call: client / server (in commands) |");
        let _ = writeln!(o, "|---|---|---|---|---|---|---|---|");
        for who in [Who::Floor, Who::Library, Who::LibraryLocal, Who::Rslock] {
            let k = (who, flavor);
            let _ = writeln!(
                o,
                "| {who} | {} | {} | {} | {} | {:.0} | {:.1} | {} |",
                us(med(a, k, |r| secs(r.p50))),
                us(med(a, k, |r| secs(r.p99))),
                x(ratio(a, k, (Who::Floor, flavor), |r| secs(r.p50))),
                commands_of(a, k, |r| r.ops, |r| &r.commands),
                med(a, k, |r| r.allocs_per_op),
                med(a, k, |r| r.switches_per_op),
                cpu_of(a, k, |r| (r.ops, r.cpu, &r.commands)),
            );
        }
        let r = ratio(a, (Who::Library, flavor), (Who::Floor, flavor), |r| {
            secs(r.p50)
        });
        targets.push((
            format!("(a) p50 at most 1.15x the floor, {on}"),
            x(r),
            r <= 1.15,
        ));
        let r = ratio(a, (Who::LibraryLocal, flavor), (Who::Floor, flavor), |r| {
            secs(r.p50)
        });
        targets.push((
            format!("(a) p50 at most 1.15x the floor, with on_current_runtime, {on}"),
            x(r),
            r <= 1.15,
        ));
        if flavor == Flavor::MultiThread {
            let per_call: Vec<f64> = a
                .iter()
                .filter(|r| r.1 .0 == Who::Library)
                .map(|r| r.2.commands.round_trips() as f64 / r.2.ops.max(1) as f64)
                .collect();
            let exact = !per_call.is_empty() && per_call.iter().all(|&n| n == 2.0);
            targets.push((
                "(d) an uncontended annotated call: exactly 2 round trips (EVALSHA)".into(),
                format!("{:.2} per call", median(&per_call)),
                exact,
            ));
        }
        let _ = writeln!(o);
    }

    for flavor in [Flavor::MultiThread, Flavor::CurrentThread] {
        let b = &runs.b;
        if !b.iter().any(|r| r.1 .1 == flavor) {
            continue;
        }
        let on = flavor.title();
        let _ = writeln!(
            o,
            "### (b) {} tasks on {} keys, {on}, {:.1} s per run\n",
            cfg.b_tasks,
            cfg.b_tasks,
            secs(cfg.b_time)
        );
        let _ = writeln!(o, "| contender | pairs per second | vs floor | vs rslock | round trips per pair (commands) | Redis CPU per pair (commandstats) | vs rslock | redis-server CPU per pair (/proc) | client CPU per pair (/proc) |");
        let _ = writeln!(o, "|---|---|---|---|---|---|---|---|---|");
        let rslock = (Who::Rslock, flavor);
        for who in [Who::Floor, Who::Library, Who::LibraryLocal, Who::Rslock] {
            let k = (who, flavor);
            let _ = writeln!(
                o,
                "| {who} | {:.0} | {} | {} | {} | {:.2} µs | {} | {:.2} µs | {:.2} µs |",
                med(b, k, |r| r.ops_per_sec),
                x(ratio(b, k, (Who::Floor, flavor), |r| r.ops_per_sec)),
                x(ratio(b, k, rslock, |r| r.ops_per_sec)),
                commands_of(b, k, |r| r.ops, |r| &r.commands),
                med(b, k, Parallel::redis_us),
                x(ratio(b, k, rslock, Parallel::redis_us)),
                med(b, k, Parallel::server_process_us),
                med(b, k, |r| secs(r.cpu.client) * 1e6 / r.ops.max(1) as f64),
            );
        }
        let _ = writeln!(
            o,
            "\nRedis CPU per pair: INFO commandstats' `usec` of every command the clients sent in \
             the timed window (a script's time includes the commands it calls; the clients' \
             registry refresh left out), over the pairs. redis-server CPU: the process's user + \
             system time from /proc (10 ms ticks, its network work included), over the pairs."
        );
        let lib = (Who::Library, flavor);
        let f = ratio(b, lib, (Who::Floor, flavor), |r| r.ops_per_sec);
        let p = ratio(b, lib, rslock, |r| r.ops_per_sec);
        let cpu = ratio(b, lib, rslock, Parallel::redis_us);
        targets.push((
            format!("(b) at least 0.85x the floor's throughput, {on}"),
            x(f),
            f >= 0.85,
        ));
        targets.push((
            format!("(b) throughput vs rslock: at least 1.2x, {on}"),
            x(p),
            p >= 1.2,
        ));
        targets.push((
            format!("(b) Redis CPU per pair vs rslock: at most 1.0x (commandstats), {on}"),
            format!(
                "{} ({:.2} µs against {:.2} µs)",
                x(cpu),
                med(b, lib, Parallel::redis_us),
                med(b, rslock, Parallel::redis_us)
            ),
            cpu <= 1.0,
        ));
        let _ = writeln!(o);
    }

    if !runs.c.is_empty() {
        let c = &runs.c;
        for mode in [Mode::RetryAtOnce, Mode::StepBack] {
            let how = match mode {
                Mode::RetryAtOnce => "the releaser calls again at once",
                Mode::StepBack => "the releaser steps back until another task holds the lock",
            };
            let _ = writeln!(
                o,
                "### (c) {} tasks on one key, {}; {:.1} s per run\n",
                cfg.c_tasks,
                how,
                secs(cfg.c_time)
            );
            let _ = writeln!(o, "| contender | critical sections per second | hand-off p50 | hand-off p99 | failed acquires per section | wait p99 | longest wait (worst run) | holder changed | went ahead of waiters | stalls (lock free 1 s) | gave up (10 s) | round trips per section (commands) |");
            let _ = writeln!(o, "|---|---|---|---|---|---|---|---|---|---|---|---|");
            for who in [Who::Floor, Who::Library, Who::Rslock, Who::Polling] {
                let k = (who, mode);
                let _ = writeln!(
                    o,
                    "| {who} | {:.0} | {} | {} | {:.2} | {} | {} | {:.0}% | {:.0}% | {:.0} | {:.0} | {} |",
                    med(c, k, |r| r.cs_per_sec),
                    us(med(c, k, |r| secs(r.handoff_p50))),
                    us(med(c, k, |r| secs(r.handoff_p99))),
                    med(c, k, |r| r.failed_per_cs),
                    us(med(c, k, |r| secs(r.wait_p99))),
                    us(worst(c, k, |r| secs(r.wait_max))),
                    100.0 * med(c, k, |r| r.switches),
                    100.0 * med(c, k, |r| r.jumped),
                    worst(c, k, |r| r.stalls as f64),
                    worst(c, k, |r| r.timeouts as f64),
                    commands_of(c, k, |r| r.critical_sections, |r| &r.commands),
                );
            }
            let _ = writeln!(o);
        }
        let k = (Who::Library, Mode::StepBack);
        let h = med(c, k, |r| secs(r.handoff_p50));
        targets.push((
            "(c) step back: hand-off p50 under 1 ms".into(),
            us(h),
            h < 1e-3,
        ));
        let vs_rslock = ratio(c, k, (Who::Rslock, Mode::StepBack), |r| r.cs_per_sec);
        targets.push((
            "(c) step back: at least 10x rslock's critical sections per second".into(),
            x(vs_rslock),
            vs_rslock >= 10.0,
        ));
        let vs_poll = ratio(c, k, (Who::Polling, Mode::StepBack), |r| r.cs_per_sec);
        targets.push((
            "(c) step back: at least 10x 50 ms polling's critical sections per second".into(),
            x(vs_poll),
            vs_poll >= 10.0,
        ));
        let f = med(c, k, |r| r.failed_per_cs);
        targets.push((
            "(c) step back: at most 1.1 failed acquires per section".into(),
            format!("{f:.2}"),
            f <= 1.1,
        ));
        let w = worst(c, k, |r| secs(r.wait_max));
        targets.push((
            "(c) step back: no wait longer than 50 ms (worst run)".into(),
            us(w),
            w <= 0.050,
        ));
    }

    if !runs.d.is_empty() {
        let d = &runs.d;
        let _ = writeln!(
            o,
            "### (d) A nested locked call on a key the body holds ({} per run)\n",
            cfg.d_ops
        );
        let _ = writeln!(
            o,
            "| contender | time per nested call | round trips per nested call (commands) |"
        );
        let _ = writeln!(o, "|---|---|---|");
        for who in [Who::Floor, Who::Library] {
            let _ = writeln!(
                o,
                "| {who} | {} | {} |",
                us(med(d, who, |r| secs(r.per_call))),
                commands_of(d, who, |_| cfg.d_ops as u64, |r| &r.commands),
            );
        }
        let _ = writeln!(
            o,
            "| {} | not reentrant: a nested call waits for itself | - |",
            Who::Rslock
        );
        let t = worst(d, Who::Library, |r| r.round_trips_per_call);
        targets.push((
            "(d) a nested re-entry: 0 round trips".into(),
            format!("{t:.2}"),
            t == 0.0,
        ));
        let _ = writeln!(o);
    }

    if !runs.e.is_empty() {
        render_held(o, cfg, &runs.e, &mut targets);
    }

    if !targets.is_empty() {
        let _ = writeln!(o, "### Targets\n");
        let _ = writeln!(o, "| target | measured (median of runs) | |");
        let _ = writeln!(o, "|---|---|---|");
        for (what, measured, ok) in targets {
            let _ = writeln!(o, "| {what} | {measured} | {} |", verdict(ok));
        }
        let _ = writeln!(o);
    }
    out.push_str(&render_kinds(cfg, runs));
    out.push_str(&crate::embedded::render(&runs.k));
    out.push_str(&crate::churn::render(&runs.m, cfg));
    out
}

/// `f(who) / f(base)` for each run that measured both, in run order.
/// (e)'s table and targets.
fn render_held(
    o: &mut String,
    cfg: &Config,
    e: &[(usize, Who, Held)],
    targets: &mut Vec<(String, String, bool)>,
) {
    let n = e[0].2.locks;
    let lease = secs(e[0].2.lease);
    let _ = writeln!(
        o,
        "### (e) {n} locks held at once by {n} tasks, {lease:.0} s lease, renewal on; {:.1} s window\n",
        secs(cfg.e_hold)
    );
    let _ = writeln!(o, "| contender | time to take all | client memory per held lock | of which the call's future (in its task) | renewal calls per period | Redis time per renewal call: mean / median / max | calls over 1 ms | Redis time per held lock per period | expired (worst run) |");
    let _ = writeln!(o, "|---|---|---|---|---|---|---|---|---|");
    let logged = |v: Option<u64>| v.map_or(format!("< {SLOW_FROM_USEC}"), |u| u.to_string());
    for who in [Who::Library, Who::Rslock] {
        let Some((_, _, last)) = e.iter().rev().find(|(_, w, _)| *w == who) else {
            continue;
        };
        let _ = writeln!(
            o,
            "| {who} | {:.2} s | {:.0} B | {:.0} B | {} | {:.0} / {} / {} µs | {:.0} | {} | {:.0} |",
            med(e, who, |r| secs(r.acquire_time)),
            med(e, who, |r| r.bytes_per_lock),
            med(e, who, |r| r.future_bytes as f64),
            or_none(med(e, who, Held::calls_per_period), 1, ""),
            med(e, who, Held::call_usec),
            logged(last.median_call_usec()),
            logged(last.slowest_call_usec()),
            worst(e, who, |r| r.calls_over_1ms() as f64),
            or_none(med(e, who, Held::usec_per_lock), 2, " µs"),
            worst(e, who, |r| r.expired as f64),
        );
    }
    let _ = writeln!(
        o,
        "\nThe library renews every lock at a third of its lease; a period is one renewal of every lock \
         (renewals counted by Redis: the scripts' inner `PEXPIREAT` or `PEXPIRE`, rslock's `SET`). \
         rslock's `using` extends each lock with a call of its own, 500 ms before its validity ends. \
         Median and max per call from SLOWLOG (the last run; calls under {SLOW_FROM_USEC} µs are not logged)."
    );
    let per_call = med(e, Who::Library, |r| r.locks as f64 / r.calls_per_period());
    targets.push((
        format!("(e) renewal batched, not a call per lock: at least 128 locks per renewal call ({n} locks)"),
        format!("{per_call:.0} locks per call"),
        per_call >= 128f64.min(n as f64 / 2.0),
    ));
    let usec = med(e, Who::Library, Held::usec_per_lock);
    targets.push((
        "(e) Redis time per held lock per renewal period at most 1 µs".into(),
        format!("{usec:.2} µs"),
        usec <= 1.0,
    ));
    let over = worst(e, Who::Library, |r| r.calls_over_1ms() as f64);
    targets.push((
        "(e) no renewal call blocks Redis for more than 1 ms".into(),
        format!("{over:.0} calls over 1 ms"),
        over == 0.0,
    ));
    let m = med(e, Who::Library, |r| r.bytes_per_lock);
    targets.push((
        "(e) under 400 B of client memory per held lock".into(),
        format!("{m:.0} B"),
        m < 400.0,
    ));
    let exp = worst(e, Who::Library, |r| r.expired as f64);
    targets.push((
        "(e) every lock renewed, no lock expired".into(),
        format!("{exp:.0} expired"),
        exp == 0.0,
    ));
}

/// `v` with `decimals` and `unit`, or "none" when there is no figure (no
/// renewal in the window).
fn or_none(v: f64, decimals: usize, unit: &str) -> String {
    if v.is_finite() {
        format!("{v:.decimals$}{unit}")
    } else {
        "none".into()
    }
}

fn ratios<K: PartialEq + Copy, T>(
    rows: &[(usize, K, T)],
    who: K,
    base: K,
    f: impl Fn(&T) -> f64,
) -> Vec<f64> {
    rows.iter()
        .filter(|r| r.1 == who)
        .filter_map(|r| {
            let b = rows.iter().find(|b| b.0 == r.0 && b.1 == base)?;
            Some(f(&r.2) / f(&b.2))
        })
        .collect()
}

/// "1.21x (1.19x, 1.21x, 1.30x)": the median of per-run ratios, then each
/// run's.
fn ratio_runs(v: &[f64]) -> String {
    if v.is_empty() {
        return "-".into();
    }
    let each: Vec<String> = v.iter().map(|&r| x(r)).collect();
    format!("{} ({})", x(median(v)), each.join(", "))
}

/// The round trips per pair of each run, in run order.
fn round_trips_runs<K: PartialEq + Copy>(rows: &[(usize, K, Pairs)], who: K) -> Vec<f64> {
    rows.iter()
        .filter(|r| r.1 == who)
        .map(|r| r.2.round_trips())
        .collect()
}

/// The median run of `who` by `f`.
fn median_run<K: PartialEq + Copy, T>(
    rows: &[(usize, K, T)],
    who: K,
    f: impl Fn(&T) -> f64,
) -> Option<&T> {
    let mut v: Vec<&T> = rows.iter().filter(|r| r.1 == who).map(|r| &r.2).collect();
    v.sort_by(|a, b| f(a).total_cmp(&f(b)));
    v.get(v.len() / 2).copied()
}

/// The lock kinds' workloads: (g) to (j), and their targets.
fn render_kinds(cfg: &Config, runs: &Runs) -> String {
    let mut out = String::new();
    let o = &mut out;
    let mut targets: Vec<(String, String, bool)> = Vec::new();

    if !runs.g.is_empty() {
        let g = &runs.g;
        let _ = writeln!(
            o,
            "### (g) Uncontended pairs per lock kind and pattern: acquire + release, one task, keys of \
             their own, the global client's `run_locked` (`run_locked_all` for two keys), \
             multi-thread runtime ({} pairs per run)\n",
            cfg.g_pairs
        );
        let _ = writeln!(o, "| kind or pattern | p50 | p99 | round trips per pair (commands) | Redis CPU per pair (INFO cpu) | vs plain: median (each run) | Redis time in commands per pair (commandstats) | vs plain: median (each run) | client CPU per pair |");
        let _ = writeln!(o, "|---|---|---|---|---|---|---|---|---|");
        let plain = Pattern::PLAIN;
        for kind in Pattern::ALL {
            let _ = writeln!(
                o,
                "| {kind} | {} | {} | {} | {:.1} µs | {} | {:.1} µs | {} | {:.0} µs |",
                us(med(g, kind, |r| secs(r.p50))),
                us(med(g, kind, |r| secs(r.p99))),
                commands_of(g, kind, |r| r.pairs, |r| &r.commands),
                med(g, kind, |r| r.server_us()),
                ratio_runs(&ratios(g, kind, plain, |r| r.server_us())),
                med(g, kind, |r| r.in_commands_us()),
                ratio_runs(&ratios(g, kind, plain, |r| r.in_commands_us())),
                med(g, kind, |r| r.client_us()),
            );
        }
        let _ = writeln!(
            o,
            "\nRedis CPU is the server's `used_cpu_user + used_cpu_sys` over the window (its network \
             work included); time in commands is INFO commandstats' `usec` of the commands clients \
             sent (a script's time includes what it calls). The kinds take turns in blocks of 500 \
             pairs, so that the machine's other work weighs on all alike. Ratios are per run, both \
             sides from the same run.\n"
        );
        for kind in Pattern::ALL.into_iter().skip(1) {
            let trips = round_trips_runs(g, kind);
            let design = kind.design_round_trips();
            let exact =
                !trips.is_empty() && trips.iter().all(|&n| (n * 100.0).round() == design * 100.0);
            let why = match kind {
                Pattern::TwoKeys => " (one acquire for both keys, a release per key)",
                Pattern::FencedWrite => " (acquire, the write, release)",
                Pattern::Kind(_) => "",
            };
            targets.push((
                format!(
                    "(g) {kind}: {design:.0} round trips per uncontended pair{why} (every run)"
                ),
                format!("{:.2} per pair", median(&trips)),
                exact,
            ));
        }
        for kind in Pattern::ALL.into_iter().skip(1) {
            let r = median(&ratios(g, kind, plain, |r| r.server_us()));
            targets.push((
                format!("(g) {kind}: Redis CPU per pair at most 1.3x the plain lock's (INFO cpu)"),
                x(r),
                r <= 1.3,
            ));
            let r = median(&ratios(g, kind, plain, |r| r.in_commands_us()));
            targets.push((
                format!(
                    "(g) {kind}: Redis time in commands per pair at most 1.3x the plain lock's (commandstats)"
                ),
                format!(
                    "{} ({:.2} µs against {:.2} µs)",
                    x(r),
                    med(g, kind, |r| r.in_commands_us()),
                    med(g, plain, |r| r.in_commands_us())
                ),
                r <= 1.3,
            ));
        }
    }

    if !runs.h.is_empty() {
        let h = &runs.h;
        let _ = writeln!(
            o,
            "### (h) The same pairs as raw script calls (EVALSHA on one connection, one key each), \
             the plain lock's scripts before and after the kinds ({} pairs per run)\n",
            cfg.g_pairs
        );
        let _ = writeln!(o, "| scripts | p50 | round trips per pair (commands) | Redis CPU per pair (INFO cpu) | vs today's plain | Redis time in commands per pair (commandstats) | vs plain before the kinds: median (each run) | vs today's plain: median (each run) |");
        let _ = writeln!(o, "|---|---|---|---|---|---|---|---|");
        for raw in Raw::ALL {
            let _ = writeln!(
                o,
                "| {raw} | {} | {} | {:.1} µs | {} | {:.2} µs | {} | {} |",
                us(med(h, raw, |r| secs(r.p50))),
                commands_of(h, raw, |r| r.pairs, |r| &r.commands),
                med(h, raw, |r| r.server_us()),
                x(median(&ratios(h, raw, Raw::Plain, |r| r.server_us()))),
                med(h, raw, |r| r.in_commands_us()),
                ratio_runs(&ratios(h, raw, Raw::OldPlain, |r| r.in_commands_us())),
                ratio_runs(&ratios(h, raw, Raw::Plain, |r| r.in_commands_us())),
            );
        }
        let _ = writeln!(
            o,
            "\nThe scripts take turns in blocks of 500 pairs, as in (g). Where a pair's time in \
             commands goes (the median run; per pair; \"Lua\" is the scripts' time less the commands \
             they call: the Lua code, and the calls' passage between Lua and Redis):\n"
        );
        for raw in Raw::ALL {
            if let Some(r) = median_run(h, raw, |r| r.in_commands_us()) {
                let c = &r.commands;
                let per = r.pairs.max(1) as f64;
                let lua = c.script_usec().saturating_sub(c.inside_usec()) as f64 / per;
                let _ = writeln!(
                    o,
                    "- {raw}: scripts {:.2} µs = Lua {lua:.2} µs + calls: {}",
                    c.script_usec() as f64 / per,
                    c.inside_per_op(r.pairs)
                );
            }
        }
        let _ = writeln!(o);
    }

    if !runs.i.is_empty() {
        let i = &runs.i;
        let _ = writeln!(
            o,
            "### (i) {I_READERS} readers (the global client) and 1 writer (a client of its own) on one key: \
             1 ms bodies, the writer every 50 ms; {:.1} s per run\n",
            secs(cfg.i_time)
        );
        let _ = writeln!(o, "| locks | reader sections per second | vs all plain | writer sections | writer wait p50 | writer wait p99 | writer's longest wait (worst run) | reader wait p99 | reader's longest wait (worst run) | most readers inside at once | overlaps | gave up (10 s) | round trips per section (commands) |");
        let _ = writeln!(o, "|---|---|---|---|---|---|---|---|---|---|---|---|---|");
        for kind in [Kind::Read, Kind::Plain] {
            let name = match kind {
                Kind::Read => "readers read, the writer writes",
                _ => "all nine take the plain lock",
            };
            let _ = writeln!(
                o,
                "| {name} | {:.0} | {} | {:.0} | {} | {} | {} | {} | {} | {:.0} | {:.0} | {:.0} | {} |",
                med(i, kind, |r| r.reader_sections_per_sec),
                x(median(&ratios(i, kind, Kind::Plain, |r| r.reader_sections_per_sec))),
                med(i, kind, |r| r.writer_sections as f64),
                us(med(i, kind, |r| secs(r.writer_wait_p50))),
                us(med(i, kind, |r| secs(r.writer_wait_p99))),
                us(worst(i, kind, |r| secs(r.writer_wait_max))),
                us(med(i, kind, |r| secs(r.reader_wait_p99))),
                us(worst(i, kind, |r| secs(r.reader_wait_max))),
                med(i, kind, |r| r.most_readers as f64),
                worst(i, kind, |r| r.overlaps as f64),
                worst(i, kind, |r| r.timeouts as f64),
                commands_of(
                    i,
                    kind,
                    |r| r.reader_sections + r.writer_sections,
                    |r| &r.commands
                ),
            );
        }
        let _ = writeln!(o);
        let ov = worst(i, Kind::Read, |r| r.overlaps as f64);
        targets.push((
            "(i) no reader inside with the writer (worst run)".into(),
            format!("{ov:.0}"),
            ov == 0.0,
        ));
    }

    if !runs.j.is_empty() {
        let j = &runs.j;
        let _ = writeln!(
            o,
            "### (j) One key handed round 3 clients (3 `LockClient`s, a task on each, bodies that yield once, \
             each calls again at once); {:.1} s per run\n",
            secs(cfg.j_time)
        );
        let _ = writeln!(o, "| lock | critical sections per second | hand-off p50 (to another client) | hand-off p99 | holder changed | wait p50 | wait p99 | longest wait (worst run) | out of order: pairs (worst run) | calls served ahead of an earlier waiter (worst run) | overlaps | gave up (10 s) | round trips per section (commands) |");
        let _ = writeln!(o, "|---|---|---|---|---|---|---|---|---|---|---|---|---|");
        for kind in [Kind::Fair, Kind::Plain] {
            let _ = writeln!(
                o,
                "| {kind} | {:.0} | {} | {} | {:.0}% | {} | {} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {} |",
                med(j, kind, |r| r.sections_per_sec),
                us(med(j, kind, |r| secs(r.handoff_p50))),
                us(med(j, kind, |r| secs(r.handoff_p99))),
                100.0 * med(j, kind, |r| r.changed),
                us(med(j, kind, |r| secs(r.wait_p50))),
                us(med(j, kind, |r| secs(r.wait_p99))),
                us(worst(j, kind, |r| secs(r.wait_max))),
                worst(j, kind, |r| r.inversions as f64),
                worst(j, kind, |r| r.served_early as f64),
                worst(j, kind, |r| r.overlaps as f64),
                worst(j, kind, |r| r.timeouts as f64),
                commands_of(j, kind, |r| r.sections, |r| &r.commands),
            );
        }
        let _ = writeln!(
            o,
            "\nA hand-off runs from a holder's body's end to the next holder's body's start, one \
             monotonic clock in this process. Out of order: a call that began to wait more than {} \
             before another, yet entered after it.\n",
            us(secs(ORDER_MARGIN))
        );
        let p = med(j, Kind::Fair, |r| secs(r.handoff_p50));
        let runs_p: Vec<String> = j
            .iter()
            .filter(|r| r.1 == Kind::Fair)
            .map(|r| us(secs(r.2.handoff_p50)))
            .collect();
        targets.push((
            "(j) fair: hand-off p50 under 1 ms (each run)".into(),
            format!("{} ({})", us(p), runs_p.join(", ")),
            p < 1e-3,
        ));
        let inv = worst(j, Kind::Fair, |r| r.inversions as f64);
        targets.push((
            "(j) fair: no call served ahead of one that began to wait 5 ms earlier (worst run)"
                .into(),
            format!("{inv:.0}"),
            inv == 0.0,
        ));
    }

    if !targets.is_empty() {
        let _ = writeln!(o, "### Targets of the lock kinds\n");
        let _ = writeln!(o, "| target | measured (median of runs) | |");
        let _ = writeln!(o, "|---|---|---|");
        for (what, measured, ok) in targets {
            let _ = writeln!(o, "| {what} | {measured} | {} |", verdict(ok));
        }
    }
    out
}
