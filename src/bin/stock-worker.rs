//! A separate OS process for the multi-process tests.
//!
//! `stock-worker deduct <lock-urls> <store-url> <sku> <attempts>`: tries to
//! deduct one unit `attempts` times, then prints `sold <n>`. `lock-urls` is
//! one Redis URL, or several separated by commas for Redlock, or
//! `cluster:` and the URLs of Redis Cluster nodes separated by commas.
//!
//! `stock-worker hold <redis-url> <key> <lease-ms>`: takes the lock `key`
//! (renewed by the watchdog), prints `held`, then sleeps until killed (at
//! most 60 s).

use std::time::Duration;

use lock_runtime::{LockClient, LockError, LockOptions};
use lock_suite::inventory::{self, InventoryError};

type Error = Box<dyn std::error::Error>;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [mode, locks, store, sku, n] if mode == "deduct" => {
            deduct(locks, store, sku, n.parse()?).await
        }
        [mode, url, key, lease] if mode == "hold" => hold(url, key, lease.parse()?).await,
        _ => Err(
            "usage: stock-worker deduct <lock-urls> <store-url> <sku> <attempts> \
                  | hold <redis-url> <key> <lease-ms>"
                .into(),
        ),
    }
}

async fn deduct(locks: &str, store: &str, sku: &str, attempts: u64) -> Result<(), Error> {
    let seeds = locks.strip_prefix("cluster:");
    let urls: Vec<&str> = seeds.unwrap_or(locks).split(',').collect();
    let client = match urls.as_slice() {
        seeds if locks.starts_with("cluster:") => LockClient::cluster(seeds).await?,
        [one] => LockClient::connect(one).await?,
        many => {
            LockClient::builder()
                .node_timeout(Duration::from_millis(200))
                .redlock(many)
                .await?
        }
    };
    lock_runtime::init(client)?;
    let mut con = redis::Client::open(store)?
        .get_multiplexed_async_connection()
        .await?;
    let mut sold = 0;
    for _ in 0..attempts {
        match inventory::deduct(&mut con, sku, 1).await {
            Ok(_) => sold += 1,
            Err(InventoryError::OutOfStock { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    println!("sold {sold}");
    Ok(())
}

async fn hold(url: &str, key: &str, lease_ms: u64) -> Result<(), Error> {
    let client = LockClient::builder()
        .default_lease(Duration::from_millis(lease_ms))
        .connect(url)
        .await?;
    client
        .run_locked(key, LockOptions::new(), async {
            println!("held");
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok::<_, LockError>(())
        })
        .await?;
    Ok(())
}
