//! A lock that disappears while held is reported lost, and the body stops.
mod support;

use std::time::Duration;

use lock_runtime::{LockClient, LockError, LockOptions, LossReason};
use support::{Holder, RedisServer};
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_that_finds_the_lock_gone_stops_the_body() {
    let server = RedisServer::start();
    let client = LockClient::builder()
        .default_lease(Duration::from_millis(600))
        .connect(&server.url())
        .await
        .expect("connect");
    let holder = Holder::start(&client, "vanishing", LockOptions::new()).await;
    // Someone deletes the lock and another owner takes the key.
    let _: () = redis::cmd("DEL")
        .arg("lock:vanishing")
        .query(&mut server.connection())
        .expect("DEL");
    let _: () = redis::cmd("SET")
        .arg("lock:vanishing")
        .arg("L1:1:h:intruder")
        .query(&mut server.connection())
        .expect("SET");
    let deleted = Instant::now();
    let result = holder.outcome().await;
    match result {
        Err(LockError::Lost { key, reason }) => {
            assert_eq!(key, "lock:vanishing");
            assert_eq!(reason, LossReason::Taken);
        }
        other => panic!("expected Lost, got {other:?}"),
    }
    // Found at the next renewal, a third of the lease later.
    assert!(
        deleted.elapsed() < Duration::from_secs(3),
        "{:?}",
        deleted.elapsed()
    );
    // The release touched only its own hold: the intruder's stays.
    assert_eq!(server.owners("lock:vanishing"), [("intruder".into(), 1)]);
}

/// The lock vanishes and the body ends before any renewal: the release finds
/// it gone, and the call reports the loss instead of success.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_finds_the_lock_gone_reports_the_loss() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.expect("connect");
    let result = client
        .run_locked("gone-early", LockOptions::new(), async {
            let _: () = redis::cmd("DEL")
                .arg("lock:gone-early")
                .query(&mut server.connection())
                .expect("DEL");
            Ok::<_, LockError>("the body finished")
        })
        .await;
    match result {
        Err(LockError::Lost { key, reason }) => {
            assert_eq!(key, "lock:gone-early");
            assert_eq!(reason, LossReason::Taken);
        }
        other => panic!("expected Lost, got {other:?}"),
    }
}

/// A restart of a Redis without persistence forgets every lock: holders
/// find out at their next renewal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_forgotten_by_a_restart_are_found_lost_at_the_next_renewal() {
    let mut server = RedisServer::start();
    let client = LockClient::builder()
        .default_lease(Duration::from_millis(900))
        .connect(&server.url())
        .await
        .expect("connect");
    let holders = [
        Holder::start(&client, "restart-1", LockOptions::new()).await,
        Holder::start(&client, "restart-2", LockOptions::new()).await,
    ];
    server.restart();
    let restarted = Instant::now();
    for holder in holders {
        match holder.outcome().await {
            Err(LockError::Lost { .. }) => {}
            other => panic!("expected Lost, got {other:?}"),
        }
    }
    assert!(
        restarted.elapsed() < Duration::from_secs(5),
        "{:?}",
        restarted.elapsed()
    );
}
