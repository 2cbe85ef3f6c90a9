use lock_runtime::{distributed_lock, LockError};

struct Path<T>(T);

// `Path(id)` binds `id`; the argument itself has no name to use.
#[distributed_lock(key = "order:<path>")]
async fn show(Path(id): Path<u64>) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
