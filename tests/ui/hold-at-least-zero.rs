use lock_runtime::{distributed_lock, LockError};

#[distributed_lock(key = "report:<period>", hold_at_least = "0s")]
async fn report(period: u64) -> Result<u64, LockError> {
    Ok(period)
}

fn main() {}
