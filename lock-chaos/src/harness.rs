//! One run in one mode: servers, proxies, worker processes, the fault
//! schedule; then the history is collected and checked.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::checker::{self, Limits, Violation};
use crate::faults::{self, Node};
use crate::history::{Fault, History};
use crate::proxy::Proxy;
use crate::servers::{Server, TempDir};

/// What to run.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The seed.
    pub seed: u64,
    /// Redlock (5 nodes) or one node.
    pub redlock: bool,
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
}

async fn start_nodes(dir: &TempDir, n: usize, workers: u32) -> std::io::Result<Vec<Arc<Node>>> {
    let mut nodes = Vec::new();
    for i in 0..n {
        let path = dir.path().join(format!("node{i}"));
        let server = tokio::task::spawn_blocking(move || Server::start(path))
            .await
            .map_err(std::io::Error::other)??;
        let mut proxies = Vec::new();
        for _ in 0..workers {
            proxies.push(Proxy::start(server.port).await?);
        }
        nodes.push(Arc::new(Node {
            name: format!("node{i}"),
            server: Arc::new(Mutex::new(server)),
            proxies,
        }));
    }
    Ok(nodes)
}

fn spawn_worker(
    cfg: &RunConfig,
    proc: u32,
    urls: &str,
    dir: &TempDir,
) -> std::io::Result<tokio::process::Child> {
    let exe = std::env::current_exe()?;
    let out = dir.path().join(format!("worker{proc}.history"));
    let err = std::fs::File::create(dir.path().join(format!("worker{proc}.stderr")))?;
    let prefix = if cfg.redlock {
        "lock:redlock:"
    } else {
        "lock:single:"
    };
    tokio::process::Command::new(exe)
        .arg("worker")
        .args(["--proc", &proc.to_string(), "--seed", &cfg.seed.to_string()])
        .args(["--tasks", &cfg.tasks.to_string(), "--urls", urls])
        .args(["--prefix", prefix, "--run-ms", &cfg.run_ms.to_string()])
        .args([
            "--distinct-siblings",
            if cfg.distinct_siblings { "1" } else { "0" },
        ])
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
    let max_busy = if cfg.redlock { 2 } else { 1 };
    let shape = faults::Shape {
        nodes: nodes.len(),
        workers: cfg.workers as usize,
        run_ms: cfg.run_ms,
        max_busy,
        kinds: cfg.kinds.clone(),
    };
    let plan = faults::plan(cfg.seed ^ u64::from(cfg.redlock), &shape);
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

/// Runs one mode and checks its history.
pub async fn run(cfg: &RunConfig) -> std::io::Result<RunResult> {
    let dir = TempDir::new(if cfg.redlock { "redlock" } else { "single" })?;
    let nodes = start_nodes(&dir, if cfg.redlock { 5 } else { 1 }, cfg.workers).await?;
    let mut children = Vec::new();
    for proc in 0..cfg.workers {
        // Each worker has its own link (proxy) to each node.
        let urls: Vec<String> = nodes
            .iter()
            .map(|n| n.proxies[proc as usize].url())
            .collect();
        children.push(spawn_worker(cfg, proc, &urls.join(","), &dir)?);
    }
    let (windows, handles) = schedule_faults(cfg, &nodes);
    let limit = Duration::from_millis(cfg.run_ms + 30_000);
    for child in &mut children {
        if tokio::time::timeout(limit, child.wait()).await.is_err() {
            // By pid: our own child.
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
    }
    for handle in handles {
        let abort = handle.abort_handle();
        if tokio::time::timeout(Duration::from_secs(10), handle)
            .await
            .is_err()
        {
            abort.abort();
        }
    }
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
    history.faults = windows.lock().expect("faults").clone();
    history.faults.sort_by_key(|f| f.start);
    let violations = checker::check(&history, &Limits::default());
    drop(nodes);
    Ok(RunResult {
        history,
        violations,
        worker_errors,
    })
}
