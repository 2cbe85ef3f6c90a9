use lock_runtime::{distributed_lock, LockError};

#[async_trait::async_trait]
trait Ledger {
    async fn post(&self, entry: u64, pair: (u32, u32)) -> Result<u64, LockError>;
}

struct Book;

// Under async-trait the error lists the names the user wrote, patterns
// included, not async-trait's renamed arguments.
#[async_trait::async_trait]
impl Ledger for Book {
    #[distributed_lock(key = "ledger:<entry_id>")]
    async fn post(&self, entry: u64, (a, _b): (u32, u32)) -> Result<u64, LockError> {
        Ok(entry + u64::from(a))
    }
}

fn main() {}
