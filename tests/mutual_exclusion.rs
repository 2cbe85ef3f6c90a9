//! Mutual exclusion between tasks, and parallelism between keys.
mod support;

use std::sync::Arc;
use std::time::Duration;

use lock_runtime::{LockError, LockOptions};
use support::Counter;

on_both_backends! {
    /// 16 tasks x 20 slow increments of one counter under one lock: none lost.
    async fn tasks_on_one_key_never_overlap(env: Env) {
        let counter = Counter::new(&env, "counter").await;
        support::increment_under_lock(&env.client, &counter, "counter", (16, 20)).await;
        assert_eq!(counter.clone().get().await, 16 * 20);
    }
}

on_both_backends! {
    /// Two holders of different keys run at the same time: each waits inside
    /// its body for the other to arrive.
    async fn different_keys_run_in_parallel(env: Env) {
        let barrier = Arc::new(tokio::sync::Barrier::new(2));
        let options = LockOptions::new().wait(Duration::ZERO);
        let mut tasks = Vec::new();
        for key in ["left", "right"] {
            let client = env.client.clone();
            let barrier = barrier.clone();
            tasks.push(tokio::spawn(async move {
                client
                    .run_locked(key, options, async {
                        tokio::time::timeout(Duration::from_secs(10), barrier.wait())
                            .await
                            .expect("the other key's holder ran in parallel");
                        Ok::<_, LockError>(())
                    })
                    .await
            }));
        }
        for task in tasks {
            task.await.expect("task").expect("both locks taken at once");
        }
    }
}
