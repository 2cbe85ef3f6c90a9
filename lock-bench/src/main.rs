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
//! ```
//!
//! The workloads: (a) uncontended calls, (b) 64 tasks on 64 keys, (c) 8
//! tasks on one key, (d) nested calls, (e) 100 000 locks held with renewal,
//! (f) a Redis Cluster (see `workloads.rs`, `cluster.rs`); the lock kinds
//! (see `kinds.rs`): (g) uncontended pairs of each kind (plain, read,
//! permits 8, fair), (h) the same pairs as raw script calls, with the plain
//! lock's scripts from before the kinds, (i) 8 readers and a writer on one
//! key, (j) a fair lock handed round 3 clients; (k) the embedded backend's
//! uncontended pair and 64 tasks on 64 keys (see `embedded.rs`).
//!
//! `LOCK_BENCH_DEBUG=1` also prints, to stderr, the waits over 50 ms in
//! (c) and the server's time per command in (b).
//!
//! Every figure is the median over repeated runs; each ratio is the median
//! of the per-run ratios, both sides measured in the same run.

mod alloc;
mod cluster;
mod contenders;
mod cpu;
mod embedded;
mod kinds;
mod report;
mod stats;
mod workloads;

use std::process::ExitCode;

use contenders::{Lockers, Who};
use kinds::{Kind, Raw};
use lock_runtime::LockClient;
use lock_testkit::ServerOptions;
use report::{Flavor, Runs};
use workloads::{Bench, Config, Mode};

#[global_allocator]
static ALLOCATOR: alloc::Counting = alloc::Counting;

struct Args {
    smoke: bool,
    current_thread_only: bool,
    runs: Option<usize>,
    only: String,
}

fn args() -> Result<Args, String> {
    let mut args = Args {
        smoke: false,
        current_thread_only: false,
        runs: None,
        only: "abcdefghijk".into(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--smoke" => args.smoke = true,
            "--current-thread-only" => args.current_thread_only = true,
            "--runs" => {
                let n = it.next().ok_or("--runs needs a number")?;
                args.runs = Some(n.parse().map_err(|_| format!("--runs {n}: not a number"))?);
            }
            "--only" => args.only = it.next().ok_or("--only needs workloads, e.g. a,c")?,
            "-h" | "--help" => return Err(
                "usage: lock-bench [--smoke] [--runs N] [--only a,b,c,d,e,f,g,h,i,j,k] [--current-thread-only]"
                    .into(),
            ),
            other => return Err(format!("unknown argument `{other}` (try --help)")),
        }
    }
    Ok(args)
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
    match run(&cfg, &args.only, args.current_thread_only) {
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
/// (b) also on a current-thread one. Returns what went wrong in the locks
/// themselves (overlaps, expiries), if anything.
fn run(cfg: &Config, only: &str, current_thread_only: bool) -> Result<Vec<String>, String> {
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
            .block_on(LockClient::connect(&url))
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
    let flavors: &[Flavor] = if current_thread_only {
        &[Flavor::CurrentThread]
    } else {
        &[Flavor::MultiThread, Flavor::CurrentThread]
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
                    let list = rotate(&Kind::ALL, run);
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
    Ok(runs.problems())
}

fn rotate<T: Clone>(list: &[T], by: usize) -> Vec<T> {
    let mut v = list.to_vec();
    let n = v.len();
    v.rotate_left(by % n);
    v
}
