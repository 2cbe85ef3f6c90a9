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
    let _: () = redis::cmd("HSET")
        .arg("lock:vanishing")
        .arg("intruder")
        .arg(1)
        .query(&mut server.connection())
        .expect("HSET");
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
    let owners: Vec<String> = redis::cmd("HKEYS")
        .arg("lock:vanishing")
        .query(&mut server.connection())
        .expect("HKEYS");
    assert_eq!(owners, ["intruder"]);
}
