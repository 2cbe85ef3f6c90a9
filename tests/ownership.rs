//! Every acquisition is an owner of its own: two clients in one process,
//! and futures run side by side inside a body, never share a hold; re-entry
//! is decided in the process, and `fencing_token()` answers for the call's
//! own lock.
mod support;

use std::time::Duration;

use lock_runtime::{LockError, LockOptions};

const ONCE: LockOptions = LockOptions::new().wait(Duration::ZERO);

/// A nested call on client B, inside a body on client A, is not the owner of
/// B's first top-level call, although both are their client's first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_call_on_another_client_is_another_owner() {
    let env = support::Env::new(support::Kind::Redis).await;
    let a = env.client.clone();
    let b = env.other_client().await;
    let holder = support::Holder::start(&b, "shared", LockOptions::new()).await;
    let nested = a
        .run_locked("outer", ONCE, async {
            b.run_locked("shared", ONCE, async { Ok::<_, LockError>(()) })
                .await
        })
        .await;
    assert!(
        matches!(nested, Err(LockError::Timeout { .. })),
        "{nested:?}"
    );
    holder.release().await.expect("the holder kept its lock");
}

on_both_backends! {
    /// Two futures joined inside a body lock a key the body does not hold:
    /// one waits for the other.
    async fn sibling_futures_inside_a_body_exclude_each_other(env: Env) {
        let client = env.client.clone();
        let (held_tx, held_rx) = tokio::sync::oneshot::channel::<()>();
        let result = client
            .run_locked("body", ONCE, async {
                let (first, second) = tokio::join!(
                    client.run_locked("sibling", ONCE, async {
                        held_tx.send(()).expect("alive");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        Ok::<_, LockError>(())
                    }),
                    async {
                        held_rx.await.expect("first holds");
                        client.run_locked("sibling", ONCE, async { Ok::<_, LockError>(()) }).await
                    },
                );
                first.expect("first");
                Ok::<_, LockError>(second)
            })
            .await
            .expect("body");
        assert!(matches!(result, Err(LockError::Timeout { .. })), "{result:?}");
    }
}

on_both_backends! {
    /// A re-entry reaches no backend: the lease the re-entering call asks
    /// for does not cut the holder's, and the token is the holder's.
    async fn a_reentry_keeps_the_lease_and_the_token(env: Env) {
        let client = env.client.clone();
        let long = LockOptions::new().lease(Duration::from_secs(30));
        let short = LockOptions::new().lease(Duration::from_millis(300));
        client
            .run_locked("a", long, async {
                let a = lock_runtime::fencing_token();
                client
                    .run_locked("b", long, async {
                        let b = lock_runtime::fencing_token();
                        assert_ne!(a, b);
                        client
                            .run_locked("a", short, async {
                                assert_eq!(lock_runtime::fencing_token(), a, "a's own lock");
                                Ok::<_, LockError>(())
                            })
                            .await?;
                        assert_eq!(lock_runtime::fencing_token(), b);
                        Ok::<_, LockError>(())
                    })
                    .await?;
                // Longer than the re-entry's lease: the hold is still valid.
                tokio::time::sleep(Duration::from_millis(600)).await;
                if let Some(server) = &env.server {
                    let ttl: i64 = redis::cmd("PTTL")
                        .arg("lock:a")
                        .query(&mut server.connection())
                        .expect("PTTL");
                    assert!(ttl > 20_000, "{ttl}");
                }
                assert_eq!(lock_runtime::fencing_token(), a);
                Ok::<_, LockError>(())
            })
            .await
            .expect("chain");
    }
}

/// A nested call through a second client of the same Redis, on a key the
/// body holds through the first, would wait for the body's own hold: it
/// fails at once, saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_call_through_another_client_on_a_held_key_fails_at_once() {
    let env = support::Env::new(support::Kind::Redis).await;
    let a = env.client.clone();
    let b = env.other_client().await;
    let forever = LockOptions::new().wait(Duration::MAX);
    let nested = a
        .run_locked("held", ONCE, async {
            Ok::<_, LockError>(
                b.run_locked("held", forever, async { Ok::<_, LockError>(()) })
                    .await,
            )
        })
        .await
        .expect("outer");
    match nested {
        Err(LockError::Invalid { key, message, .. }) => {
            assert_eq!(key, "lock:held");
            assert!(message.contains("another client"), "{message}");
        }
        other => panic!("expected Invalid, got {other:?}"),
    }
    // Another Redis: nothing to tell, so the call is an ordinary acquire.
    let elsewhere = support::Env::new(support::Kind::Redis).await;
    let c = elsewhere.client.clone();
    a.run_locked("held", ONCE, async {
        c.run_locked("held", ONCE, async { Ok::<_, LockError>(()) })
            .await
    })
    .await
    .expect("different Redis servers");
}
