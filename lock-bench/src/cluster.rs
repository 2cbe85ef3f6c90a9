//! (f) The library on a Redis Cluster of 3 masters (no replicas) that the
//! bench starts on loopback ports and stops by pid: uncontended acquire +
//! release pairs, one task, on a multi-thread runtime; the round trips are
//! INFO commandstats summed over the masters.

use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lock_runtime::{LockClient, LockError, LockOptions};
use redis::aio::MultiplexedConnection;

use crate::server::{cli_bin, server_bin};
use crate::stats::{quantile, Commands};
use crate::workloads::Config;

/// The cluster's processes and their directory.
struct Cluster {
    children: Vec<Child>,
    dir: PathBuf,
    ports: Vec<u16>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // By pid: the children we started, nothing else.
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A free loopback port below the kernel's range for outgoing connections,
/// whose cluster bus port (+10000) is free too.
fn free_port(from: u16) -> Option<u16> {
    let free = |p: u16| TcpListener::bind((Ipv4Addr::LOCALHOST, p)).is_ok();
    (from..from + 2000).find(|&p| free(p) && free(p + 10000))
}

impl Cluster {
    fn start() -> Result<Cluster, String> {
        let dir = std::env::temp_dir().join(format!("lock-bench-cluster-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut cluster = Cluster {
            children: Vec::new(),
            dir,
            ports: Vec::new(),
        };
        let mut next = 14000 + (std::process::id() % 200) as u16 * 10;
        for _ in 0..3 {
            let port = free_port(next).ok_or("no free port for the cluster")?;
            next = port + 1;
            let node_dir = cluster.dir.join(port.to_string());
            std::fs::create_dir_all(&node_dir).map_err(|e| e.to_string())?;
            let child = Command::new(server_bin())
                .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
                .args([
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                ])
                .args(["--cluster-node-timeout", "2000"])
                .args(["--save", "", "--appendonly", "no"])
                .arg("--dir")
                .arg(&node_dir)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("cannot start {}: {e}", server_bin().to_string_lossy()))?;
            cluster.children.push(child);
            cluster.ports.push(port);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        for &port in &cluster.ports {
            while TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_err() {
                if Instant::now() > deadline {
                    return Err("the cluster's nodes did not start within 10 s".into());
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let mut create = Command::new(cli_bin());
        create.args(["--cluster", "create"]);
        for port in &cluster.ports {
            create.arg(format!("127.0.0.1:{port}"));
        }
        let status = create
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map_err(|e| format!("cannot run {}: {e}", cli_bin().to_string_lossy()))?;
        if !status.success() {
            return Err("redis-cli --cluster create failed".into());
        }
        Ok(cluster)
    }

    fn urls(&self) -> Vec<String> {
        self.ports
            .iter()
            .map(|p| format!("redis://127.0.0.1:{p}/"))
            .collect()
    }

    /// Waits (at most 20 s) until every node says `cluster_state:ok`.
    async fn wait_ok(&self, admins: &mut [MultiplexedConnection]) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(20);
        for admin in admins {
            loop {
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query_async(admin)
                    .await
                    .map_err(|e| e.to_string())?;
                if info.contains("cluster_state:ok") {
                    break;
                }
                if Instant::now() > deadline {
                    return Err("the cluster was not ok within 20 s".into());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Ok(())
    }
}

/// What (f) measured.
pub struct ClusterPairs {
    pub ops: u64,
    pub p50: Duration,
    pub p99: Duration,
    pub commands: Commands,
}

/// Runs (f) on a cluster of its own.
pub fn run(cfg: &Config) -> Result<ClusterPairs, String> {
    let cluster = Cluster::start()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(measure(&cluster, cfg))
}

async fn measure(cluster: &Cluster, cfg: &Config) -> Result<ClusterPairs, String> {
    let urls = cluster.urls();
    let mut admins = Vec::new();
    for url in &urls {
        let admin = redis::Client::open(url.as_str())
            .map_err(|e| e.to_string())?
            .get_multiplexed_async_connection()
            .await
            .map_err(|e| e.to_string())?;
        admins.push(admin);
    }
    cluster.wait_ok(&mut admins).await?;
    let seeds: Vec<&str> = urls.iter().map(String::as_str).collect();
    let client = LockClient::cluster(&seeds)
        .await
        .map_err(|e| format!("{e}: {:?}", std::error::Error::source(&e)))?;
    let options = LockOptions::new().wait(Duration::from_secs(5));
    let pair = || client.run_locked("f", options, async { Ok::<_, LockError>(()) });
    for _ in 0..cfg.a_ops.min(200) {
        pair().await.map_err(|e| e.to_string())?;
    }
    for admin in &mut admins {
        Commands::reset(admin).await.map_err(|e| e.to_string())?;
    }
    let mut samples = Vec::with_capacity(cfg.a_ops);
    let deadline = Instant::now() + Duration::from_secs(30);
    for _ in 0..cfg.a_ops {
        if Instant::now() > deadline {
            break;
        }
        let start = Instant::now();
        pair().await.map_err(|e| e.to_string())?;
        samples.push(start.elapsed());
    }
    let mut commands = Commands::default();
    for admin in &mut admins {
        let node = Commands::read(admin).await.map_err(|e| e.to_string())?;
        for (name, n) in node.0 {
            *commands.0.entry(name).or_default() += n;
        }
        for (name, n) in node.1 {
            *commands.1.entry(name).or_default() += n;
        }
    }
    Ok(ClusterPairs {
        ops: samples.len() as u64,
        p50: quantile(&mut samples, 0.50),
        p99: quantile(&mut samples, 0.99),
        commands,
    })
}

/// The Markdown section of (f).
pub fn render(f: &ClusterPairs) -> String {
    format!(
        "### (f) Redis Cluster, 3 masters: uncontended acquire + release, one task, multi-thread runtime ({} calls)\n\n\
         | contender | p50 | p99 | round trips per call (commands) |\n|---|---|---|---|\n\
         | library on Cluster | {:.0} µs | {:.0} µs | {:.2} ({}) |\n",
        f.ops,
        f.p50.as_secs_f64() * 1e6,
        f.p99.as_secs_f64() * 1e6,
        f.commands.round_trips() as f64 / f.ops.max(1) as f64,
        f.commands.per_op(f.ops),
    )
}
