//! Several clients on one embedded keyspace: they contend for its locks as
//! the clients of one Redis do, and a release by one wakes the waiters of
//! another, with no server.

use std::time::Duration;

use lock_runtime::{EmbeddedKeyspace, LockClient, LockError, LockOptions};
use tokio::sync::oneshot;
use tokio::time::Instant;

/// A lease far longer than the test: a waiter that enters before it ends
/// was woken by the release, not by the lease running out.
const LEASE: Duration = Duration::from_secs(60);

#[tokio::test]
async fn a_release_by_one_client_wakes_a_waiter_of_another() {
    let keyspace = EmbeddedKeyspace::new();
    let a = LockClient::builder().in_memory_shared(&keyspace);
    let b = LockClient::builder().in_memory_shared(&keyspace);
    let options = LockOptions::new()
        .lease(LEASE)
        .wait(Duration::from_secs(30));
    let (held_tx, held_rx) = oneshot::channel();
    let (go_tx, go_rx) = oneshot::channel::<()>();
    let holder = tokio::spawn({
        let a = a.clone();
        async move {
            a.run_locked("shared:1", options, async {
                let _ = held_tx.send(());
                let _ = go_rx.await;
                Ok::<_, LockError>(())
            })
            .await
        }
    });
    held_rx.await.expect("a holds the lock");

    // b cannot take it now: one keyspace, one lock.
    let now = b
        .run_locked("shared:1", options.wait(Duration::ZERO), async {
            Ok::<_, LockError>(())
        })
        .await;
    assert!(matches!(now, Err(LockError::Timeout { .. })), "{now:?}");

    // b waits; a releases; b enters long before a's lease would end.
    let waiter = tokio::spawn({
        let b = b.clone();
        async move {
            b.run_locked("shared:1", options, async {
                Ok::<_, LockError>(Instant::now())
            })
            .await
        }
    });
    // Give b time to find the lock held and wait (a wake-up before b waits
    // would prove nothing); the assertion below does not depend on it.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let released = Instant::now();
    go_tx.send(()).expect("a's body waits");
    holder.await.expect("a's task").expect("a's call");
    let entered = waiter.await.expect("b's task").expect("b's call");
    assert!(
        entered.duration_since(released) < Duration::from_secs(20),
        "b entered {:?} after a's release: not woken by it",
        entered.duration_since(released)
    );
    a.shutdown(Duration::from_secs(5)).await;
    b.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn clients_on_other_keyspaces_do_not_share_locks() {
    let (one, two) = (EmbeddedKeyspace::new(), EmbeddedKeyspace::new());
    let a = LockClient::builder().in_memory_shared(&one);
    let b = LockClient::builder().in_memory_shared(&two);
    let options = LockOptions::new().wait(Duration::ZERO);
    let nested = a
        .run_locked("shared:2", options, async {
            b.run_locked("shared:2", options, async { Ok::<_, LockError>(()) })
                .await
        })
        .await;
    assert!(nested.is_ok(), "{nested:?}");
}

#[tokio::test(start_paused = true)]
async fn locks_on_every_shard_are_renewed_for_as_long_as_their_bodies_run() {
    // Forty keys fall in many of the keyspace's shards; the renewal goes
    // out one batch per shard.
    let client = LockClient::builder().on_current_runtime().in_memory();
    let options = LockOptions::new().lease(Duration::from_secs(1));
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..40 {
        let client = client.clone();
        calls.spawn(async move {
            client
                .run_locked(&format!("renewed:{i}"), options, async {
                    // Five leases long.
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    Ok::<_, LockError>(())
                })
                .await
        });
    }
    while let Some(call) = calls.join_next().await {
        call.expect("task").expect("held to the end, renewed");
    }
}
