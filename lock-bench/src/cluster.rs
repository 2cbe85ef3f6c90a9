//! (f) The library on a Redis Cluster of 3 masters (no replicas) that the
//! bench starts on loopback ports and stops by pid: uncontended acquire +
//! release pairs, one task, on a multi-thread runtime; the round trips are
//! INFO commandstats summed over the masters.

use std::time::{Duration, Instant};

use lock_runtime::{LockClient, LockError, LockOptions};
use lock_testkit::cluster::RedisCluster;

use crate::stats::{quantile, Commands};
use crate::workloads::Config;

/// What (f) measured.
pub struct ClusterPairs {
    pub ops: u64,
    pub p50: Duration,
    pub p99: Duration,
    pub commands: Commands,
}

/// Runs (f) on a cluster of its own.
pub fn run(cfg: &Config) -> Result<ClusterPairs, String> {
    let cluster = RedisCluster::try_start(0).map_err(|e| e.to_string())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(measure(&cluster, cfg))
}

async fn measure(cluster: &RedisCluster, cfg: &Config) -> Result<ClusterPairs, String> {
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
