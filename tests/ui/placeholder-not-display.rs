use lock_runtime::{distributed_lock, LockError};

#[derive(Debug)]
struct AppError;

impl From<LockError> for AppError {
    fn from(_: LockError) -> Self {
        AppError
    }
}

struct Id(u64);

#[distributed_lock(key = "order:<id>")]
async fn deduct(id: Id) -> Result<u64, AppError> {
    Ok(id.0)
}

fn main() {}
