//! Mutual exclusion across separate OS processes, and a holder killed with
//! SIGKILL freeing its lock at its lease.
mod support;

use std::process::Stdio;
use std::time::Duration;

use lock_runtime::{LockClient, LockError, LockOptions};
use support::RedisServer;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;
use tokio::time::Instant;

const WORKER: &str = env!("CARGO_BIN_EXE_stock-worker");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_processes_deducting_one_stock_never_oversell() {
    let server = RedisServer::start();
    support::four_processes_never_oversell(&server.url(), &server.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_killed_with_sigkill_frees_the_lock_within_its_lease() {
    let server = RedisServer::start();
    let lease = Duration::from_millis(1500);
    let mut holder = Command::new(WORKER)
        .args([
            "hold",
            &server.url(),
            "crashy",
            &lease.as_millis().to_string(),
        ])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start holder");
    let mut lines = BufReader::new(holder.stdout.take().expect("stdout")).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("holder started in time")
        .expect("read");
    assert_eq!(line.as_deref(), Some("held"));

    holder.start_kill().expect("SIGKILL by pid");
    holder.wait().await.expect("reaped");
    let killed = Instant::now();

    let client = LockClient::connect(&server.url()).await.expect("connect");
    let options = LockOptions::new().wait(Duration::from_secs(20));
    client
        .run_locked("crashy", options, async { Ok::<_, LockError>(()) })
        .await
        .expect("free once the dead holder's lease ran out");
    let freed = killed.elapsed();
    println!("freed {freed:?} after the kill (lease {lease:?})");
    assert!(freed <= lease + Duration::from_secs(1), "{freed:?}");
}
