//! A dropped or panicking call releases its lock at once, not at the lease.
mod support;

use std::time::Duration;

use lock_runtime::{LockError, LockOptions};
use support::Env;
use tokio::time::Instant;

/// Waits until `key` is free; how long that took.
async fn freed_within(env: &Env, key: &str, limit: Duration) -> Duration {
    let start = Instant::now();
    while env.is_locked(key).await {
        assert!(
            start.elapsed() < limit,
            "`{key}` still locked after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    start.elapsed()
}

on_both_backends! {
    async fn dropping_the_future_releases_the_lock(env: Env) {
        let (held_tx, held_rx) = tokio::sync::oneshot::channel();
        let client = env.client.clone();
        let call = tokio::spawn(async move {
            let options = LockOptions::new().lease(Duration::from_secs(30));
            client
                .run_locked("dropped", options, async {
                    held_tx.send(()).expect("test alive");
                    std::future::pending::<()>().await;
                    Ok::<_, LockError>(())
                })
                .await
        });
        held_rx.await.expect("held");
        assert!(env.is_locked("lock:dropped").await);
        call.abort();
        assert!(call.await.expect_err("aborted").is_cancelled());
        let took = freed_within(&env, "lock:dropped", Duration::from_secs(2)).await;
        println!("released {took:?} after the drop");
        assert_eq!(env.client.renewing(), 0);
    }
}

on_both_backends! {
    async fn a_timeout_around_the_call_releases_the_lock(env: Env) {
        let options = LockOptions::new().lease(Duration::from_secs(30));
        let call = env.client.run_locked("timed-out", options, async {
            tokio::time::sleep(Duration::from_secs(30)).await;
            Ok::<_, LockError>(())
        });
        let timed_out = tokio::time::timeout(Duration::from_millis(200), call).await;
        assert!(timed_out.is_err());
        freed_within(&env, "lock:timed-out", Duration::from_secs(2)).await;
    }
}

on_both_backends! {
    async fn a_panicking_body_releases_the_lock(env: Env) {
        let client = env.client.clone();
        let call = tokio::spawn(async move {
            let options = LockOptions::new().lease(Duration::from_secs(30));
            client
                .run_locked("panicked", options, async {
                    if std::hint::black_box(true) {
                        panic!("the body fails");
                    }
                    Ok::<_, LockError>(())
                })
                .await
        });
        assert!(call.await.expect_err("panicked").is_panic());
        freed_within(&env, "lock:panicked", Duration::from_secs(2)).await;
    }
}

/// Dropped while its acquire is on the wire: the acquire may still take the
/// lock when it reaches Redis, and the release sent after it frees it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_call_whose_acquire_is_in_flight_frees_the_lock() {
    let env = Env::new(support::Kind::Redis).await;
    let server = env.server.as_ref().expect("redis");
    // Once first, so that the server knows the script: the late acquire
    // then runs instead of failing with NOSCRIPT.
    env.client
        .run_locked("in-flight", LockOptions::new(), async {
            Ok::<_, LockError>(())
        })
        .await
        .expect("warm-up");
    let paused = server.pause();
    let options = LockOptions::new().lease(Duration::from_secs(30));
    let call = env
        .client
        .run_locked("in-flight", options, async { Ok::<_, LockError>(()) });
    let dropped = tokio::time::timeout(Duration::from_millis(200), call).await;
    assert!(dropped.is_err(), "Redis is frozen: the call cannot finish");
    paused.resume();
    // The acquire lands first, then the release.
    let acquired = support::eventually(Duration::from_secs(5), || {
        server.command_calls("evalsha") >= 2
    })
    .await;
    assert!(acquired, "both scripts ran after the thaw");
    freed_within(&env, "lock:in-flight", Duration::from_secs(2)).await;
}

on_both_backends! {
    /// A cancelled body is dropped inside its lock's scope, so what it
    /// drops can still read the lock's fencing token.
    async fn a_cancelled_body_is_dropped_under_its_lock(env: Env) {
        /// Records the fencing token visible when it is dropped.
        struct SeesToken(std::sync::mpsc::Sender<Option<u64>>);
        impl Drop for SeesToken {
            fn drop(&mut self) {
                let _ = self.0.send(lock_runtime::fencing_token());
            }
        }
        let (seen_tx, seen_rx) = std::sync::mpsc::channel();
        let (held_tx, held_rx) = tokio::sync::oneshot::channel();
        let mut call = Box::pin(env.client.run_locked("scoped-drop", LockOptions::new(), async move {
            let _guard = SeesToken(seen_tx);
            held_tx.send(lock_runtime::fencing_token()).expect("test alive");
            std::future::pending::<()>().await;
            Ok::<_, LockError>(())
        }));
        let token = tokio::select! {
            _ = &mut call => panic!("the body never ends"),
            token = held_rx => token.expect("held"),
        };
        // Cancelled while the body holds the lock.
        drop(call);
        assert!(token.is_some());
        let dropped = seen_rx.try_recv().expect("the body was dropped");
        assert_eq!(dropped, token, "dropped inside the lock's scope");
    }
}

/// An acquire that times out on the client can still run on the server
/// later: a release of that acquisition follows it, so the lock is not left
/// held by an owner that gave up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_that_times_out_is_followed_by_its_release() {
    let server = support::RedisServer::start();
    let client = lock_runtime::LockClient::builder()
        .command_timeout(Duration::from_millis(300))
        .connect(&server.url())
        .await
        .expect("connect");
    // Once first, so that the server knows the script: the late acquire
    // then runs instead of failing with NOSCRIPT.
    let warm = LockOptions::new();
    client
        .run_locked("late", warm, async { Ok::<_, LockError>(()) })
        .await
        .expect("warm-up");
    let paused = server.pause();
    let options = LockOptions::new().lease(Duration::from_secs(30));
    let result = client
        .run_locked("late", options, async { Ok::<_, LockError>(()) })
        .await;
    assert!(
        matches!(result, Err(LockError::Backend { .. })),
        "{result:?}"
    );
    // The acquire, queued in the socket, runs when the server thaws.
    paused.resume();
    let freed = support::eventually(Duration::from_secs(5), || {
        server.owners("lock:late").is_empty()
    })
    .await;
    assert!(freed, "still held: {:?}", server.lock_value("lock:late"));
}
