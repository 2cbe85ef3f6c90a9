//! A client driven by the application's runtime (`on_current_runtime`)
//! behaves like one with its own thread.
mod support;

use std::time::Duration;

use lock_runtime::{LockClient, LockError, LockOptions};
use support::{Counter, Env, Kind, RedisServer};

#[tokio::test(flavor = "current_thread")]
async fn exclusion_renewal_and_wake_up_on_the_current_runtime() {
    let server = RedisServer::start();
    let client = LockClient::builder()
        .on_current_runtime()
        .default_lease(Duration::from_millis(300))
        .connect(&server.url())
        .await
        .expect("connect");
    let env = Env {
        kind: Kind::Redis,
        client: client.clone(),
        server: Some(server),
    };

    // Tasks on one key never overlap.
    let counter = Counter::new(&env, "counter").await;
    support::increment_under_lock(&client, &counter, "counter", (8, 10)).await;
    assert_eq!(counter.clone().get().await, 80);

    // The watchdog, on this runtime, keeps a 300 ms lease for a second.
    client
        .run_locked("long", LockOptions::new(), async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            assert!(env.is_locked("lock:long").await);
            Ok::<_, LockError>(())
        })
        .await
        .expect("held throughout");
}
