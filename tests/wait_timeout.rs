//! Waiting for a held lock: `wait` bounds it, a release wakes the waiter.
mod support;

use std::time::Duration;

use lock_runtime::{LockError, LockOptions};
use support::{Env, Holder, Kind};
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

on_both_backends! {
    /// Waiters of one client get the lock in the order they came, and a
    /// newcomer queues behind them instead of going first.
    async fn waiters_are_served_in_arrival_order(env: Env) {
        let holder = Holder::start(&env.client, "line", lease_30s()).await;
        let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut waiters = Vec::new();
        for n in 0..5 {
            let client = env.client.clone();
            let order = order.clone();
            waiters.push(tokio::spawn(async move {
                let options = LockOptions::new().wait(Duration::from_secs(20));
                client
                    .run_locked("line", options, async {
                        order.lock().expect("order").push(n);
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        Ok::<_, LockError>(())
                    })
                    .await
            }));
            // Timing is the point here: give each waiter time to queue.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        holder.release().await.expect("holder");
        for waiter in waiters {
            waiter.await.expect("task").expect("served");
        }
        assert_eq!(*order.lock().expect("order"), [0, 1, 2, 3, 4]);
    }
}

on_both_backends! {
    /// A holder that releases and asks again at once queues behind the
    /// waiter that was already there.
    async fn a_releaser_coming_straight_back_does_not_starve_a_waiter(env: Env) {
        let sections = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (held_tx, held_rx) = oneshot::channel::<()>();
        let (go_tx, go_rx) = oneshot::channel::<()>();
        let greedy = {
            let client = env.client.clone();
            let sections = sections.clone();
            tokio::spawn(async move {
                let options = LockOptions::new().wait(Duration::from_secs(20));
                client
                    .run_locked("greedy", options, async {
                        sections.lock().expect("log").push("greedy");
                        held_tx.send(()).expect("alive");
                        go_rx.await.expect("go");
                        Ok::<_, LockError>(())
                    })
                    .await
                    .expect("first section");
                for _ in 0..10 {
                    client
                        .run_locked("greedy", options, async {
                            sections.lock().expect("log").push("greedy");
                            Ok::<_, LockError>(())
                        })
                        .await
                        .expect("section");
                }
            })
        };
        held_rx.await.expect("greedy holds");
        let waiter = {
            let client = env.client.clone();
            let sections = sections.clone();
            tokio::spawn(async move {
                let options = LockOptions::new().wait(Duration::from_secs(20));
                client
                    .run_locked("greedy", options, async {
                        sections.lock().expect("log").push("waiter");
                        Ok::<_, LockError>(())
                    })
                    .await
            })
        };
        // Timing is the point here: let the waiter queue up.
        tokio::time::sleep(Duration::from_millis(100)).await;
        go_tx.send(()).expect("greedy alive");
        greedy.await.expect("greedy");
        waiter.await.expect("waiter").expect("served");
        let sections = sections.lock().expect("log").clone();
        assert_eq!(sections[..2], ["greedy", "waiter"], "{sections:?}");
    }
}

on_both_backends! {
    /// `Duration::MAX` as lease and wait: held and waited for without end,
    /// and no deadline overflows the clock.
    async fn the_longest_lease_and_wait_are_accepted(env: Env) {
        let longest = LockOptions::new().lease(Duration::MAX).wait(Duration::MAX);
        let holder = Holder::start(&env.client, "longest", longest).await;
        let other = env.other_client().await;
        let waiter = tokio::spawn(async move {
            other
                .run_locked("longest", longest, async { Ok::<_, LockError>(()) })
                .await
        });
        // Let the waiter fail once and wait: on Redis, until its failed try
        // has marked the lock.
        match &env.server {
            Some(server) => {
                let marked = support::eventually(Duration::from_secs(10), || {
                    server
                        .lock_value("lock:longest")
                        .is_some_and(|(_, state, _)| state == "w")
                })
                .await;
                assert!(marked, "the waiter tried and waits");
            }
            None => tokio::time::sleep(Duration::from_millis(100)).await,
        }
        holder.release().await.expect("holder");
        waiter.await.expect("waiter").expect("taken after the release");
    }
}

/// Waiters cancelled while their subscription is being made leave no
/// subscription behind, and the one that stays is woken by the release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_waiters_leave_no_subscription_behind() {
    let env = Env::new(Kind::Redis).await;
    let server = env.server.as_ref().expect("redis");
    let numsub = || -> i64 {
        let (_, n): (String, i64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg("lock:listened")
            .query(&mut server.connection())
            .expect("PUBSUB NUMSUB");
        n
    };
    let holder = Holder::start(&env.client, "listened", LockOptions::new()).await;
    let other = env.other_client().await;
    let wait = LockOptions::new().wait(Duration::from_secs(30));
    for _ in 0..20 {
        let call = other.run_locked("listened", wait, async { Ok::<_, LockError>(()) });
        let cut = tokio::time::timeout(Duration::from_millis(1), call).await;
        assert!(cut.is_err(), "cancelled while waiting");
    }
    let gone = support::eventually(Duration::from_secs(5), || numsub() == 0).await;
    assert!(gone, "{} subscriptions left", numsub());

    let waiter = tokio::spawn(async move {
        other
            .run_locked("listened", wait, async { Ok::<_, LockError>(()) })
            .await
    });
    let listening = support::eventually(Duration::from_secs(5), || numsub() == 1).await;
    assert!(listening);
    holder.release().await.expect("holder");
    waiter.await.expect("waiter").expect("woken by the release");
    let gone = support::eventually(Duration::from_secs(5), || numsub() == 0).await;
    assert!(gone, "{} subscriptions left", numsub());
}
