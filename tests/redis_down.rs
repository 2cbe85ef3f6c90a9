//! Redis stopped mid-run: calls fail with a backend error within the
//! timeouts, held locks are reported lost, and the client recovers after a
//! restart.
mod support;

use std::time::Duration;

use lock_runtime::{LockClient, LockError, LockOptions, LossReason};
use lock_testkit::TempDir;
use support::{Holder, RedisServer};
use tokio::time::Instant;

fn client_builder() -> lock_runtime::LockClientBuilder {
    LockClient::builder()
        .connect_timeout(Duration::from_millis(500))
        .command_timeout(Duration::from_millis(500))
}

async fn take(client: &LockClient, key: &str) -> Result<(), LockError> {
    let options = LockOptions::new().wait(Duration::from_millis(200));
    client
        .run_locked(key, options, async { Ok::<_, LockError>(()) })
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_fail_fast_while_redis_is_down_and_recover_after_restart() {
    let mut server = RedisServer::start();
    let client = client_builder()
        .connect(&server.url())
        .await
        .expect("connect");
    take(&client, "before").await.expect("works while up");

    server.stop();
    let start = Instant::now();
    let error = take(&client, "while-down")
        .await
        .expect_err("redis is down");
    assert!(
        matches!(&error, LockError::Backend { key, .. } if key == "lock:while-down"),
        "{error:?}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    assert!(std::error::Error::source(&error).is_some());

    server.restart();
    // Reconnecting takes a moment; each attempt is bounded by the timeouts.
    let start = Instant::now();
    let mut attempts = 0;
    loop {
        attempts += 1;
        match take(&client, "after").await {
            Ok(()) => break,
            Err(e) => assert!(
                start.elapsed() < Duration::from_secs(15),
                "no recovery: {e:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!("recovered after {attempts} attempts, {:?}", start.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_held_while_redis_goes_down_is_lost_at_its_lease() {
    let mut server = RedisServer::start();
    let client = client_builder()
        .default_lease(Duration::from_millis(900))
        .connect(&server.url())
        .await
        .expect("connect");
    let holder = Holder::start(&client, "held", LockOptions::new()).await;
    server.stop();
    let stopped = Instant::now();
    match holder.outcome().await {
        Err(LockError::Lost { reason, .. }) => assert_eq!(reason, LossReason::Expired),
        other => panic!("expected Lost, got {other:?}"),
    }
    assert!(
        stopped.elapsed() < Duration::from_secs(5),
        "{:?}",
        stopped.elapsed()
    );
}

#[tokio::test]
async fn connecting_to_nothing_is_an_error() {
    let dir = TempDir::new("nothing");
    let url = format!("unix://{}", dir.path().join("none.sock").display());
    let start = Instant::now();
    let error = client_builder()
        .connect(&url)
        .await
        .expect_err("nothing listens");
    assert!(matches!(error, LockError::Connect(_)), "{error:?}");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    let bad = LockClient::connect("not a url").await.expect_err("bad url");
    assert!(matches!(bad, LockError::Connect(_)), "{bad:?}");
}
