//! One run in one mode: servers, proxies, worker processes, the fault
//! schedule; then the history is collected and checked.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::checker;
use crate::election_run;
use crate::failover;
use crate::faults::{self, Node};
use crate::history::{Fault, History};
use crate::index::{Limits, Violation};
use crate::proxy::Proxy;
use crate::topology::{self, Replicated, Topology};
use lock_testkit::{ServerOptions, TempDir};

/// Where the locks are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// One node, through proxies.
    Single,
    /// Redlock on 5 nodes, through proxies.
    Redlock,
    /// Redis Cluster, 3 masters with a replica each; `sync_replicas(1, ..)`.
    Cluster,
    /// 1 master, 1 replica, 3 sentinels; `sync_replicas(1, ..)`.
    Sentinel,
}

impl Mode {
    /// Its name (`--mode`, the worker's `--deploy`, the history file).
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Single => "single",
            Mode::Redlock => "redlock",
            Mode::Cluster => "cluster",
            Mode::Sentinel => "sentinel",
        }
    }

    /// The mode named `name`.
    pub fn named(name: &str) -> Option<Mode> {
        [Mode::Single, Mode::Redlock, Mode::Cluster, Mode::Sentinel]
            .into_iter()
            .find(|m| m.as_str() == name)
    }

    /// Whether it is a replicated deployment (Cluster or Sentinel).
    pub fn replicated(self) -> bool {
        matches!(self, Mode::Cluster | Mode::Sentinel)
    }

    /// The fault kinds it uses by default.
    pub fn kinds(self) -> &'static [faults::Kind] {
        if self.replicated() {
            &faults::REPLICATED_KINDS
        } else {
            &faults::KINDS
        }
    }

    /// The checker's limits for its histories.
    pub fn limits(self) -> Limits {
        match self {
            Mode::Cluster | Mode::Sentinel => {
                Limits::replicated(crate::worker::SYNC_TIMEOUT_MS * 1_000_000)
            }
            // A stalled node stalls no quorum: rule 16 is off.
            Mode::Redlock => Limits {
                stall_slack: None,
                ..Limits::default()
            },
            Mode::Single => Limits::default(),
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The seed.
    pub seed: u64,
    /// Where the locks are.
    pub mode: Mode,
    /// How long workers make calls (ms).
    pub run_ms: u64,
    /// Worker processes.
    pub workers: u32,
    /// Tasks per worker.
    pub tasks: u32,
    /// The fault kinds to inject.
    pub kinds: Vec<faults::Kind>,
    /// Whether sibling calls always take two different keys.
    pub distinct_siblings: bool,
    /// Whether the workers run the kinds workload (read-write, permit and
    /// fair keys) instead of the plain one.
    pub lock_kinds: bool,
    /// The share of top-level operations that are multi-key calls (%).
    pub multi: u64,
    /// Whether the workers campaign for leadership on the election keys
    /// instead ([`crate::election_worker`]), with faults of the worker
    /// processes beside the deployment's ([`crate::election_run`]).
    pub election: bool,
}

/// What a run found.
#[derive(Debug)]
pub struct RunResult {
    /// The history.
    pub history: History,
    /// The broken rules.
    pub violations: Vec<Violation>,
    /// What the workers wrote on stderr (trimmed).
    pub worker_errors: Vec<String>,
    /// Cluster and Sentinel: what each fault did (promotion, restart, whole
    /// again), with its start time (ns).
    pub notes: Vec<(u64, String)>,
}

async fn start_nodes(dir: &TempDir, n: usize, workers: u32) -> std::io::Result<Vec<Arc<Node>>> {
    let mut nodes = Vec::new();
    for i in 0..n {
        let path = dir.path().join(format!("node{i}"));
        let server = tokio::task::spawn_blocking(move || ServerOptions::tcp().dir(path).start())
            .await
            .map_err(std::io::Error::other)??;
        let mut proxies = Vec::new();
        for _ in 0..workers {
            proxies.push(Proxy::start(server.port()).await?);
        }
        nodes.push(Arc::new(Node {
            name: format!("node{i}"),
            server: Arc::new(Mutex::new(server)),
            proxies,
        }));
    }
    Ok(nodes)
}

/// The workers' key prefix in `mode`.
fn prefix(mode: Mode) -> String {
    match mode {
        Mode::Cluster => topology::cluster_prefix(),
        mode => format!("lock:{}:", mode.as_str()),
    }
}

fn spawn_worker(
    cfg: &RunConfig,
    proc: u32,
    urls: &str,
    dir: &TempDir,
) -> std::io::Result<tokio::process::Child> {
    spawn_worker_as(cfg, proc, urls, dir, (cfg.run_ms, 0))
}

/// Starts worker `proc` to make calls for `run_ms`, in its `life`th start
/// (after `life` kills): a worker started again appends to its history
/// and stderr, after a newline that ends a line its killed self may have
/// left half written.
fn spawn_worker_as(
    cfg: &RunConfig,
    proc: u32,
    urls: &str,
    dir: &TempDir,
    (run_ms, life): (u64, u32),
) -> std::io::Result<tokio::process::Child> {
    let exe = std::env::current_exe()?;
    let out = dir.path().join(format!("worker{proc}.history"));
    let err = std::fs::OpenOptions::new()
        .create(true)
        .append(life > 0)
        .write(true)
        .truncate(life == 0)
        .open(dir.path().join(format!("worker{proc}.stderr")))?;
    if life > 0 {
        use std::io::Write;
        let mut history = std::fs::OpenOptions::new().append(true).open(&out)?;
        history.write_all(b"\n")?;
    }
    let prefix = prefix(cfg.mode);
    tokio::process::Command::new(exe)
        .arg("worker")
        .args(["--proc", &proc.to_string(), "--seed", &cfg.seed.to_string()])
        .args(["--tasks", &cfg.tasks.to_string(), "--urls", urls])
        .args(["--deploy", cfg.mode.as_str()])
        .args(["--prefix", &prefix, "--run-ms", &run_ms.to_string()])
        .args([
            "--distinct-siblings",
            if cfg.distinct_siblings { "1" } else { "0" },
        ])
        .args(["--lock-kinds", if cfg.lock_kinds { "1" } else { "0" }])
        .args(["--multi", &cfg.multi.to_string()])
        .args(["--election", if cfg.election { "1" } else { "0" }])
        .args(["--life", &life.to_string()])
        .arg("--out")
        .arg(out)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err)
        .kill_on_drop(true)
        .spawn()
}

