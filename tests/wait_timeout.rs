//! Waiting for a held lock: `wait` bounds it, a release wakes the waiter.
mod support;

use std::time::Duration;

use lock_runtime::{LockError, LockOptions};
use support::Holder;
use tokio::sync::oneshot;
use tokio::time::Instant;

fn lease_30s() -> LockOptions {
    LockOptions::new().lease(Duration::from_secs(30))
}

on_both_backends! {
    async fn zero_wait_tries_once_and_wait_bounds_the_wait(env: Env) {
        let holder = Holder::start(&env.client, "busy", lease_30s()).await;
        let other = env.other_client().await;
        let body = async { Ok::<_, LockError>(()) };
        let zero = other.run_locked("busy", LockOptions::new().wait(Duration::ZERO), body).await;
        match zero {
            Err(LockError::Timeout { key, .. }) => assert_eq!(key, "lock:busy"),
            other => panic!("expected a timeout, got {other:?}"),
        }

        let start = Instant::now();
        let waited = other
            .run_locked("busy", LockOptions::new().wait(Duration::from_millis(300)), async {
                Ok::<_, LockError>(())
            })
            .await;
        let elapsed = start.elapsed();
        let error = waited.expect_err("the lock is held for 30 s");
        assert!(matches!(error, LockError::Timeout { .. }), "{error:?}");
        assert!(error.to_string().contains("lock:busy"), "{error}");
        assert!(elapsed >= Duration::from_millis(300), "{elapsed:?}");
        assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");

        holder.release().await.expect("holder");
    }
}

on_both_backends! {
    /// The holder's lease is 30 s; the waiter gets the lock right after the
    /// release, so it was woken, not left to the lease.
    async fn a_release_wakes_the_waiter(env: Env) {
        let holder = Holder::start(&env.client, "hand-off", lease_30s()).await;
        let other = env.other_client().await;
        let (released_at_tx, released_at_rx) = oneshot::channel::<Instant>();
        let waiter = tokio::spawn(async move {
            let options = LockOptions::new().wait(Duration::from_secs(25));
            other
                .run_locked("hand-off", options, async {
                    let released_at = released_at_rx.await.expect("release time");
                    Ok::<_, LockError>(released_at.elapsed())
                })
                .await
        });
        // Let the waiter queue up: on Redis, until it has subscribed.
        match &env.server {
            Some(server) => {
                let subscribed = support::eventually(Duration::from_secs(10), || {
                    let counts: Vec<(String, u64)> = redis::cmd("PUBSUB")
                        .arg("NUMSUB")
                        .arg("lock:hand-off")
                        .query(&mut server.connection())
                        .expect("PUBSUB NUMSUB");
                    counts.first().is_some_and(|(_, n)| *n == 1)
                })
                .await;
                assert!(subscribed, "the waiter subscribed to the release channel");
            }
            None => tokio::time::sleep(Duration::from_millis(100)).await,
        }
        released_at_tx.send(Instant::now()).expect("waiter alive");
        holder.release().await.expect("holder");
        let hand_off = waiter.await.expect("waiter").expect("waiter got the lock");
        assert!(hand_off < Duration::from_secs(5), "hand-off took {hand_off:?}");
    }
}
