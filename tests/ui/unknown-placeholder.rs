use lock_runtime::{distributed_lock, LockError};

#[derive(Debug)]
struct AppError;

impl From<LockError> for AppError {
    fn from(_: LockError) -> Self {
        AppError
    }
}

#[distributed_lock(key = "order:<order_id>")]
async fn deduct(id: u64, qty: u32) -> Result<u32, AppError> {
    Ok(qty + id as u32)
}

fn main() {}
