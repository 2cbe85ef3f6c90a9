//! The chaos run: 4 worker processes x 8 tasks deposit into one fenced
//! account under the lock while the harness pauses a holder past its lease,
//! kills a holder, restarts the lock's Redis and cuts connections.
//!
//! The lock's Redis and the account's store are separate servers: the store
//! is the protected resource and is never disturbed.
mod support;

use std::process::Stdio;
use std::time::Duration;

use lock_suite::fenced::Account;
use support::RedisServer;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::time::Instant;

const WORKER: &str = env!("CARGO_BIN_EXE_chaos-worker");
const WORKERS: usize = 4;
const TASKS: &str = "8";

struct Worker {
    pid: u32,
    child: Child,
    lines: tokio::task::JoinHandle<Vec<String>>,
}

/// The pid that the store names as the holder, if any.
fn holder(store: &RedisServer) -> Option<u32> {
    redis::cmd("GET")
        .arg("holder")
        .query(&mut store.connection())
        .expect("GET holder")
}

/// Stops a worker that is inside its critical section: SIGSTOP the pid the
/// store names, then check the store still names it (the section clears it
/// before it ends), else let it go and try again.
async fn stop_a_holder(store: &RedisServer, pids: &[u32], not: Option<u32>) -> u32 {
    for _ in 0..2000 {
        if let Some(pid) = holder(store).filter(|p| pids.contains(p) && Some(*p) != not) {
            support::signal(pid, "-STOP");
            if holder(store) == Some(pid) {
                return pid;
            }
            support::signal(pid, "-CONT");
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("no holder caught inside its section");
}

/// Waits until `more` sections beyond the current count are accepted.
async fn progress(account: &mut Account, more: usize) {
    let start = account.accepted().await.expect("log").len();
    let deadline = Instant::now() + Duration::from_secs(30);
    while account.accepted().await.expect("log").len() < start + more {
        assert!(Instant::now() < deadline, "no progress in 30 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn cut_connections(lock: &RedisServer) {
    for kind in ["normal", "pubsub"] {
        let _: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg(kind)
            .arg("SKIPME")
            .arg("yes")
            .query(&mut lock.connection())
            .expect("CLIENT KILL");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_run_keeps_the_balance_exact_and_refuses_stale_writes() {
    let mut lock = RedisServer::start();
    let store = RedisServer::start();
    let con = redis::Client::open(store.url())
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("store");
    let mut account = Account::new(con, "acct");

    let mut workers = Vec::new();
    for _ in 0..WORKERS {
        let mut child = Command::new(WORKER)
            .args([&lock.url(), &store.url(), TASKS])
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start worker");
        let pid = child.id().expect("pid");
        let stdout = child.stdout.take().expect("stdout");
        let lines = tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            let mut all = Vec::new();
            while let Ok(Some(line)) = lines.next_line().await {
                all.push(line);
            }
            all
        });
        workers.push(Worker { pid, child, lines });
    }
    let pids: Vec<u32> = workers.iter().map(|w| w.pid).collect();
    let mut faults = Vec::new();

    progress(&mut account, 20).await;
    cut_connections(&lock);
    faults.push("CLIENT KILL");

    progress(&mut account, 20).await;
    let paused = stop_a_holder(&store, &pids, None).await;
    // Well past the 600 ms lease: another worker takes the lock meanwhile.
    let resumed_after = progress_while_paused(&mut account).await;
    support::signal(paused, "-CONT");
    faults.push("SIGSTOP holder past its lease, then SIGCONT");

    progress(&mut account, 20).await;
    let killed = stop_a_holder(&store, &pids, Some(paused)).await;
    support::signal(killed, "-KILL");
    faults.push("SIGKILL holder");

    progress(&mut account, 20).await;
    lock.restart();
    faults.push("restart the lock's redis-server");

    progress(&mut account, 20).await;
    cut_connections(&lock);
    faults.push("CLIENT KILL");
    progress(&mut account, 20).await;

    let _: () = redis::cmd("SET")
        .arg("stop")
        .arg(1)
        .query(&mut store.connection())
        .expect("SET stop");
    let mut outputs = Vec::new();
    for mut worker in workers {
        let status = tokio::time::timeout(Duration::from_secs(90), worker.child.wait())
            .await
            .expect("worker ended by itself")
            .expect("wait");
        let lines = worker.lines.await.expect("lines");
        if worker.pid == killed {
            assert!(!status.success(), "the killed worker died");
        } else {
            assert!(status.success(), "worker {} failed: {lines:?}", worker.pid);
        }
        outputs.push((worker.pid, lines));
    }

    // No write accepted out of token order; the balance is the sum of the
    // accepted writes, exactly.
    let accepted = account.accepted().await.expect("log");
    assert!(
        accepted.windows(2).all(|w| w[0].0 <= w[1].0),
        "a write was accepted out of token order"
    );
    let sum: i64 = accepted.iter().map(|(_, delta)| delta).sum();
    let balance = account.balance().await.expect("balance");
    assert_eq!(balance as i64, sum, "balance vs accepted writes");
    let refused = account.refused().await.expect("refused");

    // The paused holder learned of its loss on resume, and its late write
    // was refused by the store.
    let paused_lines = &outputs
        .iter()
        .find(|(pid, _)| *pid == paused)
        .expect("paused")
        .1;
    assert!(
        paused_lines.iter().any(|l| l.starts_with("lost")),
        "the paused holder got no Lost: {paused_lines:?}"
    );
    assert!(
        paused_lines.iter().any(|l| l == "late-write refused"),
        "the paused holder's late write was not refused: {paused_lines:?}"
    );
    // A section whose token the store found stale ran after its lock was
    // lost: every one of those must have been reported as Lost instead.
    let stale: u64 = summaries(&outputs, "stale=");
    assert_eq!(stale, 0, "a lost lock was reported as something else");
    let losses: usize = outputs
        .iter()
        .map(|(_, lines)| lines.iter().filter(|l| l.starts_with("lost")).count())
        .sum();
    let sections = summaries(&outputs, "sections=");
    println!(
        "chaos: {sections} sections done by the survivors, {} writes accepted, balance {balance}; \
         faults: {}; holder paused {resumed_after:?}; losses detected: {losses}; \
         stale writes refused: {refused}",
        accepted.len(),
        faults.join(", ")
    );
    for (pid, lines) in &outputs {
        if let Some(summary) = lines.iter().find(|l| l.starts_with("summary")) {
            println!("  worker {pid}: {summary}");
        }
    }
}

/// Keeps a holder stopped until the others have made progress and more
/// than two leases have passed; how long that was.
async fn progress_while_paused(account: &mut Account) -> Duration {
    let start = Instant::now();
    progress(account, 5).await;
    let two_leases = Duration::from_millis(1200);
    if start.elapsed() < two_leases {
        tokio::time::sleep(two_leases - start.elapsed()).await;
    }
    start.elapsed()
}

/// The sum of one field over the workers' summary lines.
fn summaries(outputs: &[(u32, Vec<String>)], field: &str) -> u64 {
    outputs
        .iter()
        .flat_map(|(_, lines)| lines.iter())
        .filter_map(|l| l.strip_prefix("summary "))
        .filter_map(|s| s.split(' ').find_map(|kv| kv.strip_prefix(field)))
        .filter_map(|n| n.parse::<u64>().ok())
        .sum()
}
