//! A job once per period across a fleet: 3 OS processes (this test
//! binary, run again as a child: see [`child_ticker`]) each tick every
//! 200 ms for 4 s against one Redis, their ticks 60 ms apart within each
//! period, as instances whose timers drift. At each tick a child calls two
//! jobs with `wait = 0s`:
//!
//! - `report:<unix ms / 200>`, the period's own key, with
//!   `hold_at_least = 1s` (the period plus the worst lateness of a tick:
//!   no process computes that index after it). Each run increments a Redis
//!   counter for its index and logs its fencing token, the server's time in
//!   µs when it took the lock. Asserted: no index ran more than once.
//!   Printed: the share of the window's indexes that ran, the largest
//!   lateness (the token's ms minus the index's start), and the load.
//! - `report:constant`, one key for every period, with `hold_at_least`
//!   equal to the period. Asserted: consecutive runs' tokens are at least
//!   the hold less 1 ms apart (a time read inside the body would not be the
//!   acquisition's).
//!
//! Without `hold_at_least` the same index runs up to three times: each
//! run takes a few ms, and the next process's tick comes 60 ms later.
mod support;

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lock_runtime::{LockClient, LockError, LockOptions};
use redis::aio::MultiplexedConnection;
use support::RedisServer;
use tokio::process::Command;

/// The period of both jobs.
const PERIOD_MS: u64 = 200;
/// Ticks per process: 4 s.
const TICKS: u64 = 20;
/// How far apart the processes' ticks fall within a period.
const OFFSET_MS: u64 = 60;
const PROCESSES: u64 = 3;
/// The per-period key's hold: the period plus room for a late tick.
const HOLD: Duration = Duration::from_secs(1);
/// What tells a child process its part.
const CHILD_ENV: &str = "LOCK_SCHEDULED_CHILD";

