//! redis-server processes on loopback TCP, each in its own directory,
//! stopped by pid (also on drop).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A free loopback port (bind port 0, read it, close).
pub fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A private directory, removed on drop.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// A new directory under the system temp dir.
    pub fn new(tag: &str) -> std::io::Result<TempDir> {
        let path = std::env::temp_dir().join(format!(
            "lock-chaos-{tag}-{}-{}",
            std::process::id(),
            crate::clock::now_ns()
        ));
        std::fs::create_dir_all(&path)?;
        Ok(TempDir(path))
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A free loopback port whose cluster bus port (+10000) is free too, both
/// below the kernel's range for outgoing connections (32768 up), so that no
/// client takes a bus port between the check and the start.
pub fn free_cluster_port() -> std::io::Result<u16> {
    let free = |p: u16| TcpListener::bind(("127.0.0.1", p)).is_ok();
    let mut rng = crate::rng::Rng::new(crate::clock::now_ns() ^ u64::from(std::process::id()));
    for _ in 0..2000 {
        let port = 12_000 + rng.range(0, 9_999) as u16;
        if free(port) && free(port + 10_000) {
            return Ok(port);
        }
    }
    Err(std::io::Error::other("no free cluster port"))
}

/// How a [`Server`] runs: a redis-server with extra arguments, or a
/// sentinel with its config file.
#[derive(Debug, Clone)]
pub enum Flavor {
    /// redis-server with these arguments after the standard ones.
    Args(Vec<String>),
    /// A sentinel: this config text (after `port`, `bind` and `dir`) in a
    /// file of its own, run with `--sentinel`.
    Sentinel(String),
}

/// One redis-server on `127.0.0.1:port`, with its dump file in `dir`.
#[derive(Debug)]
pub struct Server {
    /// Its port.
    pub port: u16,
    dir: PathBuf,
    child: Option<Child>,
    /// How it runs (replaced before a restart as a replica of another node).
    pub flavor: Flavor,
}

impl Server {
    /// Starts a server in `dir` (created) on a free port; waits for PING.
    pub fn start(dir: PathBuf) -> std::io::Result<Server> {
        Server::start_as(dir, free_port()?, Flavor::Args(Vec::new()))
    }

    /// Starts a server of `flavor` in `dir` (created) on `port`; waits for
    /// PING.
    pub fn start_as(dir: PathBuf, port: u16, flavor: Flavor) -> std::io::Result<Server> {
        std::fs::create_dir_all(&dir)?;
        let mut server = Server {
            port,
            dir,
            child: None,
            flavor,
        };
        server.spawn()?;
        Ok(server)
    }

    fn command(&self) -> std::io::Result<Command> {
        let mut command = Command::new(server_bin());
        if let Flavor::Sentinel(conf) = &self.flavor {
            let path = self.dir.join("sentinel.conf");
            let head = format!(
                "port {}\nbind 127.0.0.1\ndir {}\n",
                self.port,
                self.dir.display()
            );
            std::fs::write(&path, head + conf)?;
            command.arg(path).arg("--sentinel");
            return Ok(command);
        }
        command
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--dbfilename", "dump.rdb"])
            .arg("--dir")
            .arg(&self.dir);
        if let Flavor::Args(args) = &self.flavor {
            command.args(args);
        }
        Ok(command)
    }

    fn spawn(&mut self) -> std::io::Result<()> {
        for _ in 0..50 {
            let child = self
                .command()?
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()?;
            self.child = Some(child);
            if self.wait_ready(Duration::from_secs(3)) {
                return Ok(());
            }
            // The port may still be taken for a moment: try again.
            self.kill();
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(std::io::Error::other(format!(
            "{} did not start",
            server_bin().to_string_lossy()
        )))
    }

    fn wait_ready(&mut self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(_)) = child.try_wait() {
                    return false;
                }
            }
            if self.admin_ping() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    fn admin_ping(&self) -> bool {
        self.admin(|con| redis::cmd("PING").query::<String>(con).map(|_| ()))
            .is_ok()
    }

    /// The URL (direct, for the harness's own admin connections).
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Runs `f` on a fresh direct connection with short timeouts.
    pub fn admin<T>(
        &self,
        f: impl FnOnce(&mut redis::Connection) -> redis::RedisResult<T>,
    ) -> redis::RedisResult<T> {
        let client = redis::Client::open(self.url())?;
        let mut con = client.get_connection_with_timeout(Duration::from_millis(500))?;
        con.set_read_timeout(Some(Duration::from_secs(2)))?;
        con.set_write_timeout(Some(Duration::from_secs(2)))?;
        f(&mut con)
    }

    /// The pid of the running process.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Sends a signal by pid.
    pub fn signal(&self, signal: libc::c_int) {
        if let Some(pid) = self.pid() {
            // SAFETY: kill(2) on the pid of our own child.
            unsafe {
                libc::kill(pid as libc::pid_t, signal);
            }
        }
    }

    /// kill -9 by pid, and reap.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// kill -9, then start again on the same port: from the dump when
    /// `from_dump`, else empty (the dump is removed first).
    pub fn restart(&mut self, from_dump: bool) -> std::io::Result<()> {
        self.kill();
        if !from_dump {
            let _ = std::fs::remove_file(self.dir.join("dump.rdb"));
        }
        self.spawn()
    }
}

impl Server {
    /// `SAVE` now (a snapshot that a later restart brings back).
    pub fn save(&self) -> redis::RedisResult<()> {
        self.admin(|con| redis::cmd("SAVE").query::<()>(con))
    }

    /// `CLIENT KILL TYPE <kind>` (normal or pubsub); how many were killed.
    pub fn client_kill(&self, kind: &str) -> redis::RedisResult<u64> {
        self.admin(|con| {
            redis::cmd("CLIENT")
                .arg("KILL")
                .arg("TYPE")
                .arg(kind)
                .query::<u64>(con)
        })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // A stopped process must be continued to die cleanly.
        self.signal(libc::SIGCONT);
        self.kill();
    }
}

/// The server binary: `LOCK_TEST_REDIS_SERVER`, or `redis-server` from
/// PATH (as the test suite picks it).
pub fn server_bin() -> std::ffi::OsString {
    bin_from_env("LOCK_TEST_REDIS_SERVER", "redis-server")
}

/// The client binary (`--cluster create`): `LOCK_TEST_REDIS_CLI`, or
/// `redis-cli` from PATH.
pub fn cli_bin() -> std::ffi::OsString {
    bin_from_env("LOCK_TEST_REDIS_CLI", "redis-cli")
}

fn bin_from_env(var: &str, default: &str) -> std::ffi::OsString {
    std::env::var_os(var)
        .filter(|value| !value.is_empty())
        .unwrap_or_else(|| default.into())
}
