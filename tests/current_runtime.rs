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

/// A contended call on a runtime built without a timer waits on the
/// client's timer instead of panicking.
#[test]
fn a_runtime_without_a_timer_can_wait() {
    let server = RedisServer::start();
    let setup = tokio::runtime::Runtime::new().expect("runtime");
    let client = setup
        .block_on(LockClient::connect(&server.url()))
        .expect("connect");
    let holder = setup.block_on(support::Holder::start(
        &client,
        "timerless",
        LockOptions::new(),
    ));
    let no_timer = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .expect("runtime");
    let waiter = std::thread::spawn({
        let client = client.clone();
        move || {
            let options = LockOptions::new().wait(Duration::from_secs(10));
            no_timer
                .block_on(client.run_locked("timerless", options, async { Ok::<_, LockError>(()) }))
        }
    });
    std::thread::sleep(Duration::from_millis(300));
    setup.block_on(holder.release()).expect("holder");
    waiter
        .join()
        .expect("no panic")
        .expect("taken after the release");
}
