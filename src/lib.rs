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

pub mod fenced {
    //! A store that checks fencing tokens: an account balance in Redis, read
    //! and written through scripts that refuse a token smaller than the
    //! largest one they have seen. Every accepted write is logged.

    use std::sync::LazyLock;

    use redis::aio::MultiplexedConnection;
    use redis::{RedisError, Script};

    /// KEYS: token, balance. ARGV: token. Records the token; returns
    /// {1, balance}, or {0, largest token seen} when the token is stale.
    static READ: LazyLock<Script> = LazyLock::new(|| {
        Script::new(
            r"
            local seen = tonumber(redis.call('get', KEYS[1]) or '0')
            if tonumber(ARGV[1]) < seen then return {0, seen} end
            redis.call('set', KEYS[1], ARGV[1])
            return {1, tonumber(redis.call('get', KEYS[2]) or '0')}
            ",
        )
    });

    /// KEYS: token, balance, log, refused. ARGV: token, new balance, delta.
    /// Returns 1 and logs `token:delta` when accepted; 0 and counts the
    /// refusal when the token is stale.
    static WRITE: LazyLock<Script> = LazyLock::new(|| {
        Script::new(
            r"
            local seen = tonumber(redis.call('get', KEYS[1]) or '0')
            if tonumber(ARGV[1]) < seen then
              redis.call('incr', KEYS[4])
              return 0
            end
            redis.call('set', KEYS[1], ARGV[1])
            redis.call('set', KEYS[2], ARGV[2])
            redis.call('rpush', KEYS[3], ARGV[1] .. ':' .. ARGV[3])
            return 1
            ",
        )
    });

    /// One account in a fenced store.
    pub struct Account {
        con: MultiplexedConnection,
        keys: [String; 4],
    }

    impl Account {
        /// The account `name` on the store behind `con`.
        pub fn new(con: MultiplexedConnection, name: &str) -> Account {
            let keys = ["token", "balance", "log", "refused"].map(|k| format!("{name}:{k}"));
            Account { con, keys }
        }

        /// The balance, read with `token`; `None` when the token is stale.
        pub async fn read(&mut self, token: u64) -> Result<Option<u64>, RedisError> {
            let (ok, value): (i64, u64) = READ
                .key(&self.keys[0])
                .key(&self.keys[1])
                .arg(token)
                .invoke_async(&mut self.con)
                .await?;
            Ok((ok == 1).then_some(value))
        }

        /// Writes `balance` (a change of `delta`) with `token`; whether the
        /// store accepted it.
        pub async fn write(
            &mut self,
            token: u64,
            balance: u64,
            delta: i64,
        ) -> Result<bool, RedisError> {
            let accepted: i64 = WRITE
                .key(&self.keys[0])
                .key(&self.keys[1])
                .key(&self.keys[2])
                .key(&self.keys[3])
                .arg(token)
                .arg(balance)
                .arg(delta)
                .invoke_async(&mut self.con)
                .await?;
            Ok(accepted == 1)
        }

        /// The balance, read without a token.
        pub async fn balance(&mut self) -> Result<u64, RedisError> {
            let balance: Option<u64> = redis::cmd("GET")
                .arg(&self.keys[1])
                .query_async(&mut self.con)
                .await?;
            Ok(balance.unwrap_or(0))
        }

        /// The accepted writes, in order: (token, delta).
        pub async fn accepted(&mut self) -> Result<Vec<(u64, i64)>, RedisError> {
            let log: Vec<String> = redis::cmd("LRANGE")
                .arg(&self.keys[2])
                .arg(0)
                .arg(-1)
                .query_async(&mut self.con)
                .await?;
            Ok(log
                .iter()
                .filter_map(|entry| {
                    let (token, delta) = entry.split_once(':')?;
                    Some((token.parse().ok()?, delta.parse().ok()?))
                })
                .collect())
        }

        /// How many writes the store refused.
        pub async fn refused(&mut self) -> Result<u64, RedisError> {
            let refused: Option<u64> = redis::cmd("GET")
                .arg(&self.keys[3])
                .query_async(&mut self.con)
                .await?;
            Ok(refused.unwrap_or(0))
        }
    }
}
