use lock_runtime::{distributed_lock, LockError};

#[distributed_lock(key = "order:<id>", client = "redis://127.0.0.1/")]
async fn deduct(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
