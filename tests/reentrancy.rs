//! Nested locked calls in one body re-enter; calls run side by side on a
//! key the body holds take turns; a nested call that outlives its body
//! stops; other owners do not re-enter.
mod support;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_runtime::{HeldBy, LockError, LockOptions, LossReason};

on_both_backends! {
    async fn nested_calls_on_one_key_re_enter(env: Env) {
        let client = env.client.clone();
        let once = LockOptions::new().wait(Duration::ZERO);
        let depth = client
            .run_locked("chain", once, async {
                client
                    .run_locked("chain", once, async {
                        client
                            .run_locked("chain", once, async { Ok::<_, LockError>(3) })
                            .await
                    })
                    .await
            })
            .await;
        assert_eq!(depth.expect("re-entered"), 3);
        assert!(!env.is_locked("lock:chain").await, "released at the outermost end");
    }
}

on_both_backends! {
    async fn nested_calls_on_other_keys_take_them_too(env: Env) {
        let client = env.client.clone();
        let once = LockOptions::new().wait(Duration::ZERO);
        client
            .run_locked("outer", once, async {
                client
                    .run_locked("inner", once, async {
                        assert!(env.is_locked("lock:outer").await);
                        assert!(env.is_locked("lock:inner").await);
                        Ok::<_, LockError>(())
                    })
                    .await?;
                assert!(!env.is_locked("lock:inner").await, "inner released first");
                Ok::<_, LockError>(())
            })
            .await
            .expect("nested");
    }
}

on_both_backends! {
    /// A task spawned inside the body, and a future joined beside a locked
    /// call, are other owners: they wait like anybody else.
    async fn spawned_tasks_and_sibling_futures_are_other_owners(env: Env) {
        let client = env.client.clone();
        let once = LockOptions::new().wait(Duration::ZERO);
        client
            .run_locked("mine", once, async {
                let spawned = tokio::spawn({
                    let client = client.clone();
                    async move {
                        client.run_locked("mine", once, async { Ok::<_, LockError>(()) }).await
                    }
                });
                let result = spawned.await.expect("task");
                match &result {
                    Err(error @ LockError::Timeout { held_by, .. }) => {
                        assert_eq!(*held_by, HeldBy::ThisClient);
                        let message = error.to_string();
                        assert!(message.contains("another call of this client holds it"), "{message}");
                        assert!(message.contains("HeldBy::ThisClient"), "{message}");
                    }
                    other => panic!("{other:?}"),
                }
                Ok::<_, LockError>(())
            })
            .await
            .expect("outer");

        let (held_tx, held_rx) = tokio::sync::oneshot::channel::<()>();
        let (first, second) = tokio::join!(
            client.run_locked("sibling", once, async {
                held_tx.send(()).expect("alive");
                tokio::time::sleep(Duration::from_millis(200)).await;
                Ok::<_, LockError>(())
            }),
            async {
                held_rx.await.expect("first holds");
                client.run_locked("sibling", once, async { Ok::<_, LockError>(()) }).await
            },
        );
        first.expect("first");
        assert!(matches!(second, Err(LockError::Timeout { .. })), "{second:?}");
    }
}

/// How many sibling bodies are inside at once, and the most ever.
#[derive(Default)]
struct Inside {
    now: AtomicUsize,
    most: AtomicUsize,
}

impl Inside {
    fn enter(&self) {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
    }

