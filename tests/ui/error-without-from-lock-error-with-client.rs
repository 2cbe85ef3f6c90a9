use lock_runtime::{distributed_lock, LockClient};

#[derive(Debug)]
struct AppError;

struct Service {
    locks: LockClient,
}

impl Service {
    #[distributed_lock(key = "order:<id>", client = &self.locks)]
    async fn deduct(&self, id: u64) -> Result<u64, AppError> {
        Ok(id)
    }
}

fn main() {}
