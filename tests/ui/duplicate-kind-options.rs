use lock_runtime::{distributed_lock, LockError};

#[derive(Debug)]
struct AppError;

impl From<LockError> for AppError {
    fn from(_: LockError) -> Self {
        AppError
    }
}

#[distributed_lock(key = "doc:<id>", mode = "read", mode = "read")]
async fn mode(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

#[distributed_lock(key = "partner-api", permits = 8, permits = 4)]
async fn permits(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

#[distributed_lock(key = "order:<id>", fair = true, fair = false)]
async fn fair(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

#[distributed_lock(key = "order:<id>", waiter_lease = "2s", waiter_lease = "3s")]
async fn waiter_lease(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

fn main() {}
