//! (k) The embedded backend (`LockClient::in_memory`): an uncontended pair
//! and 64 tasks on 64 keys, on a multi-thread runtime, with no Redis.

use std::time::Duration;

use lock_runtime::{LockClient, LockError, LockOptions};
use tokio::time::Instant;

use crate::stats::{median, quantile};
use crate::workloads::{Config, Res};

/// One run of (k).
#[derive(Clone, Debug)]
pub struct Embedded {
    /// An uncontended pair (acquire and release), p50 and p99.
    pub pair_p50: Duration,
    pub pair_p99: Duration,
    /// Pairs per second of 64 tasks on 64 keys.
    pub parallel_per_sec: f64,
}

/// Runs (k) once on a client of its own.
pub async fn run(cfg: &Config) -> Res<Embedded> {
    // (k) reads no allocation counts; counted, its 64 tasks on two threads
    // would measure the counters' contention (see `alloc.rs`).
    crate::alloc::counting(false);
    let result = measure(cfg).await;
    crate::alloc::counting(true);
    result
}

async fn measure(cfg: &Config) -> Res<Embedded> {
    let client = LockClient::in_memory();
    let owned = client.clone();
    let pair = move |key: String| {
        let client = owned.clone();
        async move {
            client
                .run_locked(&key, LockOptions::new(), async { Ok::<(), LockError>(()) })
                .await
        }
    };
    for _ in 0..cfg.a_ops.min(200) {
        pair("k:a".into()).await.map_err(|e| e.to_string())?;
    }
    let mut samples = Vec::with_capacity(cfg.a_ops);
    for _ in 0..cfg.a_ops {
        let start = Instant::now();
        pair("k:a".into()).await.map_err(|e| e.to_string())?;
        samples.push(start.elapsed());
    }
    let tasks: Vec<_> = (0..cfg.b_tasks)
        .map(|i| {
            let pair = pair.clone();
            let duration = cfg.b_time;
            tokio::spawn(async move {
                let key = format!("k:b:{i}");
                let deadline = Instant::now() + duration;
                let mut ops = 0u64;
                while ops < 100_000_000 && Instant::now() < deadline {
                    pair(key.clone()).await?;
                    ops += 1;
                }
                Ok::<u64, LockError>(ops)
            })
        })
        .collect();
    let start = Instant::now();
    let mut ops = 0;
    for task in tasks {
        ops += task
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
    }
    let elapsed = start.elapsed();
    client.shutdown(Duration::from_secs(5)).await;
    Ok(Embedded {
        pair_p50: quantile(&mut samples, 0.50),
        pair_p99: quantile(&mut samples, 0.99),
        parallel_per_sec: ops as f64 / elapsed.as_secs_f64(),
    })
}

/// The table of (k): medians over the runs.
pub fn render(runs: &[Embedded]) -> String {
    if runs.is_empty() {
        return String::new();
    }
    let us = |f: fn(&Embedded) -> Duration| {
        median(
            &runs
                .iter()
                .map(|r| f(r).as_secs_f64() * 1e6)
                .collect::<Vec<_>>(),
        )
    };
    let per_sec = median(&runs.iter().map(|r| r.parallel_per_sec).collect::<Vec<_>>());
    format!(
        "\n(k) the embedded backend (in_memory), multi-thread runtime, {} run(s)\n\
         | uncontended pair p50 | p99 | 64 tasks on 64 keys |\n\
         |---|---|---|\n\
         | {:.1} µs | {:.1} µs | {:.0} pairs/s |\n",
        runs.len(),
        us(|r| r.pair_p50),
        us(|r| r.pair_p99),
        per_sec
    )
}
