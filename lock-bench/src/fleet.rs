//! (o) A fleet on one key: C clients (1, 8, 32, 128), each with its own
//! connections, as C processes would have; max(32, C) tasks spread over
//! them, each taking one key in a loop with a 1 ms critical section. What
//! a hand-off costs the server as the fleet grows: script calls per
//! critical section (INFO commandstats), critical sections per second,
//! and how long a task waited for the lock.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lock_runtime::{LockClient, LockError, LockOptions};
use lock_testkit::ServerOptions;
use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

use crate::stats::quantile;
use crate::workloads::{redis_err, Res};

/// What one fleet measured.
#[derive(Clone, Debug)]
pub struct Fleet {
    pub clients: usize,
    pub tasks: usize,
    pub per_second: f64,
    /// Script calls (EVALSHA) per critical section.
    pub calls_per_section: f64,
    /// From a call's start to its body's start.
    pub wait_p50: Duration,
    pub wait_p99: Duration,
}

/// Runs (o) for each count of clients, each for `time`.
pub fn run(counts: &[usize], time: Duration) -> Res<Vec<Fleet>> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let server = ServerOptions::tcp()
        .args(["--maxclients", "1000"])
        .start()
        .map_err(|e| e.to_string())?;
    let url = server.url();
    let mut rows = Vec::new();
    for &clients in counts {
        eprintln!("(o) {clients} clients on one key");
        let row = runtime.block_on(fleet(&url, clients, time))?;
        eprintln!("{row:?}");
        rows.push(row);
    }
    Ok(rows)
}

async fn fleet(url: &str, clients: usize, time: Duration) -> Res<Fleet> {
    let mut fleet = Vec::with_capacity(clients);
    for _ in 0..clients {
        fleet.push(LockClient::connect(url).await.map_err(|e| e.to_string())?);
    }
    let mut admin: MultiplexedConnection = redis::Client::open(url)
        .map_err(redis_err)?
        .get_multiplexed_async_connection()
        .await
        .map_err(redis_err)?;
    let key = format!("fleet:{clients}");
    let tasks = clients.max(32);
    let stop = Arc::new(AtomicBool::new(false));
    let () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut admin)
        .await
        .map_err(redis_err)?;
    let start = Instant::now();
    let mut handles = Vec::with_capacity(tasks);
    for t in 0..tasks {
        let (client, key, stop) = (fleet[t % clients].clone(), key.clone(), stop.clone());
        handles.push(tokio::spawn(async move {
            let mut waits = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let asked = Instant::now();
                let options = LockOptions::new().wait(Duration::from_secs(30));
                let body = async {
                    waits.push(asked.elapsed());
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    Ok::<_, LockError>(())
                };
                client
                    .run_locked(&key, options, body)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Ok::<_, String>(waits)
        }));
    }
    tokio::time::sleep(time).await;
    stop.store(true, Ordering::Relaxed);
    let mut waits = Vec::new();
    for handle in handles {
        waits.extend(handle.await.map_err(|e| e.to_string())??);
    }
    let took = start.elapsed();
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut admin)
        .await
        .map_err(redis_err)?;
    let calls = lock_testkit::calls_in(&info, "evalsha");
    let sections = waits.len() as u64;
    Ok(Fleet {
        clients,
        tasks,
        per_second: sections as f64 / took.as_secs_f64(),
        calls_per_section: calls as f64 / sections.max(1) as f64,
        wait_p50: quantile(&mut waits, 0.50),
        wait_p99: quantile(&mut waits, 0.99),
    })
}

/// The Markdown section of (o).
pub fn render(rows: &[Fleet], time: Duration) -> String {
    let mut out = format!(
        "### (o) A fleet on one key: C clients (each its own connections), max(32, C) tasks, 1 ms critical sections, {:.1} s each\n\n\
         | clients | tasks | critical sections per second | script calls per section | wait p50 | wait p99 |\n\
         |---|---|---|---|---|---|\n",
        time.as_secs_f64()
    );
    for r in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {:.0} | {:.2} | {:.1} ms | {:.1} ms |",
            r.clients,
            r.tasks,
            r.per_second,
            r.calls_per_section,
            r.wait_p50.as_secs_f64() * 1e3,
            r.wait_p99.as_secs_f64() * 1e3,
        );
    }
    out
}
