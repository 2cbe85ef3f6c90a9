use lock_runtime::{distributed_lock, LockError};

struct Id(u64);

#[distributed_lock(keys = ["account:<from>", "account:<to>"])]
async fn transfer(from: u64, to: Id) -> Result<u64, LockError> {
    Ok(from + to.0)
}

fn main() {}
