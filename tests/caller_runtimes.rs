//! Calls made on current-thread runtimes take a connection driven by that
//! runtime (no thread hop per round trip), which ends with the runtime.
mod support;

use std::time::{Duration, Instant};

use lock_runtime::{LockClient, LockError, LockOptions};
use support::RedisServer;

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

async fn once(client: &LockClient, key: &str) -> Result<(), LockError> {
    client
        .run_locked(key, LockOptions::new(), async { Ok::<_, LockError>(()) })
        .await
}

/// Polls `f` (a blocking look at the server) every 5 ms, up to 5 s.
fn within_5s(mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    false
}

/// Calls `client` from the current runtime until `server` has `clients`
/// connections: the runtime gets a connection of its own after a few calls,
/// made in the background.
async fn call_until_connected(client: &LockClient, server: &RedisServer, clients: u64) {
    for _ in 0..200 {
        if server.connected_clients() >= clients {
            return;
        }
        once(client, "warm-up").await.expect("call");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    panic!("no connection of the runtime's own after 200 calls");
}

/// A client (built with `builder`) whose calls from the returned runtime
/// take that runtime's own connection, already made.
fn client_on_a_runtime(
    server: &RedisServer,
    builder: lock_runtime::LockClientBuilder,
) -> (LockClient, tokio::runtime::Runtime) {
    let client = current_thread()
        .block_on(builder.connect(&server.url()))
        .expect("connect");
    // The client's two connections, and the one counting.
    let base = server.connected_clients();
    let runtime = current_thread();
    runtime.block_on(call_until_connected(&client, server, base + 1));
    (client, runtime)
}

/// One short-lived runtime after another, as `#[tokio::test]`s make them:
/// every call works, each runtime gets a connection of its own while it
/// runs, and the connection closes with it.
#[test]
fn each_current_thread_runtime_gets_a_connection_that_ends_with_it() {
    let server = RedisServer::start();
    let client = current_thread()
        .block_on(LockClient::connect(&server.url()))
        .expect("connect");
    // The client's two connections, and the one counting.
    let base = server.connected_clients();
    for round in 0..4 {
        let runtime = current_thread();
        runtime.block_on(async {
            call_until_connected(&client, &server, base + 1).await;
            for _ in 0..20 {
                once(&client, "round").await.expect("call");
            }
        });
        drop(runtime);
        assert!(
            within_5s(|| server.connected_clients() == base),
            "round {round}: the runtime's connection outlived it"
        );
    }
}

/// A runtime that makes only a few calls (one made for a single call, say)
/// uses the client's connection and costs Redis no connection of its own.
#[test]
fn a_runtime_that_calls_a_few_times_gets_no_connection() {
    let server = RedisServer::start();
    let client = current_thread()
        .block_on(LockClient::connect(&server.url()))
        .expect("connect");
    let base = server.connected_clients();
    for _ in 0..3 {
        current_thread().block_on(async {
            for _ in 0..3 {
                once(&client, "few").await.expect("call");
            }
            // Time for a connection to show up, if one were being made.
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert_eq!(server.connected_clients(), base);
        });
    }
}

/// Dropped while its acquire is on the wire, on the runtime's own
/// connection: a release follows it (on that same connection) and frees the
/// lock, rather than leaving it to its 30 s lease.
#[test]
fn an_in_flight_acquire_on_the_runtimes_connection_is_released_after_it() {
    let server = RedisServer::start();
    let (client, runtime) = client_on_a_runtime(&server, LockClient::builder());
    runtime.block_on(async {
        server.reset_stats();
        let paused = server.pause();
        let options = LockOptions::new().lease(Duration::from_secs(30));
        let call = client.run_locked("in-flight", options, async { Ok::<_, LockError>(()) });
        let dropped = tokio::time::timeout(Duration::from_millis(200), call).await;
        assert!(dropped.is_err(), "Redis is frozen: the call cannot finish");
        paused.resume();
        // Both scripts run, the acquire first, then the release.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while server.command_calls("evalsha") < 2 {
            assert!(tokio::time::Instant::now() < deadline, "both scripts ran");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        while !server.owners("lock:in-flight").is_empty() {
            assert!(tokio::time::Instant::now() < deadline, "still locked");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
}

/// The same, but the runtime is not driven after the call is dropped, so its
/// connection cannot send the release: the client's connection sends it
/// once that one times out.
#[test]
fn an_in_flight_release_is_sent_even_if_the_callers_runtime_stops() {
    let server = RedisServer::start();
    let builder = LockClient::builder().command_timeout(Duration::from_millis(500));
    let (client, runtime) = client_on_a_runtime(&server, builder);
    server.reset_stats();
    let paused = server.pause();
    let dropped = runtime.block_on(async {
        let options = LockOptions::new().lease(Duration::from_secs(30));
        let call = client.run_locked("stopped", options, async { Ok::<_, LockError>(()) });
        tokio::time::timeout(Duration::from_millis(200), call).await
    });
    assert!(dropped.is_err(), "Redis is frozen: the call cannot finish");
    // From here on nothing drives `runtime`.
    paused.resume();
    assert!(
        within_5s(|| server.command_calls("evalsha") >= 1),
        "the acquire reached Redis"
    );
    assert!(
        within_5s(|| server.owners("lock:stopped").is_empty()),
        "the lock was left to its lease"
    );
    drop(runtime);
}
