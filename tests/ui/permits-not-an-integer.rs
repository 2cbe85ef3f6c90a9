use lock_runtime::{distributed_lock, LockError};

#[derive(Debug)]
struct AppError;

impl From<LockError> for AppError {
    fn from(_: LockError) -> Self {
        AppError
    }
}

#[distributed_lock(key = "partner-api", permits = "8")]
async fn quoted(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

#[distributed_lock(key = "partner-api", permits = 1.5)]
async fn fraction(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

fn main() {}
