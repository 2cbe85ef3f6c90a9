//! The embedded backend's cost per script, by hand: acquire and release
//! through the test door, on one thread.
use std::time::Instant;

fn main() {
    let keyspace = lock_runtime::EmbeddedKeyspace::new();
    let mut con = keyspace.connection();
    let acquire = redis::Script::new(lock_runtime::__private::script_source("acquire").unwrap());
    let release = redis::Script::new(lock_runtime::__private::script_source("release").unwrap());
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    let start = Instant::now();
    for _ in 0..n {
        let token: i64 = acquire
            .key("k")
            .arg("o:1")
            .arg(30_000)
            .invoke(&mut con)
            .unwrap();
        let _: i64 = release
            .key("k")
            .arg("o:1")
            .arg("c")
            .arg(token)
            .invoke(&mut con)
            .unwrap();
    }
    let per = start.elapsed().as_secs_f64() * 1e6 / n as f64;
    println!("{per:.2} µs per pair of scripts");
}
