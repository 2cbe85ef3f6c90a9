//! Test support for replication: redis-server masters, replicas and
//! sentinels on loopback TCP ports, each with its own writable directory
//! and config file, stopped by pid.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{not_startable, server_bin, TempDir};

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("bind a loopback port")
        .port()
}

/// What a [`TcpServer`] runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Master,
    /// A replica of the master on this port.
    Replica(u16),
    /// A sentinel watching the master `m` on this port, with this quorum.
    Sentinel(u16, usize),
}

/// The name sentinels started here give the master.
pub const MASTER_NAME: &str = "m";

/// A redis-server (or sentinel) on a loopback port.
pub struct TcpServer {
    child: Option<Child>,
    dir: TempDir,
    pub port: u16,
    pub role: Role,
    /// Config lines added to the role's own.
    extra: String,
    /// The password its URL carries, if it needs one.
    password: Option<String>,
}

impl TcpServer {
    /// Starts a master.
    pub fn master() -> TcpServer {
        TcpServer::start(Role::Master)
    }

    /// Starts a replica of the master on `port` and waits until it
    /// acknowledges a write within `WAIT` (the master streams writes to a new
    /// replica only after its first acknowledgement, up to a second after
    /// the sync).
    pub fn replica_of(port: u16) -> TcpServer {
        let replica = TcpServer::start(Role::Replica(port));
        let acknowledged = || -> Option<bool> {
            let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).ok()?;
            let mut con = client
                .get_connection_with_timeout(Duration::from_secs(2))
                .ok()?;
            let _: () = redis::cmd("SET")
                .arg("support:replicated")
                .arg(1)
                .query(&mut con)
                .ok()?;
            let acked: i64 = redis::cmd("WAIT").arg(1).arg(200).query(&mut con).ok()?;
            Some(acked == 1)
        };
        let up = wait_until(Duration::from_secs(20), || acknowledged() == Some(true));
        assert!(up, "replica of {port} did not sync within 20 s");
        replica
    }

    /// Starts a sentinel watching the master on `port` as [`MASTER_NAME`],
    /// with down-after 500 ms and a failover timeout of 2 s.
    pub fn sentinel(port: u16, quorum: usize) -> TcpServer {
        TcpServer::start(Role::Sentinel(port, quorum))
    }

    fn start(role: Role) -> TcpServer {
        TcpServer::start_with(role, "", None)
    }

    /// Starts a server with `extra` config lines, reached with `password`.
    pub fn start_with(role: Role, extra: &str, password: Option<&str>) -> TcpServer {
        let mut server = TcpServer {
            child: None,
            dir: TempDir::new("tcp-redis"),
            port: free_port(),
            role,
            extra: extra.to_owned(),
            password: password.map(str::to_owned),
        };
        // The port may be taken between `free_port` and the bind, by another
        // program on the machine: then try another.
        for _ in 0..5 {
            if server.spawn() {
                return server;
            }
            server.kill();
            server.port = free_port();
        }
        panic!("redis-server did not start on a free port in 5 tries");
    }

    fn config(&self) -> String {
        let mut conf = format!(
            "port {}\nbind 127.0.0.1\ndir {}\nsave \"\"\nappendonly no\nrepl-diskless-sync-delay 0\n",
            self.port,
            self.dir.path().display()
        );
        match self.role {
            Role::Master => {}
            Role::Replica(master) => conf.push_str(&format!("replicaof 127.0.0.1 {master}\n")),
            Role::Sentinel(master, quorum) => {
                conf = format!(
                    "port {}\nbind 127.0.0.1\ndir {}\n\
                     sentinel monitor {MASTER_NAME} 127.0.0.1 {master} {quorum}\n\
                     sentinel down-after-milliseconds {MASTER_NAME} 500\n\
                     sentinel failover-timeout {MASTER_NAME} 2000\n\
                     sentinel parallel-syncs {MASTER_NAME} 1\n",
                    self.port,
                    self.dir.path().display()
                );
            }
        }
        conf.push_str(&self.extra);
        conf
    }

    /// Starts the process; whether it answers on its port as itself.
    fn spawn(&mut self) -> bool {
        let conf = self.dir.path().join("redis.conf");
        std::fs::write(&conf, self.config()).expect("write config");
        let bin = server_bin();
        let mut command = Command::new(&bin);
        command.arg(&conf);
        if matches!(self.role, Role::Sentinel(..)) {
            command.arg("--sentinel");
        }
        let child = command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", not_startable(&bin)));
        let pid = child.id();
        self.child = Some(child);
        wait_until(Duration::from_secs(10), || {
            let info = self.info("server").unwrap_or_default();
            info.contains(&format!("process_id:{pid}\r"))
        })
    }

    /// The server's URL.
    pub fn url(&self) -> String {
        match &self.password {
            Some(password) => format!("redis://:{password}@127.0.0.1:{}/", self.port),
            None => format!("redis://127.0.0.1:{}/", self.port),
        }
    }

    /// `cmd`'s answer, or `None` if the server did not give one within 2 s.
    pub fn query<T: redis::FromRedisValue>(&self, cmd: &mut redis::Cmd) -> Option<T> {
        let client = redis::Client::open(self.url()).ok()?;
        let mut con = client
            .get_connection_with_timeout(Duration::from_secs(2))
            .ok()?;
        con.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        cmd.query(&mut con).ok()
    }

    /// `INFO section`.
    pub fn info(&self, section: &str) -> Option<String> {
        self.query(redis::cmd("INFO").arg(section))
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("server running").id()
    }

    /// Kills the server (SIGKILL by pid) and waits for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freezes the server (SIGSTOP by pid) until the guard is dropped
    /// (SIGCONT), so a failing test never leaves it frozen.
    pub fn pause(&self) -> Paused {
        signal(self.pid(), "-STOP");
        Paused(self.pid())
    }
}

