//! A redis-server of the bench's own, on a loopback port, in a temporary
//! directory, stopped by its pid.

use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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
        let child = Command::new("redis-server")
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
                format!("cannot start redis-server (apt-get install redis-server): {e}")
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
