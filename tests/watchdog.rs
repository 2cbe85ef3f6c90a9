//! The watchdog keeps a lock past its lease; without it the lease runs out.
mod support;

use std::time::Duration;

use lock_runtime::{LockClient, LockError, LockOptions, LossReason};
use support::Env;
use tokio::time::Instant;

on_both_backends! {
    /// A 300 ms lease held for 1.5 s: renewed, never taken by another.
    async fn renewal_keeps_the_lock_past_several_leases(env: Env) {
        let builder = LockClient::builder().default_lease(Duration::from_millis(300));
        let env = Env::with(env.kind, builder).await;
        let other = env.other_client().await;
        let client = env.client.clone();
        let result = client
            .run_locked("long", LockOptions::new(), async {
                for _ in 0..5 {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    assert!(env.is_locked("lock:long").await, "still locked");
                    // A spawned task is another owner.
                    let other = other.clone();
                    let taken = tokio::spawn(async move {
                        other
                            .run_locked("long", LockOptions::new().wait(Duration::ZERO), async {
                                Ok::<_, LockError>(())
                            })
                            .await
                    })
                    .await
                    .expect("probe task");
                    assert!(matches!(taken, Err(LockError::Timeout { .. })), "{taken:?}");
                }
                Ok::<_, LockError>("done")
            })
            .await;
        assert_eq!(result.expect("held throughout"), "done");
        assert_eq!(env.client.renewing(), 0);
    }
}

on_both_backends! {
    /// `renew = false`: the body is stopped when the lease runs out.
    async fn without_renewal_the_body_is_stopped_at_the_lease(env: Env) {
        let options = LockOptions::new().lease(Duration::from_millis(300)).renew(false);
        let start = Instant::now();
        let result = env
            .client
            .run_locked("short", options, async {
                tokio::time::sleep(Duration::from_secs(20)).await;
                Ok::<_, LockError>(())
            })
            .await;
        let elapsed = start.elapsed();
        match result {
            Err(LockError::Lost { key, reason, .. }) => {
                assert_eq!(key, "lock:short");
                assert_eq!(reason, LossReason::Expired);
            }
            other => panic!("expected Lost, got {other:?}"),
        }
        assert!(elapsed >= Duration::from_millis(250), "{elapsed:?}");
        assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
        // Another owner can take it now.
        let other = env.other_client().await;
        let taken = other
            .run_locked("short", LockOptions::new().wait(Duration::from_secs(5)), async {
                Ok::<_, LockError>(())
            })
            .await;
        assert!(taken.is_ok(), "{taken:?}");
    }
}

/// Holds `locks` locks with a 600 ms lease for four leases on a client built
/// from `builder`: the renewal calls Redis saw meanwhile.
async fn renewal_calls(builder: lock_runtime::LockClientBuilder, locks: usize) -> u64 {
    let builder = builder.default_lease(Duration::from_millis(600));
    let env = Env::with(support::Kind::Redis, builder).await;
    let server = env.server.as_ref().expect("redis");
    let mut holders = Vec::new();
    for i in 0..locks {
        let key = format!("many:{i}");
        holders.push(support::Holder::start(&env.client, &key, LockOptions::new()).await);
    }
    server.reset_stats();
    // Four leases: every lock renewed about 12 times, at least 3 to stay held.
    tokio::time::sleep(Duration::from_millis(2400)).await;
    let calls = server.command_calls("evalsha");
    assert_eq!(env.client.renewing(), locks);
    for holder in holders {
        holder.release().await.expect("held throughout");
    }
    println!("{calls} renewal calls for {locks} locks over 4 leases");
    calls
}

/// 100 held locks cost a few renewal calls per period, not 100.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_of_many_locks_are_batched() {
    let calls = renewal_calls(LockClient::builder(), 100).await;
    assert!(calls < 100, "{calls} calls: not batched");
}

/// `renewal_batch_size(1)`: each lock is renewed by a call of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_renewal_batch_size_bounds_each_call() {
    let calls = renewal_calls(LockClient::builder().renewal_batch_size(1), 20).await;
    assert!(calls >= 20 * 3, "{calls} calls: batched above 1");
}
