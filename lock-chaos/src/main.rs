//! `lock-chaos`: the CLI of the fault-and-history checker, and (with
//! `worker` first) the worker process it spawns.

use std::time::Instant;

use lock_chaos::checker;
use lock_chaos::election_report;
use lock_chaos::faults::{self, Kind, KINDS, REPLICATED_KINDS};
use lock_chaos::harness::{self, Mode, RunConfig};
use lock_chaos::history::History;
use lock_chaos::index::Limits;
use lock_chaos::multi;
use lock_chaos::process::WorkerArgs;
use lock_chaos::report;
use lock_chaos::timeline;
use lock_chaos::worker;

const USAGE: &str = "usage: lock-chaos [--minutes N | --seconds N] [--seed S] \
[--mode single|redlock|both|cluster|sentinel|all] [--workers N] [--tasks N] [--show N] [--history DIR]
       [--faults KIND,KIND,...|none] [--distinct-siblings] [--kinds] [--multi PCT] [--election]
       [--timeline FILE.svg]
       lock-chaos check FILE [--show N] [--timeline FILE.svg]";

/// The harness's options.
struct Cli {
    seconds: u64,
    seed: u64,
    mode: String,
    workers: u32,
    tasks: u32,
    show: usize,
    history: Option<String>,
    /// `--faults`, when given (each mode keeps the kinds it has).
    kinds: Option<Vec<Kind>>,
    distinct_siblings: bool,
    /// `--kinds`: the kinds workload in every mode run.
    lock_kinds: bool,
    /// `--multi`: the share of operations that are multi-key calls (%).
    multi: u64,
    /// `--election`: the workers campaign for leadership instead.
    election: bool,
    /// `--timeline`: where to draw each mode's history as an SVG.
    timeline: Option<String>,
}

fn value(args: &[String], i: usize) -> Result<&str, String> {
    args.get(i + 1)
        .map(String::as_str)
        .ok_or_else(|| format!("{} needs a value\n{USAGE}", args[i]))
}

fn num<T: std::str::FromStr>(args: &[String], i: usize) -> Result<T, String> {
    let v = value(args, i)?;
    v.parse()
        .map_err(|_| format!("{}: not a number: {v}\n{USAGE}", args[i]))
}

fn parse_cli(args: &[String]) -> Result<Cli, String> {
    let mut cli = Cli {
        seconds: 60,
        seed: 1,
        mode: "both".into(),
        workers: 3,
        tasks: 4,
        show: 3,
        history: None,
        kinds: None,
        distinct_siblings: false,
        lock_kinds: false,
        multi: multi::DEFAULT_PERCENT,
        election: false,
        timeline: None,
    };
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--minutes" => cli.seconds = num::<u64>(args, i)? * 60,
            "--seconds" => cli.seconds = num(args, i)?,
            "--seed" => cli.seed = num(args, i)?,
            "--mode" => cli.mode = value(args, i)?.to_owned(),
            "--workers" => cli.workers = num(args, i)?,
            "--tasks" => cli.tasks = num(args, i)?,
            "--show" => cli.show = num(args, i)?,
            "--history" => cli.history = Some(value(args, i)?.to_owned()),
            "--timeline" => cli.timeline = Some(value(args, i)?.to_owned()),
            "--faults" => cli.kinds = Some(parse_kinds(value(args, i)?)?),
            "--multi" => cli.multi = num::<u64>(args, i)?.min(100),
            "--distinct-siblings" => {
                cli.distinct_siblings = true;
                i += 1;
                continue;
            }
            "--kinds" => {
                cli.lock_kinds = true;
                i += 1;
                continue;
            }
            "--election" => {
                cli.election = true;
                i += 1;
                continue;
            }
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
        i += 2;
    }
    let modes = ["single", "redlock", "both", "cluster", "sentinel", "all"];
    if !modes.contains(&cli.mode.as_str()) {
        return Err(format!(
            "--mode: single, redlock, both, cluster, sentinel or all\n{USAGE}"
        ));
    }
    if cli.election && cli.mode == "redlock" {
        return Err(format!(
            "--election: its ticks are fenced writes, which Redlock refuses (not a quorum \
             operation); use --mode single, cluster, sentinel, both or all\n{USAGE}"
        ));
    }
    Ok(cli)
}

/// `pause,restart,...` (or `none`).
fn parse_kinds(list: &str) -> Result<Vec<Kind>, String> {
    if list == "none" {
        return Ok(Vec::new());
    }
    let names: Vec<&str> = KINDS
        .iter()
        .chain(&REPLICATED_KINDS)
        .map(|k| k.as_str())
        .collect();
    list.split(',')
        .map(|name| {
            faults::kind_named(name).ok_or_else(|| {
                format!("--faults: unknown kind {name} (kinds: {})", names.join(","))
            })
        })
        .collect()
}

