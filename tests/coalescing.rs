//! Coalescing on one node: acquires and releases that queue behind one in
//! flight go out together as one script call, each with its own answer.
mod support;

use std::time::Duration;

use lock_runtime::{LockClient, LockError, LockOptions};
use support::RedisServer;
use tokio::sync::mpsc;

/// The server's count of `EVALSHA` calls so far.
fn evalsha_calls(server: &RedisServer) -> u64 {
    server.command_calls("evalsha")
}

/// Makes `server` hold back scripts and writes (`CLIENT PAUSE WRITE`: INFO
/// and CLIENT LIST still answer) for up to 20 s; the connection that
/// paused it, to send `CLIENT UNPAUSE`.
fn hold_back_writes(server: &RedisServer) -> redis::Connection {
    let mut admin = server.connection();
    redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(20_000)
        .arg("WRITE")
        .query::<()>(&mut admin)
        .expect("CLIENT PAUSE");
    admin
}

/// Whether some client's request waits at the paused server: a client
/// blocked by the pause (flag `b`), or a query buffer not yet read.
fn a_request_waits(server: &RedisServer) -> bool {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut server.connection())
        .expect("CLIENT LIST");
    list.lines().any(|client| {
        client.split(' ').any(|field| {
            (field.starts_with("flags=") && field.contains('b'))
                || (field.starts_with("qbuf=") && field != "qbuf=0")
        })
    })
}

/// The calls of `n` tasks on keys `k0..k<n>` of `client`, started while the
/// server holds back scripts (`CLIENT PAUSE WRITE`: INFO and CLIENT LIST
/// still answer), after the first call's request reached it: the first
/// goes out alone and the others queue behind it. Returns each call's
/// result, in key order.
async fn calls_behind_a_paused_one(
    server: &RedisServer,
    client: &LockClient,
    n: usize,
) -> Vec<Result<usize, LockError>> {
    let mut admin = hold_back_writes(server);
    let (started, mut all_started) = mpsc::unbounded_channel();
    let options = LockOptions::new().wait(Duration::ZERO);
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let client = client.clone();
            let started = started.clone();
            async move {
                let _ = started.send(i);
                client
                    .run_locked(&format!("k{i}"), options, async { Ok::<_, LockError>(i) })
                    .await
            }
        })
        .collect();
    let mut tasks = tasks.into_iter();
    let first = tokio::spawn(tasks.next().expect("a task"));
    assert!(
        support::eventually(Duration::from_secs(10), || a_request_waits(server)).await,
        "the first call's request reached the server"
    );
    let rest: Vec<_> = tasks.map(tokio::spawn).collect();
    for _ in 1..n {
        tokio::time::timeout(Duration::from_secs(10), all_started.recv())
            .await
            .expect("every task started")
            .expect("a task");
    }
    // Each task's first poll (which queues its acquire) ran when it sent.
    tokio::task::yield_now().await;
    redis::cmd("CLIENT")
        .arg("UNPAUSE")
        .query::<()>(&mut admin)
        .expect("CLIENT UNPAUSE");
    let mut results = vec![first.await.expect("task")];
    for task in rest {
        results.push(task.await.expect("task"));
    }
    results
}

/// 20 calls started behind one in flight: every one holds its lock, and
/// the server runs far fewer script calls than the 40 that the acquires
/// and releases would take alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_queued_behind_one_in_flight_go_out_as_one_script_call() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.expect("connect");
    let before = evalsha_calls(&server);
    let results = calls_behind_a_paused_one(&server, &client, 20).await;
    for (i, result) in results.iter().enumerate() {
        assert_eq!(result.as_ref().ok(), Some(&i), "call {i}: {result:?}");
    }
    let calls = evalsha_calls(&server) - before;
    assert!(
        calls <= 25,
        "{calls} script calls for 20 acquires and 20 releases"
    );
    for i in 0..20 {
        assert!(
            server.owners(&format!("lock:k{i}")).is_empty(),
            "k{i} released"
        );
    }
}

/// A call whose key holds something else fails by itself, with the error
/// it would have alone; the calls beside it in the batch hold their locks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_call_s_error_in_a_batch_is_its_own() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.expect("connect");
    redis::cmd("SET")
        .arg("lock:k5")
        .arg("not a lock")
        .query::<()>(&mut server.connection())
        .expect("SET");
    let before = evalsha_calls(&server);
    let results = calls_behind_a_paused_one(&server, &client, 10).await;
    for (i, result) in results.iter().enumerate() {
        if i == 5 {
            let error = result.as_ref().expect_err("k5 holds no lock");
            assert!(error.to_string().contains("LOCKLAYOUT"), "{error}");
            assert!(!error.is_retryable(), "{error}");
        } else {
            assert_eq!(result.as_ref().ok(), Some(&i), "call {i}: {result:?}");
        }
    }
    assert!(
        evalsha_calls(&server) - before < 19,
        "the calls were batched"
    );
}

