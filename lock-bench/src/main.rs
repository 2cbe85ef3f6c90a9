//! The benchmark of lock-runtime: this library side by side with the raw
//! floor (its own Lua scripts called directly) and rslock, and its lock
//! kinds side by side with its plain lock, in one run, against a
//! redis-server that the bench starts on loopback and stops by pid.
//!
//! ```text
//! cargo run --release -p lock-bench              # the full run, a few minutes
//! cargo run --release -p lock-bench -- --smoke   # tiny counts, seconds (CI)
//! cargo run --release -p lock-bench -- --runs 3 --only a,b
//! cargo run --release -p lock-bench -- --runs 3 --only g,h,i,j   # the kinds
//! cargo run --release -p lock-bench -- --runs 3 --only a,b --families --svg target/lock-bench.svg
//! ```
//!
//! The workloads: (a) uncontended calls, (b) 64 tasks on 64 keys, (c) 8
//! tasks on one key, (d) nested calls, (e) 100 000 locks held with renewal,
//! (f) a Redis Cluster (see `workloads.rs`, `cluster.rs`); the lock kinds
//! (see `kinds.rs`): (g) uncontended pairs of each kind (plain, read,
//! permits 8, fair) and of two patterns (two keys in one call, a fenced
//! write in the body), (h) the same kinds' pairs as raw script calls, with
//! the plain lock's scripts from before the kinds, (i) 8 readers and a
//! writer on one key, (j) a fair lock handed round 3 clients; (k) the
//! embedded backend's uncontended pair and 64 tasks on 64 keys (see
//! `embedded.rs`); (m) 1,000 distinct keys a second taken and released for
//! 60 s, then Redis's memory and how long the freed locks' keys live (see
//! `churn.rs`); (n) a burst of hand-offs on N distinct keys, on one node
//! and on a Redis Cluster (see `burst.rs`); (o) 1, 8, 32 and 128 clients
//! contending for one key (see `fleet.rs`).
//!
//! Options:
//! - `--only a,b,...` picks workloads (all by default); `--runs N` repeats
//!   them; `--smoke` makes every count tiny.
//! - `--multi-thread-only`, `--current-thread-only`: (a) and (b) on that
//!   runtime only (both by default; the other workloads run on the
//!   multi-thread one).
//! - `--families`: (a) and (b) also on Redis 7.0, Redis 6.2 and Valkey 9.1,
//!   each in a child run of the bench on a server of that binary, in one
//!   table (see `families.rs` for where the binaries are found; a family
//!   whose binary is missing is skipped, and the table says so). A smoke run
//!   of (a) and (b) runs them too, on the multi-thread runtime.
//! - `--svg PATH`: writes the side-by-side results of (a) and (b) as an
//!   SVG chart to PATH (per family with `--families`; see `chart.rs`). By
//!   default no chart is written; a smoke run draws it and checks it.
//! - `--summary PATH` (what `--families` gives its child runs): writes (a)'s
//!   and (b)'s figures to PATH, one line each.
//!
//! `LOCK_BENCH_CALLS_ALONE=1` builds the library's clients with
//! `coalesce(false)`, to compare coalescing with calls sent alone.
//!
//! `LOCK_BENCH_DEBUG=1` also prints, to stderr, the waits over 50 ms in
//! (c), the server's time per command in (b), and the families' child runs'
//! reports.
//!
//! Every figure is the median over repeated runs; each ratio is the median
//! of the per-run ratios, both sides measured in the same run.

mod alloc;
mod burst;
mod chart;
mod churn;
mod cluster;
mod contenders;
mod cpu;
mod embedded;
mod families;
mod fleet;
mod kinds;
mod report;
mod stats;
mod workloads;

use std::path::PathBuf;
use std::process::ExitCode;

use contenders::{Lockers, Who};
use families::Measured;
use kinds::{Kind, Pattern, Raw};
use lock_runtime::LockClient;
use lock_testkit::ServerOptions;
use report::{Flavor, Runs};
use workloads::{Bench, Config, Mode};

#[global_allocator]
static ALLOCATOR: alloc::Counting = alloc::Counting;

struct Args {
    smoke: bool,
    current_thread_only: bool,
    multi_thread_only: bool,
    runs: Option<usize>,
    only: String,
    families: bool,
    svg: Option<PathBuf>,
    summary: Option<PathBuf>,
}

