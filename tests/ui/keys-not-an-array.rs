use lock_runtime::{distributed_lock, LockError};

const KEYS: [&str; 2] = ["a", "b"];

#[distributed_lock(keys = "account:<from>")]
async fn a_string(from: u64) -> Result<u64, LockError> {
    Ok(from)
}

#[distributed_lock(keys = KEYS)]
async fn a_constant(from: u64) -> Result<u64, LockError> {
    Ok(from)
}

#[distributed_lock(keys = ["account:<from>", from, 7])]
async fn not_strings(from: u64) -> Result<u64, LockError> {
    Ok(from)
}

fn main() {}
