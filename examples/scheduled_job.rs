//! A job that runs once per period across a fleet: every instance ticks on
//! its own timer and calls the job; the job's lock, named after the
//! period, lets one instance run it and the others skip, and stays taken
//! after a short run (`hold_at_least`), so that an instance whose timer
//! fires late cannot run the same period again.
//!
//! Three instances, each with a client of its own, run in this process on
//! the embedded in-memory backend (one keyspace, as processes share one
//! Redis); with `REDIS_URL` set (for example
//! `REDIS_URL=redis://127.0.0.1:6379/`) they run against that Redis, and
//! the same example started in other terminals adds instances.
//!
//! ```text
//! cargo run --example scheduled_job
//! ```

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lock_runtime::{distributed_lock, with_client, EmbeddedKeyspace, LockClient, LockError};
use tokio::time::MissedTickBehavior;

/// How often the job runs.
const PERIOD: Duration = Duration::from_millis(500);

/// How many periods each instance ticks for.
const PERIODS: u32 = 8;

#[derive(Debug, thiserror::Error)]
enum JobError {
    #[error(transparent)]
    Lock(#[from] LockError),
}

/// The job of one period (its index: the Unix time divided by the period),
/// under the lock `report:<period>`: at most one instance runs it.
///
/// `wait = "0s"`: an instance that finds the lock taken skips the period at
/// once ([`LockError::is_timeout`]). `hold_at_least = "1s"`: the lock stays
/// taken until a second after it was taken, by the server's clock, however
/// short the run, and then frees itself: until every instance's tick for
/// that period has come, even one late by up to half a second (a period of
/// 500 ms, plus the worst lateness of a tick).
#[distributed_lock(key = "report:<period>", wait = "0s", hold_at_least = "1s")]
async fn report(period: u64, instance: &str) -> Result<(), JobError> {
    // The work: far shorter than the period.
    tokio::time::sleep(Duration::from_millis(20)).await;
    println!("  period {period}: {instance} ran the report");
    Ok(())
}

/// One instance: a timer, and the job at each tick. The periods it ran,
/// and how many it skipped.
async fn instance(name: String) -> (Vec<u64>, u32) {
    let mut ticks = tokio::time::interval(PERIOD);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let (mut ran, mut skipped) = (Vec::new(), 0);
    for _ in 0..PERIODS {
        ticks.tick().await;
        let period = unix_ms() / PERIOD.as_millis() as u64;
        match report(period, &name).await {
            Ok(()) => ran.push(period),
            // Another instance runs this period: skip it.
            Err(JobError::Lock(error)) if error.is_timeout() => skipped += 1,
            // A real failure (Redis unreachable, say): say so, and go on
            // with the next period.
            Err(error) => eprintln!("  period {period}: {name} failed: {error}"),
        }
    }
    (ran, skipped)
}

fn unix_ms() -> u64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH);
    now.map_or(0, |d| d.as_millis() as u64)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let keyspace = EmbeddedKeyspace::new();
    let url = std::env::var("REDIS_URL").ok();
    match &url {
        Some(url) => println!("backend: Redis at {url}"),
        None => println!("backend: in memory (set REDIS_URL to use Redis)"),
    }
    let mut instances = Vec::new();
    for i in 1..=3 {
        let client = match &url {
            Some(url) => LockClient::connect(url).await?,
            None => LockClient::builder().in_memory_shared(&keyspace),
        };
        // Each instance's calls use its own client (one per process in a
        // real fleet, installed with `lock_runtime::init`).
        let name = format!("instance {i}");
        instances.push(tokio::spawn(with_client(client, instance(name))));
    }
    let (mut runs, mut skips) = (Vec::new(), 0);
    for instance in instances {
        let (ran, skipped) = instance.await?;
        runs.extend(ran);
        skips += skipped;
    }
    runs.sort_unstable();
    let periods = {
        let mut periods = runs.clone();
        periods.dedup();
        periods.len()
    };
    println!(
        "{} runs of {periods} periods, {skips} ticks skipped; periods run twice: {}",
        runs.len(),
        runs.len() - periods
    );
    Ok(())
}
