use lock_runtime::{distributed_lock, LockError};

#[async_trait::async_trait]
trait Ledger {
    async fn post(&self, entry: u64) -> Result<u64, LockError>;
}

struct Book;

// Above `#[async_trait]`, the attribute would get the whole impl.
#[distributed_lock(key = "ledger:<entry>")]
#[async_trait::async_trait]
impl Ledger for Book {
    async fn post(&self, entry: u64) -> Result<u64, LockError> {
        Ok(entry)
    }
}

fn main() {}
