use lock_runtime::{distributed_lock, LockError};

#[distributed_lock(key = "report", hold_at_least = "1s", permits = 2)]
async fn with_permits() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "report", fair = true, hold_at_least = "1s")]
async fn with_fair() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "report", mode = "read", hold_at_least = "1s")]
async fn with_read() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(keys = ["report:a", "report:b"], hold_at_least = "1s")]
async fn with_keys() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