fn parse_worker(args: &[String]) -> Result<WorkerArgs, String> {
    let mut w = WorkerArgs {
        proc: 0,
        seed: 0,
        tasks: 1,
        urls: Vec::new(),
        deploy: "single".into(),
        prefix: "lock:".into(),
        out: String::new(),
        run_ms: 1000,
        distinct_siblings: false,
        lock_kinds: false,
        multi: 0,
        election: false,
        life: 0,
    };
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--proc" => w.proc = num(args, i)?,
            "--seed" => w.seed = num(args, i)?,
            "--tasks" => w.tasks = num(args, i)?,
            "--urls" => w.urls = value(args, i)?.split(',').map(str::to_owned).collect(),
            "--deploy" => w.deploy = value(args, i)?.to_owned(),
            "--prefix" => w.prefix = value(args, i)?.to_owned(),
            "--out" => w.out = value(args, i)?.to_owned(),
            "--run-ms" => w.run_ms = num(args, i)?,
            "--distinct-siblings" => w.distinct_siblings = value(args, i)? == "1",
            "--lock-kinds" => w.lock_kinds = value(args, i)? == "1",
            "--multi" => w.multi = num::<u64>(args, i)?.min(100),
            "--election" => w.election = value(args, i)? == "1",
            "--life" => w.life = num(args, i)?,
            other => return Err(format!("worker: unknown argument {other}")),
        }
        i += 2;
    }
    Ok(w)
}

/// Draws `h` and its `violations` to the SVG file `path`, and says so.
fn write_timeline(
    path: &str,
    h: &History,
    violations: &[lock_chaos::index::Violation],
    label: &str,
) {
    let picture = timeline::render(h, violations, label);
    match std::fs::write(path, &picture.svg) {
        Ok(()) => println!(
            "timeline written to {path}: {} bars for {} holds ({} not drawn), {} KB",
            picture.bars,
            picture.holds,
            picture.left_out,
            picture.svg.len().div_ceil(1024)
        ),
        Err(e) => println!("cannot write {path}: {e}"),
    }
}

/// The timeline's file for `mode`: `path` itself when the run has one
/// mode, else `path` with `-<mode>` before its extension.
fn timeline_path(path: &str, mode: &str, several: bool) -> String {
    if !several {
        return path.to_owned();
    }
    let p = std::path::Path::new(path);
    let stem = p
        .file_stem()
        .map_or(String::new(), |s| s.to_string_lossy().into_owned());
    let name = match p.extension() {
        Some(ext) => format!("{stem}-{mode}.{}", ext.to_string_lossy()),
        None => format!("{stem}-{mode}"),
    };
    p.with_file_name(name).to_string_lossy().into_owned()
}

/// Runs one mode, prints its findings (and draws its timeline to
/// `timeline`, if given); the number of violations.
async fn run_mode(
    cli: &Cli,
    mode: Mode,
    seconds: u64,
    timeline: Option<String>,
) -> Result<usize, String> {
    let kinds = match &cli.kinds {
        Some(kinds) => kinds
            .iter()
            .copied()
            .filter(|k| mode.kinds().contains(k))
            .collect(),
        None => mode.kinds().to_vec(),
    };
    let cfg = RunConfig {
        seed: cli.seed,
        mode,
        run_ms: seconds * 1000,
        workers: cli.workers,
        tasks: cli.tasks,
        kinds,
        distinct_siblings: cli.distinct_siblings,
        lock_kinds: cli.lock_kinds,
        multi: cli.multi,
        election: cli.election,
    };
    let name = mode.as_str();
    if cli.election {
        println!(
            "== mode {name}: seed {} for {seconds} s, {} workers x {} tasks, election on {} keys",
            cli.seed,
            cli.workers,
            cli.tasks,
            lock_chaos::election::KEYS
        );
    } else {
        let workload = if cli.lock_kinds { ", lock kinds" } else { "" };
        println!(
            "== mode {name}: seed {} for {seconds} s, {} workers x {} tasks{workload}, {} % multi-key calls",
            cli.seed, cli.workers, cli.tasks, cli.multi
        );
    }
    let started = Instant::now();
    let result = harness::run(&cfg)
        .await
        .map_err(|e| format!("harness: {e}"))?;
    let h = &result.history;
    let label = format!("seed={} mode={name}", cli.seed);
    print!(
        "{}",
        report::findings(h, &result.violations, &label, cli.show)
    );
    if let Some(dir) = &cli.history {
        let kinds = match (cli.election, cli.lock_kinds) {
            (true, _) => "-election",
            (false, true) => "-kinds",
            (false, false) => "",
        };
        let path =
            std::path::Path::new(dir).join(format!("{name}{kinds}-seed{}.history", cli.seed));
        match std::fs::write(&path, h.to_text()) {
            Ok(()) => println!("history written to {}", path.display()),
            Err(e) => println!("cannot write {}: {e}", path.display()),
        }
    }
    if let Some(path) = timeline {
        write_timeline(&path, h, &result.violations, &label);
    }
    for e in &result.worker_errors {
        println!("worker stderr: {e}");
    }
    if !result.notes.is_empty() {
        println!("-- faults {name} (s from run start)");
        for (at, note) in &result.notes {
            let at = at.saturating_sub(h.origin()) as f64 / 1e9;
            println!("  {at:7.1} {note}");
        }
    }
    if !cli.election {
        print!("{}", report::windows(h));
    }
    println!("-- summary {name} (seed {})", cli.seed);
    print!(
        "{}",
        report::summary(h, started.elapsed().as_secs_f64(), &result.violations)
    );
    print!("{}", election_report::summary(h, &mode.limits()));
    Ok(result.violations.len())
}

