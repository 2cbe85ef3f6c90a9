use lock_runtime::{distributed_lock, LockError};

const PERIOD_SECS: u64 = 60;

#[distributed_lock(key = "report", hold_at_least = PERIOD_SECS)]
async fn report() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