fn schedule_faults(
    cfg: &RunConfig,
    nodes: &[Arc<Node>],
) -> (Arc<Mutex<Vec<Fault>>>, Vec<tokio::task::JoinHandle<()>>) {
    let redlock = cfg.mode == Mode::Redlock;
    let max_busy = if redlock { 2 } else { 1 };
    let shape = faults::Shape {
        nodes: nodes.len(),
        workers: cfg.workers as usize,
        run_ms: cfg.run_ms,
        max_busy,
        kinds: cfg.kinds.clone(),
    };
    let plan = faults::plan(cfg.seed ^ u64::from(redlock), &shape);
    let windows = Arc::new(Mutex::new(Vec::new()));
    let start = tokio::time::Instant::now();
    let handles = plan
        .into_iter()
        .map(|p| {
            let node = nodes[p.node].clone();
            let windows = windows.clone();
            tokio::spawn(async move {
                tokio::time::sleep_until(start + Duration::from_millis(p.at_ms)).await;
                let window = faults::apply(&p, &node).await;
                windows.lock().expect("faults").push(window);
            })
        })
        .collect();
    (windows, handles)
}

/// Waits for the workers; in the election mode, runs the workers' own
/// faults first (a killed worker is started again on `links[proc]`).
/// The workers' fault windows.
async fn workers_done(
    cfg: &RunConfig,
    mut children: Vec<tokio::process::Child>,
    links: &[String],
    dir: &TempDir,
) -> Vec<Fault> {
    if !cfg.election {
        wait_workers(cfg, &mut children).await;
        return Vec::new();
    }
    let plan = election_run::plan(cfg.seed, cfg.run_ms, cfg.workers);
    let spawn = |proc: u32, run_ms: u64, life: u32| {
        spawn_worker_as(cfg, proc, &links[proc as usize], dir, (run_ms, life))
    };
    election_run::drive(cfg.run_ms, &plan, children, spawn).await
}

/// A list on a replicated deployment: from the master the sentinels name,
/// or the cluster node that serves it (the others answer `MOVED`).
fn read_list(rep: &Replicated, list: &str) -> Option<Vec<u64>> {
    let named = rep.named_master().and_then(|port| rep.node_on(port));
    let order = named.into_iter().chain(0..rep.data.len());
    order
        .filter(|&i| rep.topology == Topology::Cluster || Some(i) == named)
        .find_map(|i| election_run::lrange(&rep.data[i].lock().expect("server"), list).ok())
}