    fn leave(&self) {
        self.now.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The Redis requests the server has run so far (none for memory).
fn requests(env: &support::Env) -> u64 {
    env.server.as_ref().map_or(0, |server| {
        server.command_calls("evalsha") + server.command_calls("eval")
    })
}

on_both_backends! {
    /// Two locked calls joined inside a body, on the key the body holds,
    /// run their bodies one after the other, each re-entering (same token,
    /// no round trip); a call nested inside one of them re-enters too.
    async fn siblings_on_a_held_key_take_turns(env: Env) {
        let client = env.client.clone();
        let long = LockOptions::new().wait(Duration::from_secs(5));
        let inside = Inside::default();
        let sibling = || async {
            inside.enter();
            // Pending a few times: the other sibling is polled meanwhile.
            for _ in 0..5 {
                tokio::task::yield_now().await;
            }
            let nested = client
                .run_locked("held", LockOptions::new().wait(Duration::ZERO), async {
                    Ok::<_, LockError>(lock_runtime::fencing_token())
                })
                .await?;
            inside.leave();
            Ok::<_, LockError>((lock_runtime::fencing_token(), nested))
        };
        let (outer, first, second, sent) = client
            .run_locked("held", LockOptions::new(), async {
                let before = requests(&env);
                let (first, second) = tokio::join!(
                    client.run_locked("held", long, sibling()),
                    client.run_locked("held", long, sibling()),
                );
                let sent = requests(&env) - before;
                Ok::<_, LockError>((lock_runtime::fencing_token(), first, second, sent))
            })
            .await
            .expect("outer");
        assert_eq!(inside.most.load(Ordering::SeqCst), 1, "never two siblings inside");
        for (token, nested) in [first.expect("first"), second.expect("second")] {
            assert_eq!(token, outer, "a sibling re-enters the outer lock");
            assert_eq!(nested, outer, "a call nested in a sibling re-enters");
        }
        assert_eq!(sent, 0, "turns are taken in the process");
    }
}

on_both_backends! {
    /// A sibling that does not get its turn within its own `wait` fails
    /// with a timeout that says why.
    async fn a_sibling_waits_for_its_turn_up_to_its_wait(env: Env) {
        let client = env.client.clone();
        let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
        let (first, second) = client
            .run_locked("turns", LockOptions::new(), async {
                Ok::<_, LockError>(tokio::join!(
                    client.run_locked("turns", LockOptions::new(), async {
                        done_rx.await.expect("sent");
                        Ok::<_, LockError>(())
                    }),
                    async {
                        let short = LockOptions::new().wait(Duration::from_millis(100));
                        let second = client
                            .run_locked("turns", short, async { Ok::<_, LockError>(()) })
                            .await;
                        done_tx.send(()).expect("alive");
                        second
                    },
                ))
            })
            .await
            .expect("outer");
        first.expect("the first sibling ran");
        match second {
            Err(error @ LockError::Timeout { held_by, .. }) => {
                assert_eq!(held_by, HeldBy::Sibling);
                assert!(error.to_string().contains("side by side"), "{error}");
            }
            other => panic!("{other:?}"),
        }
    }
}

/// A nested locked call's future, owned, so that it can outlive its body.
type Nested = Pin<Box<dyn Future<Output = Result<(), LockError>> + Send>>;

on_both_backends! {
    /// A nested call that re-entered and then outlived the body it was made
    /// in (polled a little, then spawned after the body returned) stops at
    /// its next poll with `Lost`; its body never runs after the outer hold
    /// ended, even while another owner holds the key, and `fencing_token()`
    /// there gives `None`.
    async fn a_nested_call_that_outlives_its_body_stops(env: Env) {
        let client = env.client.clone();
        let runs = Arc::new(AtomicUsize::new(0));
        let token_at_drop = Arc::new(Mutex::new(Some(0)));
        let nested: Nested = {
            let (client, runs, token_at_drop) = (client.clone(), runs.clone(), token_at_drop.clone());
            Box::pin(async move {
                client
                    .run_locked("detached", LockOptions::new(), async move {
                        /// Records the fencing token seen when the body is dropped.
                        struct AtDrop(Arc<Mutex<Option<u64>>>);
                        impl Drop for AtDrop {
                            fn drop(&mut self) {
                                *self.0.lock().unwrap() = lock_runtime::fencing_token();
                            }
                        }
                        let _at_drop = AtDrop(token_at_drop);
                        for _ in 0..100 {
                            runs.fetch_add(1, Ordering::SeqCst);
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                        Ok(())
                    })
                    .await
            })
        };
        let nested = client
            .run_locked("detached", LockOptions::new(), async move {
                let mut nested = nested;
                let started = tokio::time::timeout(Duration::from_millis(10), &mut nested).await;
                assert!(started.is_err(), "still running");
                Ok::<_, LockError>(nested)
            })
            .await
            .expect("outer");
        let ran_inside = runs.load(Ordering::SeqCst);
        assert!(ran_inside >= 1, "the nested body started inside");

        let other = env.other_client().await;
        let holder = support::Holder::start(&other, "detached", LockOptions::new()).await;
        let detached = tokio::spawn(nested).await.expect("task");
        match detached {
            Err(LockError::Lost { reason, .. }) => assert_eq!(reason, LossReason::Detached),
            other => panic!("{other:?}"),
        }
        assert_eq!(runs.load(Ordering::SeqCst), ran_inside, "no run after the hold ended");
        assert_eq!(*token_at_drop.lock().unwrap(), None, "no token once the hold ended");
        holder.release().await.expect("the other owner kept its lock");
    }
}