const USAGE: &str = "usage: lock-bench [--smoke] [--runs N] [--only a,b,c,d,e,f,g,h,i,j,k,m,n,o] \
                     [--current-thread-only | --multi-thread-only] [--families] [--svg PATH]";

fn args() -> Result<Args, String> {
    let mut args = Args {
        smoke: false,
        current_thread_only: false,
        multi_thread_only: false,
        runs: None,
        only: "abcdefghijkmno".into(),
        families: false,
        svg: None,
        summary: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--smoke" => args.smoke = true,
            "--current-thread-only" => args.current_thread_only = true,
            "--multi-thread-only" => args.multi_thread_only = true,
            "--runs" => {
                let n = it.next().ok_or("--runs needs a number")?;
                args.runs = Some(n.parse().map_err(|_| format!("--runs {n}: not a number"))?);
            }
            "--only" => args.only = it.next().ok_or("--only needs workloads, e.g. a,c")?,
            "--families" => args.families = true,
            "--svg" => args.svg = Some(it.next().ok_or("--svg needs a file path")?.into()),
            "--summary" => {
                args.summary = Some(it.next().ok_or("--summary needs a file path")?.into())
            }
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument `{other}` (try --help)")),
        }
    }
    if args.current_thread_only && args.multi_thread_only {
        return Err("--current-thread-only and --multi-thread-only: choose one".into());
    }
    Ok(args)
}

impl Args {
    /// The runtimes that (a) and (b) run on.
    fn flavors(&self) -> &'static [Flavor] {
        match (self.current_thread_only, self.multi_thread_only) {
            (true, _) => &[Flavor::CurrentThread],
            (_, true) => &[Flavor::MultiThread],
            _ => &[Flavor::MultiThread, Flavor::CurrentThread],
        }
    }
}

