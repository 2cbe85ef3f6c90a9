//! Redlock: one lock across independent Redis masters.
//!
//! ```text
//! REDLOCK_URLS=redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379 \
//!     cargo run --example redlock
//! ```
//!
//! Without `REDLOCK_URLS` it starts five throw-away `redis-server` processes
//! on unix sockets in a temporary directory (and stops them by pid at the
//! end), then shows the lock keep working with two of them stopped.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lock_runtime::{distributed_lock, LockClient, LockError};

#[distributed_lock(key = "report:<day>", lease = "10s", wait = "5s")]
async fn build_report(day: &str) -> Result<u64, LockError> {
    // Only one process in the whole fleet builds a given day's report.
    let token = lock_runtime::fencing_token().expect("inside the lock");
    println!("  building report {day} with fencing token {token}");
    tokio::time::sleep(Duration::from_millis(20)).await;
    Ok(token)
}

/// Five local servers, stopped by pid when dropped.
struct LocalNodes {
    dir: std::path::PathBuf,
    servers: Vec<Child>,
}

impl LocalNodes {
    fn start() -> std::io::Result<LocalNodes> {
        let dir = std::env::temp_dir().join(format!("redlock-example-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let mut servers = Vec::new();
        for i in 0..5 {
            servers.push(
                // The server binary the test suite uses, else redis-server.
                Command::new(
                    std::env::var_os("LOCK_TEST_REDIS_SERVER")
                        .filter(|bin| !bin.is_empty())
                        .unwrap_or_else(|| "redis-server".into()),
                )
                .args(["--port", "0", "--save", "", "--appendonly", "no"])
                .arg("--unixsocket")
                .arg(dir.join(format!("node{i}.sock")))
                .arg("--dir")
                .arg(&dir)
                .stdout(Stdio::null())
                .spawn()?,
            );
        }
        let nodes = LocalNodes { dir, servers };
        for url in nodes.urls() {
            let path = url.trim_start_matches("unix://").to_owned();
            let start = Instant::now();
            while !std::path::Path::new(&path).exists() && start.elapsed() < Duration::from_secs(5)
            {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        Ok(nodes)
    }

    fn urls(&self) -> Vec<String> {
        (0..5)
            .map(|i| {
                format!(
                    "unix://{}",
                    self.dir.join(format!("node{i}.sock")).display()
                )
            })
            .collect()
    }

    fn stop(&mut self, i: usize) {
        let _ = self.servers[i].kill();
        let _ = self.servers[i].wait();
    }
}

impl Drop for LocalNodes {
    fn drop(&mut self) {
        for i in 0..self.servers.len() {
            self.stop(i);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut local = None;
    let urls: Vec<String> = match std::env::var("REDLOCK_URLS") {
        Ok(urls) => urls.split(',').map(str::to_owned).collect(),
        Err(_) => {
            let nodes = LocalNodes::start()?;
            let urls = nodes.urls();
            local = Some(nodes);
            urls
        }
    };
    println!(
        "Redlock over {} nodes (a quorum is {})",
        urls.len(),
        urls.len() / 2 + 1
    );
    let refs: Vec<&str> = urls.iter().map(String::as_str).collect();
    let client = LockClient::builder()
        .node_timeout(Duration::from_millis(100))
        .redlock(&refs)
        .await?;
    lock_runtime::init(client)?;

    let first = build_report("2026-11-22").await?;
    if let Some(nodes) = local.as_mut() {
        println!("stopping 2 of the 5 nodes");
        nodes.stop(0);
        nodes.stop(3);
    }
    let second = build_report("2026-11-22").await?;
    println!("  tokens only grow: {first} < {second}: {}", first < second);
    Ok(())
}
