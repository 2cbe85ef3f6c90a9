//! A redis-server of the bench's own, on a loopback port, in a temporary
//! directory, stopped by its pid.

use std::ffi::OsString;
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The server binary the bench starts: `LOCK_TEST_REDIS_SERVER`, or
/// `redis-server` from PATH.
pub fn server_bin() -> OsString {
    bin_from_env("LOCK_TEST_REDIS_SERVER", "redis-server")
}

/// The client binary the bench runs (`--cluster create`):
/// `LOCK_TEST_REDIS_CLI`, or `redis-cli` from PATH.
pub fn cli_bin() -> OsString {
    bin_from_env("LOCK_TEST_REDIS_CLI", "redis-cli")
}

fn bin_from_env(var: &str, default: &str) -> OsString {
    std::env::var_os(var)
        .filter(|value| !value.is_empty())
        .unwrap_or_else(|| default.into())
}

pub struct Server {
    child: Child,
    dir: PathBuf,
    pub url: String,
}

impl Server {
    /// Starts `redis-server` without persistence and waits until it accepts
    /// connections (at most 10 s).
    pub fn start() -> Result<Server, String> {
        let port = {
            let probe = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|e| e.to_string())?;
            probe.local_addr().map_err(|e| e.to_string())?.port()
        };
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let dir = std::env::temp_dir().join(format!("lock-bench-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let bin = server_bin();
        let child = Command::new(&bin)
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--maxclients", "1000"])
            .arg("--dir")
            .arg(&dir)
            .arg("--logfile")
            .arg(dir.join("redis.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                format!(
                    "cannot start {} (apt-get install redis-server, or set \
                     LOCK_TEST_REDIS_SERVER): {e}",
                    bin.to_string_lossy()
                )
            })?;
        let server = Server {
            child,
            dir,
            url: format!("redis://127.0.0.1:{port}/"),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_err() {
            if Instant::now() > deadline {
                return Err("redis-server did not accept connections within 10 s".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(server)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // By pid: the child we started, nothing else.
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
