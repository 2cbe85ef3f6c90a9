use std::future::Future;
use std::pin::Pin;

use lock_runtime::{distributed_lock, LockError};

// Looks like an `#[async_trait]` method, but the body is not the
// `Box::pin(async move { .. })` that async-trait writes.
#[distributed_lock(key = "order:<id>")]
fn deduct(id: u64) -> Pin<Box<dyn Future<Output = Result<u64, LockError>> + Send>> {
    let future = async move { Ok(id) };
    Box::pin(future)
}

fn main() {}
