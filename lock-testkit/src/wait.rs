//! Bounded polling.

use std::time::{Duration, Instant};

/// Polls `f` every 20 ms until it is true, up to `limit`; whether it was.
pub fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
