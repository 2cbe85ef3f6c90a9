use lock_runtime::{distributed_lock, LockError};

#[derive(Debug)]
struct AppError;

impl From<LockError> for AppError {
    fn from(_: LockError) -> Self {
        AppError
    }
}

#[distributed_lock(key = "partner-api", permits = 0)]
async fn deduct(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

fn main() {}
