//! A separate OS process for the multi-process tests.
//!
//! `stock-worker deduct <redis-url> <sku> <attempts>`: tries to deduct one
//! unit `attempts` times, then prints `sold <n>`.
//! `stock-worker hold <redis-url> <key> <lease-ms>`: takes the lock `key`
//! (renewed by the watchdog), prints `held`, then sleeps until killed
//! (at most 60 s).

use std::time::Duration;

use lock_runtime::{LockClient, LockError, LockOptions};
use lock_suite::inventory::{self, InventoryError};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [mode, url, name, n] = args.as_slice() else {
        return Err(
            "usage: stock-worker deduct|hold <redis-url> <sku|key> <attempts|lease-ms>".into(),
        );
    };
    let n: u64 = n.parse()?;
    match mode.as_str() {
        "deduct" => {
            lock_runtime::init(LockClient::connect(url).await?)?;
            let mut con = redis::Client::open(url.as_str())?
                .get_multiplexed_async_connection()
                .await?;
            let mut sold = 0;
            for _ in 0..n {
                match inventory::deduct(&mut con, name, 1).await {
                    Ok(_) => sold += 1,
                    Err(InventoryError::OutOfStock { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            println!("sold {sold}");
        }
        "hold" => {
            let client = LockClient::builder()
                .default_lease(Duration::from_millis(n))
                .connect(url)
                .await?;
            client
                .run_locked(name, LockOptions::new(), async {
                    println!("held");
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    Ok::<_, LockError>(())
                })
                .await?;
        }
        other => return Err(format!("unknown mode `{other}`").into()),
    }
    Ok(())
}
