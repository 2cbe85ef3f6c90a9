use lock_runtime::{distributed_lock, LockError};

#[derive(Debug)]
struct AppError;

impl From<LockError> for AppError {
    fn from(_: LockError) -> Self {
        AppError
    }
}

#[distributed_lock(key = "doc:<id>", mode = "read", fair = true)]
async fn mode_first(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

#[distributed_lock(key = "doc:<id>", fair = true, mode = "write")]
async fn fair_first(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

fn main() {}
