use lock_runtime::distributed_lock;

// An error type with a `From` impl of its own, but not `From<LockError>`.
#[derive(Debug)]
enum AppError {
    Io(std::io::Error),
}

impl From<std::io::Error> for AppError {
    fn from(e: std::io::Error) -> Self {
        AppError::Io(e)
    }
}

#[distributed_lock(key = "report:<day>")]
async fn build_report(day: u32) -> Result<String, AppError> {
    let text = std::fs::read_to_string(format!("{day}.txt"))?;
    Ok(text)
}

fn main() {}
