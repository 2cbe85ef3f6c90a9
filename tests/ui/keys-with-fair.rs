use lock_runtime::{distributed_lock, LockError};

#[distributed_lock(keys = ["stock:<a>", "stock:<b>"], fair = true)]
async fn keys_first(a: u64, b: u64) -> Result<u64, LockError> {
    Ok(a + b)
}

#[distributed_lock(fair = true, keys = ["stock:<a>", "stock:<b>"])]
async fn fair_first(a: u64, b: u64) -> Result<u64, LockError> {
    Ok(a + b)
}

fn main() {}
