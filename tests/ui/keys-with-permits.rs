use lock_runtime::{distributed_lock, LockError};

#[distributed_lock(keys = ["stock:<a>", "stock:<b>"], permits = 4)]
async fn keys_first(a: u64, b: u64) -> Result<u64, LockError> {
    Ok(a + b)
}

#[distributed_lock(permits = 4, keys = ["stock:<a>", "stock:<b>"])]
async fn permits_first(a: u64, b: u64) -> Result<u64, LockError> {
    Ok(a + b)
}

fn main() {}
