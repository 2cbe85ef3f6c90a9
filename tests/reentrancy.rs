//! Nested locked calls in one body re-enter; other owners do not.
mod support;

use std::time::Duration;

use lock_runtime::{LockError, LockOptions};

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
                assert!(matches!(result, Err(LockError::Timeout { .. })), "{result:?}");
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