fn unix_ms() -> u64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH);
    u64::try_from(now.expect("after 1970").as_millis()).expect("ms")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_run_each_period_at_most_once() {
    let server = RedisServer::start();
    // The first tick: a period's start, after the children have started.
    let first = (unix_ms() / PERIOD_MS + 10) * PERIOD_MS;
    let children: Vec<_> = (0..PROCESSES)
        .map(|i| {
            let part = format!("{} {first} {}", server.url(), i * OFFSET_MS);
            Command::new(std::env::current_exe().expect("this test binary"))
                .args(["child_ticker", "--exact", "--ignored", "--test-threads=1"])
                .env(CHILD_ENV, part)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .expect("start a child")
        })
        .collect();
    for child in children {
        let output = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
            .await
            .expect("the child ended in time")
            .expect("its output");
        assert!(
            output.status.success(),
            "a child failed: {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    let mut con = server.connection();
    let runs: Vec<String> = redis::cmd("LRANGE")
        .arg("runs")
        .arg(0)
        .arg(-1)
        .query(&mut con)
        .expect("LRANGE");
    let mut counted: BTreeMap<u64, u64> = BTreeMap::new();
    let mut lateness = 0;
    for run in &runs {
        let (index, token) = run.split_once(':').expect("index:token");
        let (index, token): (u64, u64) =
            (index.parse().expect("index"), token.parse().expect("token"));
        let count: u64 = redis::cmd("GET")
            .arg(format!("runs:{index}"))
            .query(&mut con)
            .expect("GET");
        counted.insert(index, count);
        lateness = lateness.max((token / 1000).saturating_sub(index * PERIOD_MS));
    }
    let twice: Vec<_> = counted.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        twice.is_empty(),
        "indexes run more than once (index, runs): {twice:?}"
    );
    let window = first / PERIOD_MS..first / PERIOD_MS + TICKS;
    let ran = window.clone().filter(|i| counted.contains_key(i)).count();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load = load.split_whitespace().next().unwrap_or("?");
    println!(
        "per-period key: {} runs; {ran} of the window's {} indexes ran ({:.0}%), none twice; \
         largest lateness {lateness} ms; 1-minute load {load}",
        runs.len(),
        TICKS,
        100.0 * ran as f64 / TICKS as f64,
    );

    let mut tokens: Vec<u64> = redis::cmd("LRANGE")
        .arg("constant")
        .arg(0)
        .arg(-1)
        .query(&mut con)
        .expect("LRANGE");
    tokens.sort_unstable();
    let gaps: Vec<u64> = tokens.windows(2).map(|w| w[1] - w[0]).collect();
    let least = gaps.iter().copied().min().unwrap_or(0);
    println!(
        "constant key: {} runs, the least gap between their tokens {} µs (hold {} ms)",
        tokens.len(),
        least,
        PERIOD_MS
    );
    assert!(
        tokens.len() >= 2,
        "the constant key ran {} times",
        tokens.len()
    );
    assert!(
        least >= (PERIOD_MS - 1) * 1000,
        "two runs of the constant key {least} µs apart: less than its hold of {PERIOD_MS} ms"
    );
}

/// A child's part, when this binary runs as one: `<redis url> <first tick
/// in unix ms> <offset ms>` in [`CHILD_ENV`]. Ticks every period from the
/// first tick plus its offset, and calls both jobs at each tick. Run as a
/// test only by the parent (ignored otherwise).
#[test]
#[ignore = "a child process of three_processes_run_each_period_at_most_once"]
fn child_ticker() {
    let Ok(part) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mut parts = part.split_whitespace();
    let url = parts.next().expect("a url").to_owned();
    let first: u64 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .expect("first tick");
    let offset: u64 = parts.next().and_then(|s| s.parse().ok()).expect("offset");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(tick(url, first + offset));
}

/// The jobs' errors: only a skip (a timeout) is expected.
#[derive(Debug, thiserror::Error)]
enum JobError {
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error(transparent)]
    Redis(#[from] redis::RedisError),
}

async fn tick(url: String, first: u64) {
    let client = LockClient::connect(&url).await.expect("connect");
    let store = redis::Client::open(url.as_str())
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let start =
        tokio::time::Instant::now() + Duration::from_millis(first.saturating_sub(unix_ms()));
    let mut ticks = tokio::time::interval_at(start, Duration::from_millis(PERIOD_MS));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    for _ in 0..TICKS {
        ticks.tick().await;
        let index = unix_ms() / PERIOD_MS;
        let per_period = LockOptions::new().wait(Duration::ZERO).hold_at_least(HOLD);
        let run = async {
            let token = lock_runtime::fencing_token().expect("held");
            let count = format!("runs:{index}");
            write(&store, redis::cmd("INCR").arg(count)).await?;
            let run = format!("{index}:{token}");
            write(&store, redis::cmd("RPUSH").arg("runs").arg(run)).await
        };
        skip_or_run(
            client
                .run_locked(&format!("report:{index}"), per_period, run)
                .await,
        );

        let constant = LockOptions::new()
            .wait(Duration::ZERO)
            .hold_at_least(Duration::from_millis(PERIOD_MS));
        let run = async {
            let token = lock_runtime::fencing_token().expect("held");
            write(&store, redis::cmd("RPUSH").arg("constant").arg(token)).await
        };
        skip_or_run(client.run_locked("report:constant", constant, run).await);
    }
}

/// Runs `cmd` (an integer answer) on the store.
async fn write(store: &MultiplexedConnection, cmd: &redis::Cmd) -> Result<(), JobError> {
    let _: i64 = cmd.query_async(&mut store.clone()).await?;
    Ok(())
}

/// A run, or a skip: anything else fails the child.
fn skip_or_run(outcome: Result<(), JobError>) {
    match outcome {
        Ok(()) => {}
        Err(JobError::Lock(error)) if error.is_timeout() => {}
        Err(error) => panic!("a job failed: {error}"),
    }
}