fn main() -> ExitCode {
    let args = match args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let mut cfg = if args.smoke {
        Config::smoke()
    } else {
        Config::full()
    };
    if let Some(runs) = args.runs {
        cfg.runs = runs.max(1);
        cfg.e_runs = cfg.e_runs.min(cfg.runs);
    }
    let problems = run(&cfg, &args.only, args.flavors()).and_then(|runs| after(&args, &cfg, &runs));
    match problems {
        Ok(problems) if problems.is_empty() => ExitCode::SUCCESS,
        Ok(problems) => {
            for p in problems {
                eprintln!("lock-bench: {p}");
            }
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("lock-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// After the main run: its figures for a parent bench (`--summary`), the
/// families (`--families`), the chart (`--svg`; a smoke run draws it and
/// checks it without writing it). Returns what went wrong in the locks
/// themselves, and families whose run failed.
fn after(args: &Args, cfg: &Config, runs: &Runs) -> Result<Vec<String>, String> {
    let mut problems = runs.problems();
    let main = Measured::from_runs(runs);
    if let Some(path) = &args.summary {
        std::fs::write(path, main.to_lines())
            .map_err(|e| format!("--summary {}: {e}", path.display()))?;
    }
    let server = lock_testkit::server_bin();
    let server_bin = families::on_path(&server.to_string_lossy());
    let mut measured = vec![(
        server_bin.as_deref().map_or_else(
            || server.to_string_lossy().into_owned(),
            |bin| families::version(bin, "redis-server"),
        ),
        main.clone(),
    )];
    let ran_ab = args.only.contains('a') && args.only.contains('b');
    // A smoke run of (a) and (b) also runs the families (but not a child
    // run of them).
    if args.families || (args.smoke && ran_ab && args.summary.is_none()) {
        let reuse = server_bin
            .as_deref()
            .filter(|_| ran_ab)
            .map(|bin| (bin, &main));
        let results = families::run_all(&family_child(args), reuse);
        println!("{}", families::render(&results));
        measured.clear();
        for family in results {
            match family.measured {
                Ok(m) => measured.push((family.name, m)),
                Err(why) if why.starts_with("skipped") => {}
                Err(why) => problems.push(format!("--families: {}: {why}", family.name)),
            }
        }
    }
    draw(args, cfg, &measured)?;
    Ok(problems)
}

/// How the families' child runs run: as this one, but in a smoke run on
/// the multi-thread runtime only, to stay short.
fn family_child(args: &Args) -> families::Child<'static> {
    let flavor_args: &'static [&'static str] = match (args.smoke, args.flavors()) {
        (_, [Flavor::CurrentThread]) => &["--current-thread-only"],
        (true, _) | (_, [Flavor::MultiThread]) => &["--multi-thread-only"],
        _ => &[],
    };
    families::Child {
        smoke: args.smoke,
        runs: args.runs,
        flavor_args,
    }
}

/// The chart of `measured` (a family's name and figures each): written to
/// `--svg`'s path; in a smoke run without it, drawn and checked only.
fn draw(args: &Args, cfg: &Config, measured: &[(String, Measured)]) -> Result<(), String> {
    let multi = |m: &Measured| {
        m.a.iter().any(|r| r.1 .1 == Flavor::MultiThread)
            || m.b.iter().any(|r| r.1 .1 == Flavor::MultiThread)
    };
    let flavor = if measured.iter().any(|(_, m)| multi(m)) {
        Flavor::MultiThread
    } else {
        Flavor::CurrentThread
    };
    let groups: Vec<chart::Group> = measured
        .iter()
        .map(|(name, m)| chart::Group {
            label: name.clone(),
            bars: chart::DRAWN
                .iter()
                .map(|&who| {
                    let k = (who, flavor);
                    let p50 = report::med(&m.a, k, |p| *p);
                    (who, p50, report::med(&m.b, k, |p| p.0))
                })
                .collect(),
        })
        .collect();
    let command: Vec<String> = std::env::args().skip(1).collect();
    let note = format!(
        "medians of {} run(s), {}; {}; lock-bench {}",
        cfg.runs,
        flavor.title(),
        cpu::machine(),
        command.join(" ")
    );
    let svg = chart::render(&groups, &note);
    match &args.svg {
        Some(path) => {
            std::fs::write(path, &svg).map_err(|e| format!("--svg {}: {e}", path.display()))?;
            eprintln!("the chart is in {}", path.display());
        }
        None if args.smoke => chart::check(&svg).map_err(|e| format!("the chart: {e}"))?,
        None => {}
    }
    Ok(())
}

/// One tokio runtime and the connections made on it (a multiplexed
/// connection's driver task lives on the runtime that made it).
struct Side {
    runtime: tokio::runtime::Runtime,
    bench: Bench,
}

impl Side {
    fn new(
        flavor: Flavor,
        url: &str,
        client: &LockClient,
        others: &[LockClient],
        server_pid: u32,
    ) -> Result<Side, String> {
        let runtime = match flavor {
            Flavor::MultiThread => tokio::runtime::Builder::new_multi_thread(),
            Flavor::CurrentThread => tokio::runtime::Builder::new_current_thread(),
        }
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
        let bench = runtime.block_on(async {
            // The on_current_runtime client is built here, so that its
            // connections and background work run on this side's runtime.
            let lockers = Lockers::connect(url).await?;
            let admin = redis::Client::open(url)
                .map_err(|e| e.to_string())?
                .get_multiplexed_async_connection()
                .await
                .map_err(|e| e.to_string())?;
            Ok::<_, String>(Bench {
                lockers,
                client: client.clone(),
                admin,
                server_pid,
                others: others.to_vec(),
            })
        })?;
        Ok(Side { runtime, bench })
    }
}

/// Runs the chosen workloads `cfg.runs` times (each run measures every
/// contender, in a rotating order) and prints the report. Every workload
/// runs on a multi-thread runtime (what `#[tokio::main]` builds); (a) and
/// (b) also on a current-thread one (`flavors` picks). Returns the
/// measurements.
fn run(cfg: &Config, only: &str, flavors: &[Flavor]) -> Result<Runs, String> {
    let server = ServerOptions::tcp()
        .args(["--maxclients", "1000"])
        .start()
        .map_err(|e| e.to_string())?;
    let url = server.url();
    let pid = server.pid().ok_or("redis-server is not running")?;
    eprintln!("redis-server pid {pid} at {url}; {} run(s)", cfg.runs);
    let sides = {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let client = runtime
            .block_on(
                LockClient::builder()
                    .coalesce(contenders::coalescing())
                    .connect(&url),
            )
            .map_err(|e| e.to_string())?;
        lock_runtime::init(client.clone()).map_err(|e| e.to_string())?;
        // Each with a thread of its own, like the global client.
        let others = (0..3)
            .map(|_| runtime.block_on(LockClient::connect(&url)))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())?;
        drop(runtime);
        let multi = Side::new(Flavor::MultiThread, &url, &client, &others, pid)?;
        let current = Side::new(Flavor::CurrentThread, &url, &client, &others, pid)?;
        [multi, current]
    };

    let ab = [Who::Floor, Who::Library, Who::LibraryLocal, Who::Rslock];
    let four = [Who::Floor, Who::Library, Who::Rslock, Who::Polling];
    let mut runs = Runs::default();
    for run in 0..cfg.runs {
        eprintln!("run {}/{}", run + 1, cfg.runs);
        for &flavor in flavors {
            let side = &sides[flavor as usize];
            let bench = &side.bench;
            side.runtime.block_on(async {
                if only.contains('a') {
                    for who in rotate(&ab, run) {
                        let r = workloads::uncontended(bench, who, cfg).await?;
                        runs.a.push((run, (who, flavor), r));
                    }
                }
                if only.contains('b') {
                    for who in rotate(&ab, run) {
                        let r = workloads::parallel(bench, who, cfg).await?;
                        runs.b.push((run, (who, flavor), r));
                    }
                }
                if flavor != Flavor::MultiThread {
                    return Ok::<_, String>(());
                }
                if only.contains('c') {
                    for mode in [Mode::RetryAtOnce, Mode::StepBack] {
                        for who in rotate(&four, run) {
                            let r = workloads::contended(bench, who, mode, cfg).await?;
                            runs.c.push((run, (who, mode), r));
                        }
                    }
                }
                if only.contains('d') {
                    for who in rotate(&[Who::Floor, Who::Library], run) {
                        let r = workloads::nested(bench, who, cfg).await?;
                        runs.d.push((run, who, r));
                    }
                }
                if only.contains('e') && run < cfg.e_runs {
                    for who in rotate(&[Who::Library, Who::Rslock], run) {
                        let r = workloads::held(bench, who, cfg).await?;
                        runs.e.push((run, who, r));
                    }
                }
                if only.contains('g') {
                    let list = rotate(&Pattern::ALL, run);
                    let r = kinds::library_pairs(bench, &list, cfg).await?;
                    runs.g
                        .extend(list.into_iter().zip(r).map(|(k, r)| (run, k, r)));
                }
                if only.contains('h') {
                    let list = rotate(&Raw::ALL, run);
                    let r = kinds::raw_pairs(bench, &list, cfg).await?;
                    runs.h
                        .extend(list.into_iter().zip(r).map(|(k, r)| (run, k, r)));
                }
                if only.contains('i') {
                    for kind in rotate(&[Kind::Read, Kind::Plain], run) {
                        let r = kinds::readers_writer(bench, kind, cfg).await?;
                        runs.i.push((run, kind, r));
                    }
                }
                if only.contains('k') {
                    runs.k.push(embedded::run(cfg).await?);
                }
                if only.contains('j') {
                    for kind in rotate(&[Kind::Fair, Kind::Plain], run) {
                        let r = kinds::handoff(bench, kind, cfg).await?;
                        runs.j.push((run, kind, r));
                    }
                }
                if only.contains('m') && run == 0 {
                    runs.m.push(churn::run(bench, cfg).await?);
                }
                Ok(())
            })?;
        }
    }
    println!("{}", report::render(cfg, &runs));
    drop(sides);
    drop(server);
    if only.contains('f') {
        eprintln!("(f) on a Redis Cluster of 3 masters");
        println!("{}", cluster::render(&cluster::run(cfg)?));
    }
    if only.contains('n') {
        println!("{}", burst::render(&burst::run(cfg.n_keys)?));
    }
    if only.contains('o') {
        let rows = fleet::run(cfg.o_clients, cfg.o_time)?;
        println!("{}", fleet::render(&rows, cfg.o_time));
    }
    Ok(runs)
}

fn rotate<T: Clone>(list: &[T], by: usize) -> Vec<T> {
    let mut v = list.to_vec();
    let n = v.len();
    v.rotate_left(by % n);
    v
}
