use lock_runtime::{distributed_lock, LockError};

#[derive(Debug)]
struct AppError;

impl From<LockError> for AppError {
    fn from(_: LockError) -> Self {
        AppError
    }
}

struct Partner {
    permits: usize,
}

impl Partner {
    #[distributed_lock(key = "partner-api", permits = self.permits)]
    async fn call(&self, id: u64) -> Result<u64, AppError> {
        Ok(id)
    }
}

fn main() {}
