use lock_runtime::{distributed_lock, LockError};

#[distributed_lock(key = "account:<from>", keys = ["account:<from>", "account:<to>"])]
async fn key_first(from: u64, to: u64) -> Result<u64, LockError> {
    Ok(from + to)
}

#[distributed_lock(keys = ["account:<from>", "account:<to>"], key = "account:<from>")]
async fn keys_first(from: u64, to: u64) -> Result<u64, LockError> {
    Ok(from + to)
}

fn main() {}
