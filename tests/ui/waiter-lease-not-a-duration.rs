use lock_runtime::{distributed_lock, LockError};

const WAITER_LEASE_SECS: u64 = 2;

#[distributed_lock(key = "order:<id>", fair = true, waiter_lease = WAITER_LEASE_SECS)]
async fn deduct(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
