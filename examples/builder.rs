//! A client built with its options, and what an operator can do with it:
//! inspect a lock, list the locks held, force one free, shut down.
//!
//! Runs on the embedded in-memory backend with no Redis; with `REDIS_URL`
//! set (for example `REDIS_URL=redis://127.0.0.1:6379/`) it runs against
//! that Redis.
//!
//! ```text
//! cargo run --example builder
//! ```

use std::time::Duration;

use lock_runtime::{LockClient, LockError, LockOptions};

#[tokio::main]
async fn main() -> Result<(), LockError> {
    let builder = LockClient::builder()
        // Every lock's Redis key starts with this (default "lock:").
        .key_prefix("shop:lock:")
        // For locks that do not set their own (defaults 30 s and 10 s).
        .default_lease(Duration::from_secs(15))
        .default_wait(Duration::from_secs(5))
        // Bounds on talking to Redis (defaults 5 s and 2 s).
        .connect_timeout(Duration::from_secs(3))
        .command_timeout(Duration::from_secs(1))
        // How `CLIENT LIST` and `inspect` name this process's connections
        // (default "lock-runtime:<program>@<host>:<pid>").
        .client_name("checkout-service")
        // Start even if Redis is not up yet: calls fail with a retryable
        // error until it is.
        .lazy_connect(true);
    let client = match std::env::var("REDIS_URL") {
        Ok(url) => builder.connect(&url).await?,
        Err(_) => builder.in_memory(),
    };

    // Hold one lock in a task, and look at it from outside.
    let (held_tx, held_rx) = tokio::sync::oneshot::channel();
    let holder = {
        let client = client.clone();
        tokio::spawn(async move {
            let options = LockOptions::new().lease(Duration::from_secs(30));
            client
                .run_locked("order:7", options, async {
                    let _ = held_tx.send(());
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    Ok::<_, LockError>(())
                })
                .await
        })
    };
    let _ = held_rx.await;

    let info = client.inspect("order:7").await?;
    println!("inspect: {info:#?}");
    for held in client.held() {
        println!(
            "held here: {} token {} for {:?} of a {:?} lease, renewing: {}",
            held.key, held.fencing_token, held.held_for, held.lease, held.renewing
        );
    }

    // An operator's last resort: the holder is stopped at its next renewal.
    let freed = client.force_unlock("order:7").await?;
    println!("force_unlock freed a held lock: {freed}");
    match holder.await {
        Ok(Err(error)) => println!("the holder's call ended with: {error}"),
        other => println!("the holder's call ended with: {other:?}"),
    }

    // Stop taking locks, give running bodies 5 s, release, stop.
    client.shutdown(Duration::from_secs(5)).await;
    let refused = client
        .run_locked("order:8", LockOptions::new(), async {
            Ok::<_, LockError>(())
        })
        .await;
    println!("after shutdown: {refused:?}");
    Ok(())
}
