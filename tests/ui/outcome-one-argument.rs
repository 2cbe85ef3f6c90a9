use lock_runtime::{distributed_lock, Outcome};

#[distributed_lock(key = "job:<id>")]
async fn run(id: u64) -> Outcome<u64> {
    Ok(id)
}

fn main() {}