impl Drop for TcpServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A frozen server; resumed (SIGCONT) on drop.
pub struct Paused(u32);

impl Drop for Paused {
    fn drop(&mut self) {
        signal(self.0, "-CONT");
    }
}

fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .arg(signal)
        .arg(pid.to_string())
        .status()
        .expect("kill");
    assert!(status.success(), "kill {signal} {pid}");
}

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

/// A master, one replica and three sentinels (quorum 2) watching it.
pub struct Sentinels {
    pub master: TcpServer,
    pub replica: TcpServer,
    pub sentinels: Vec<TcpServer>,
}

impl Sentinels {
    /// Starts them all and waits until every sentinel knows the replica
    /// and the other sentinels.
    pub fn start() -> Sentinels {
        let master = TcpServer::master();
        let replica = TcpServer::replica_of(master.port);
        let sentinels: Vec<_> = (0..3)
            .map(|_| TcpServer::sentinel(master.port, 2))
            .collect();
        for sentinel in &sentinels {
            let ready = wait_until(Duration::from_secs(20), || {
                let master: Option<Vec<String>> =
                    sentinel.query(redis::cmd("SENTINEL").arg("MASTER").arg(MASTER_NAME));
                let field = |name: &str| {
                    let master = master.as_ref()?;
                    let at = master.iter().position(|f| f == name)?;
                    master.get(at + 1)?.parse::<usize>().ok()
                };
                field("num-slaves") == Some(1) && field("num-other-sentinels") == Some(2)
            });
            assert!(
                ready,
                "sentinel {} did not see its peers within 20 s",
                sentinel.port
            );
        }
        Sentinels {
            master,
            replica,
            sentinels,
        }
    }

    /// The sentinels' URLs.
    pub fn urls(&self) -> Vec<String> {
        self.sentinels.iter().map(TcpServer::url).collect()
    }

    /// The port of the master the sentinels name now.
    pub fn current_master_port(&self) -> Option<u16> {
        self.sentinels.iter().find_map(|sentinel| {
            let addr: Option<(String, u16)> = sentinel.query(
                redis::cmd("SENTINEL")
                    .arg("GET-MASTER-ADDR-BY-NAME")
                    .arg(MASTER_NAME),
            );
            addr.map(|(_, port)| port)
        })
    }
}
