//! Code shared by the examples and the integration tests: an inventory whose
//! stock lives in Redis and is deducted under a distributed lock.

pub mod inventory {
    //! Stock deduction with a deliberately non-atomic read-modify-write:
    //! correct only because the lock serialises it.

    use lock_runtime::{distributed_lock, LockError};
    use redis::aio::MultiplexedConnection;

    /// Why a deduction failed.
    #[derive(Debug, thiserror::Error)]
    pub enum InventoryError {
        /// The lock was not taken, or was lost.
        #[error(transparent)]
        Lock(#[from] LockError),
        /// Redis failed while reading or writing the stock.
        #[error("stock store: {0}")]
        Store(#[from] redis::RedisError),
        /// Not enough stock left.
        #[error("out of stock: {left} left")]
        OutOfStock {
            /// What is left.
            left: u64,
        },
    }

    /// Sets the stock of `sku`.
    pub async fn set_stock(
        con: &mut MultiplexedConnection,
        sku: &str,
        stock: u64,
    ) -> Result<(), redis::RedisError> {
        redis::cmd("SET")
            .arg(format!("stock:{sku}"))
            .arg(stock)
            .query_async(con)
            .await
    }

    /// The stock of `sku`.
    pub async fn stock(
        con: &mut MultiplexedConnection,
        sku: &str,
    ) -> Result<u64, redis::RedisError> {
        let stock: Option<u64> = redis::cmd("GET")
            .arg(format!("stock:{sku}"))
            .query_async(con)
            .await?;
        Ok(stock.unwrap_or(0))
    }

    /// Takes `qty` off the stock of `sku` and returns what is left: a read,
    /// a pause, a write. Without the lock, concurrent callers would oversell.
    #[distributed_lock(key = "stock:<sku>", lease = "10s", wait = "60s")]
    pub async fn deduct(
        con: &mut MultiplexedConnection,
        sku: &str,
        qty: u64,
    ) -> Result<u64, InventoryError> {
        let left = stock(con, sku).await?;
        if left < qty {
            return Err(InventoryError::OutOfStock { left });
        }
        tokio::task::yield_now().await;
        set_stock(con, sku, left - qty).await?;
        Ok(left - qty)
    }
}
