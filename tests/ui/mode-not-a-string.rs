use lock_runtime::{distributed_lock, LockError};

#[derive(Debug)]
struct AppError;

impl From<LockError> for AppError {
    fn from(_: LockError) -> Self {
        AppError
    }
}

#[distributed_lock(key = "doc:<id>", mode = lock_runtime::LockMode::Read)]
async fn deduct(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

fn main() {}
