use lock_runtime::{distributed_lock, LockError, Outcome};

#[async_trait::async_trait]
trait Ledger {
    async fn post(&self, entry: u64) -> Outcome<u64, LockError>;
}

struct Book;

#[async_trait::async_trait]
impl Ledger for Book {
    #[distributed_lock(key = "ledger:<entry>")]
    async fn post(&self, entry: u64) -> Outcome<u64, LockError> {
        Outcome::Held(Ok(entry))
    }
}

fn main() {}