async fn harness_main(cli: Cli) -> Result<usize, String> {
    // The election mode's ticks are fenced writes, which Redlock refuses:
    // `both` and `all` leave it out.
    let modes: &[Mode] = match cli.mode.as_str() {
        "both" if cli.election => &[Mode::Single],
        "all" if cli.election => &[Mode::Single, Mode::Cluster, Mode::Sentinel],
        "both" => &[Mode::Single, Mode::Redlock],
        "all" => &[Mode::Single, Mode::Redlock, Mode::Cluster, Mode::Sentinel],
        name => &[Mode::named(name).expect("checked by parse_cli")][..],
    };
    // The time is shared equally among the modes; the last takes the rest.
    let share = (cli.seconds / modes.len() as u64).max(1);
    let mut found = 0;
    for (i, &mode) in modes.iter().enumerate() {
        let seconds = if i + 1 == modes.len() {
            cli.seconds.saturating_sub(share * i as u64).max(1)
        } else {
            share
        };
        let timeline = cli.timeline.as_deref();
        let timeline = timeline.map(|p| timeline_path(p, mode.as_str(), modes.len() > 1));
        found += run_mode(&cli, mode, seconds, timeline).await?;
    }
    Ok(found)
}

/// `check FILE [--show N] [--timeline FILE.svg]`: checks a saved history
/// again (and draws it).
fn check_file(args: &[String]) -> i32 {
    let Some(file) = args.first() else {
        eprintln!("{USAGE}");
        return 2;
    };
    let (mut show, mut timeline) = (3, None);
    let mut i = 1;
    while i < args.len() {
        let parsed = match args[i].as_str() {
            "--show" => num(args, i).map(|n| show = n),
            "--timeline" => value(args, i).map(|v| timeline = Some(v.to_owned())),
            other => Err(format!("check: unknown argument {other}\n{USAGE}")),
        };
        if let Err(e) = parsed {
            eprintln!("{e}");
            return 2;
        }
        i += 2;
    }
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(e) => {
            eprintln!("{file}: {e}");
            return 2;
        }
    };
    let mut history = History::default();
    history.parse_into(&text);
    // Cluster and Sentinel histories (named so by `--history`, or with
    // their faults) are checked with their limits.
    let replicated = ["cluster", "sentinel"].iter().any(|m| file.contains(m))
        || history
            .faults
            .iter()
            .any(|f| ["kill-master", "failover", "replica-restart"].contains(&f.kind.as_str()));
    let limits = if replicated {
        Mode::Cluster.limits()
    } else {
        Limits::default()
    };
    let violations = checker::check(&history, &limits);
    print!("{}", report::findings(&history, &violations, file, show));
    if let Some(path) = timeline {
        write_timeline(&path, &history, &violations, file);
    }
    let span = history
        .faults
        .iter()
        .map(|f| f.end)
        .chain(history.calls.iter().map(|c| c.end));
    let seconds = span.max().unwrap_or(0).saturating_sub(history.origin()) as f64 / 1e9;
    print!("{}", report::summary(&history, seconds, &violations));
    print!("{}", election_report::summary(&history, &limits));
    i32::from(!violations.is_empty())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("check") {
        std::process::exit(check_file(&args[1..]));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    if args.first().map(String::as_str) == Some("worker") {
        let code = match parse_worker(&args[1..]) {
            Ok(w) => match runtime.block_on(worker::run(w)) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("worker: {e}");
                    2
                }
            },
            Err(e) => {
                eprintln!("{e}");
                2
            }
        };
        // Do not wait for the clients' background threads.
        std::process::exit(code);
    }
    let cli = match parse_cli(&args) {
        Ok(cli) => cli,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let seed = cli.seed;
    // On Ctrl-C the run is dropped: servers and workers are stopped by pid.
    let run = async {
        tokio::select! {
            result = harness_main(cli) => result,
            _ = tokio::signal::ctrl_c() => Err("interrupted".to_owned()),
        }
    };
    match runtime.block_on(run) {
        Ok(0) => println!("OK: no violations (seed {seed})"),
        Ok(n) => {
            println!("FAILED: {n} violations (seed {seed})");
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    }
}