/// Tasks on a few keys, with their calls batched: no two bodies on one key
/// overlap, and every increment is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_calls_on_shared_keys_never_overlap() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.expect("connect");
    let counts = std::sync::Arc::new(
        (0..4)
            .map(|_| std::sync::atomic::AtomicU64::new(0))
            .collect::<Vec<_>>(),
    );
    let inside = std::sync::Arc::new(
        (0..4)
            .map(|_| std::sync::atomic::AtomicBool::new(false))
            .collect::<Vec<_>>(),
    );
    let before = evalsha_calls(&server);
    let tasks: Vec<_> = (0..32)
        .map(|t| {
            let (client, counts, inside) = (client.clone(), counts.clone(), inside.clone());
            tokio::spawn(async move {
                for round in 0..25 {
                    let k = (t + round) % 4;
                    client
                        .run_locked(&format!("shared{k}"), LockOptions::new(), async {
                            assert!(
                                !inside[k].swap(true, std::sync::atomic::Ordering::SeqCst),
                                "two bodies on shared{k} at once"
                            );
                            let n = counts[k].load(std::sync::atomic::Ordering::SeqCst);
                            tokio::task::yield_now().await;
                            counts[k].store(n + 1, std::sync::atomic::Ordering::SeqCst);
                            inside[k].store(false, std::sync::atomic::Ordering::SeqCst);
                            Ok::<_, LockError>(())
                        })
                        .await
                        .expect("locked call");
                }
            })
        })
        .collect();
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(120), task)
            .await
            .expect("the tasks finish")
            .expect("task");
    }
    let total: u64 = counts
        .iter()
        .map(|c| c.load(std::sync::atomic::Ordering::SeqCst))
        .sum();
    assert_eq!(total, 32 * 25);
    let calls = evalsha_calls(&server) - before;
    println!("{calls} script calls for {} locked calls", 32 * 25);
}

/// A call dropped while its acquire waits in the queue: its give-back (sent
/// from the client's own thread) goes out after the acquire, not before,
/// so the key is free once both ran, long before the lease would free it.
#[tokio::test]
async fn a_dropped_call_s_give_back_follows_its_queued_acquire() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.expect("connect");
    let mut admin = hold_back_writes(&server);
    let options = LockOptions::new().wait(Duration::ZERO);
    let first = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .run_locked("k0", options, async { Ok::<_, LockError>(()) })
                .await
        }
    });
    assert!(
        support::eventually(Duration::from_secs(10), || a_request_waits(&server)).await,
        "the first call's request reached the server"
    );
    let (started, mut queued) = mpsc::unbounded_channel();
    let dropped = tokio::spawn({
        let client = client.clone();
        async move {
            let _ = started.send(());
            client
                .run_locked("k1", options, async { Ok::<_, LockError>(()) })
                .await
        }
    });
    // On this current-thread runtime, the task's first poll (which queued
    // its acquire behind the first call) is over when its message arrives.
    queued.recv().await.expect("the call started");
    dropped.abort();
    assert!(dropped.await.expect_err("aborted").is_cancelled());
    redis::cmd("CLIENT")
        .arg("UNPAUSE")
        .query::<()>(&mut admin)
        .expect("CLIENT UNPAUSE");
    first.await.expect("task").expect("the first call");
    // The dropped acquire may have taken k1; its give-back must free it,
    // well within the 30 s lease.
    assert!(
        support::eventually(Duration::from_secs(10), || server
            .owners("lock:k1")
            .is_empty())
        .await,
        "k1 is left held: {:?}",
        server.lock_value("lock:k1")
    );
    assert!(
        server.lock_value("lock:k1").is_some(),
        "the dropped acquire ran (and was given back)"
    );
}

/// With coalescing turned off, every call goes out alone, even behind one
/// in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_built_without_coalescing_sends_every_call_alone() {
    let server = RedisServer::start();
    let client = LockClient::builder()
        .coalesce(false)
        .connect(&server.url())
        .await
        .expect("connect");
    let before = evalsha_calls(&server);
    let results = calls_behind_a_paused_one(&server, &client, 10).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let calls = evalsha_calls(&server) - before;
    assert!(
        calls >= 20,
        "{calls} script calls for 10 acquires and 10 releases"
    );
}