/// Waits for the workers (bounded: killed by pid past the run + 30 s).
async fn wait_workers(cfg: &RunConfig, children: &mut [tokio::process::Child]) {
    let limit = Duration::from_millis(cfg.run_ms + 30_000);
    for child in children {
        if tokio::time::timeout(limit, child.wait()).await.is_err() {
            // By pid: our own child.
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
    }
}

/// The workers' merged history and their stderr tails.
fn collect(cfg: &RunConfig, dir: &TempDir) -> (History, Vec<String>) {
    let mut history = History::default();
    let mut worker_errors = Vec::new();
    for proc in 0..cfg.workers {
        let text = std::fs::read_to_string(dir.path().join(format!("worker{proc}.history")))
            .unwrap_or_default();
        history.parse_into(&text);
        let err = std::fs::read_to_string(dir.path().join(format!("worker{proc}.stderr")))
            .unwrap_or_default();
        if !err.trim().is_empty() {
            let tail: Vec<&str> = err.lines().rev().take(5).collect();
            worker_errors.push(format!("worker {proc}: {}", tail.join(" | ")));
        }
    }
    (history, worker_errors)
}

/// Runs one mode and checks its history.
pub async fn run(cfg: &RunConfig) -> std::io::Result<RunResult> {
    if cfg.mode.replicated() {
        return run_replicated(cfg).await;
    }
    let redlock = cfg.mode == Mode::Redlock;
    let dir = TempDir::try_new(&format!("chaos-{}", cfg.mode.as_str()))?;
    let nodes = start_nodes(&dir, if redlock { 5 } else { 1 }, cfg.workers).await?;
    let mut children = Vec::new();
    // Each worker has its own link (proxy) to each node.
    let links: Vec<String> = (0..cfg.workers as usize)
        .map(|proc| {
            let urls: Vec<String> = nodes.iter().map(|n| n.proxies[proc].url()).collect();
            urls.join(",")
        })
        .collect();
    for proc in 0..cfg.workers {
        children.push(spawn_worker(cfg, proc, &links[proc as usize], &dir)?);
    }
    let (windows, handles) = schedule_faults(cfg, &nodes);
    let worker_faults = workers_done(cfg, children, &links, &dir).await;
    for handle in handles {
        let abort = handle.abort_handle();
        if tokio::time::timeout(Duration::from_secs(10), handle)
            .await
            .is_err()
        {
            abort.abort();
        }
    }
    let (mut history, worker_errors) = collect(cfg, &dir);
    history.faults = windows.lock().expect("faults").clone();
    history.faults.extend(worker_faults);
    history.faults.sort_by_key(|f| f.start);
    if cfg.election {
        let server = nodes[0].server.clone();
        history.election.lists = tokio::task::block_in_place(|| {
            election_run::lists(&prefix(cfg.mode), |list| {
                election_run::lrange(&server.lock().expect("server"), list).ok()
            })
        });
    }
    let violations = checker::check(&history, &cfg.mode.limits());
    drop(nodes);
    Ok(RunResult {
        history,
        violations,
        worker_errors,
        notes: Vec::new(),
    })
}

/// Cluster or Sentinel: the servers, the workers (straight to the servers,
/// no proxies), the faults one at a time; then the history.
async fn run_replicated(cfg: &RunConfig) -> std::io::Result<RunResult> {
    let dir = TempDir::try_new(&format!("chaos-{}", cfg.mode.as_str()))?;
    let path = dir.path().to_owned();
    let topology = if cfg.mode == Mode::Cluster {
        Topology::Cluster
    } else {
        Topology::Sentinel
    };
    let rep = tokio::task::spawn_blocking(move || match topology {
        Topology::Cluster => Replicated::cluster(&path),
        Topology::Sentinel => Replicated::sentinel(&path),
    })
    .await
    .map_err(std::io::Error::other)??;
    let rep = Arc::new(rep);
    let urls = rep.worker_urls().join(",");
    let mut children = Vec::new();
    for proc in 0..cfg.workers {
        children.push(spawn_worker(cfg, proc, &urls, &dir)?);
    }
    let steps = failover::plan(cfg.seed, cfg.run_ms, &cfg.kinds);
    let started = std::time::Instant::now();
    let faults = tokio::spawn(failover::run(rep.clone(), steps, started, cfg.run_ms));
    let links = vec![urls; cfg.workers as usize];
    let worker_faults = workers_done(cfg, children, &links, &dir).await;
    // The last fault ends within its settle limits (about a minute).
    let applied = faults.await.unwrap_or_default();
    let (mut history, worker_errors) = collect(cfg, &dir);
    history.faults = applied.iter().map(|a| a.fault.clone()).collect();
    history.faults.extend(worker_faults);
    history.faults.sort_by_key(|f| f.start);
    if cfg.election {
        let (prefix, rep) = (prefix(cfg.mode), rep.clone());
        history.election.lists = tokio::task::spawn_blocking(move || {
            election_run::lists(&prefix, |l| read_list(&rep, l))
        })
        .await
        .unwrap_or_default();
    }
    let notes = applied
        .into_iter()
        .map(|a| {
            (
                a.fault.start,
                format!("{} on {}: {}", a.fault.kind, a.fault.target, a.note),
            )
        })
        .collect();
    let violations = checker::check(&history, &cfg.mode.limits());
    drop(rep);
    Ok(RunResult {
        history,
        violations,
        worker_errors,
        notes,
    })
}
