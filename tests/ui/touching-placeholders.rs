use lock_runtime::{distributed_lock, LockError};

#[distributed_lock(key = "seat:<row><seat>")]
async fn book(row: u32, seat: u32) -> Result<u32, LockError> {
    Ok(row * seat)
}

fn main() {}
