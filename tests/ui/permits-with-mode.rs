use lock_runtime::{distributed_lock, LockError};

#[derive(Debug)]
struct AppError;

impl From<LockError> for AppError {
    fn from(_: LockError) -> Self {
        AppError
    }
}

#[distributed_lock(key = "doc:<id>", mode = "read", permits = 8)]
async fn mode_first(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

#[distributed_lock(key = "doc:<id>", permits = 8, mode = "write")]
async fn permits_first(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

fn main() {}
