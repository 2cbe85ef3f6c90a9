//! The quickstart: a reentrant chain and tasks contending for one lock.
//!
//! Runs on the embedded in-memory backend with no Redis; with `REDIS_URL`
//! set (for example `REDIS_URL=redis://127.0.0.1:6379/`) it runs against
//! that Redis.
//!
//! ```text
//! cargo run --example quickstart
//! ```

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_runtime::{distributed_lock, LockClient, LockError};

#[derive(Debug, thiserror::Error)]
enum AppError {
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error("not enough stock: {0} left")]
    OutOfStock(u32),
}

/// The stock of one item, kept here so the example needs no store.
struct Shop {
    stock: AtomicU32,
    orders: AtomicU32,
}

impl Shop {
    /// Checks and takes stock, then records the order: a chain of locked
    /// calls on one key that re-enters instead of deadlocking.
    #[distributed_lock(key = "order:<id>", lease = "30s")]
    async fn place_order(&self, id: u64, qty: u32) -> Result<u32, AppError> {
        let left = self.deduct(id, qty).await?;
        self.record(id, qty).await?;
        Ok(left)
    }

    #[distributed_lock(key = "order:<id>", wait = "0s")]
    async fn deduct(&self, id: u64, qty: u32) -> Result<u32, AppError> {
        // A read, a pause, a write: safe only under the lock.
        let left = self.stock.load(Ordering::SeqCst);
        if left < qty {
            return Err(AppError::OutOfStock(left));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
        self.stock.store(left - qty, Ordering::SeqCst);
        Ok(left - qty)
    }

    #[distributed_lock(key = "order:<id>")]
    async fn record(&self, id: u64, qty: u32) -> Result<(), AppError> {
        let n = self.orders.fetch_add(1, Ordering::SeqCst) + 1;
        if n == 1 {
            println!("  order {id}: {qty} unit(s) recorded under the same lock");
        }
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = match std::env::var("REDIS_URL") {
        Ok(url) => {
            println!("backend: Redis at {url}");
            LockClient::connect(&url).await?
        }
        Err(_) => {
            println!("backend: in memory (set REDIS_URL to use Redis)");
            LockClient::in_memory()
        }
    };
    lock_runtime::init(client)?;

    let shop = Arc::new(Shop {
        stock: AtomicU32::new(20),
        orders: AtomicU32::new(0),
    });

    println!("1. a reentrant chain: place_order -> deduct -> record, one key");
    let left = shop.place_order(7, 3).await?;
    println!("  stock left: {left}");

    println!("2. 8 tasks contend for `order:7`, each placing up to 3 orders of 1 unit");
    let start = Instant::now();
    let mut tasks = Vec::new();
    for task in 0..8 {
        let shop = shop.clone();
        tasks.push(tokio::spawn(async move {
            let mut placed = 0;
            for _ in 0..3 {
                match shop.place_order(7, 1).await {
                    Ok(_) => placed += 1,
                    Err(AppError::OutOfStock(_)) => break,
                    Err(e) => return Err(e),
                }
            }
            println!("  task {task}: placed {placed}");
            Ok::<_, AppError>(placed)
        }));
    }
    let mut placed = 0;
    for task in tasks {
        placed += task.await??;
    }
    let left = shop.stock.load(Ordering::SeqCst);
    println!(
        "  {placed} orders in {:?}; stock left {left}; 3 + {placed} + {left} = 20: nothing oversold",
        start.elapsed()
    );
    assert_eq!(3 + placed + left, 20);
    Ok(())
}
