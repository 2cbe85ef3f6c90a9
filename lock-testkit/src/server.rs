//! One redis-server process (or sentinel): how it is started, how it is
//! reached, and how it is frozen, stopped and started again, by its pid.

use std::fs::OpenOptions;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::binaries::{not_startable, server_bin};
use crate::dir::TempDir;
use crate::ports::{free_cluster_port, free_port};
use crate::tls::Certs;

/// How long one start may take before it is tried again.
const TRY_LIMIT: Duration = Duration::from_secs(10);
/// How long a start may take in all, tries included.
const START_LIMIT: Duration = Duration::from_secs(30);
/// How many times a start is tried (a port taken between its choice and
/// the bind, a slow start on a loaded machine).
const START_TRIES: usize = 50;

/// Where a server listens.
#[derive(Debug, Clone)]
enum Listen {
    /// A loopback TCP port.
    Tcp,
    /// A loopback TLS port only, with these certificate, key and CA files.
    Tls([PathBuf; 3]),
    /// A unix socket in its directory only (`--port 0`).
    Unix,
}

/// Which port a TCP server takes.
#[derive(Debug, Clone, Copy)]
enum Port {
    /// Any free port; another one if it turns out taken.
    Free,
    /// A free port whose cluster bus port is free too.
    FreeCluster,
    /// This one.
    Fixed(u16),
}

/// What a [`Server`] runs: its listener, options and directory. Built with
/// [`ServerOptions::tcp`], [`ServerOptions::unix`] or
/// [`ServerOptions::tls`], then the setters; [`ServerOptions::start`]
/// starts it.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    listen: Listen,
    port: Port,
    args: Vec<String>,
    config: String,
    sentinel: bool,
    password: Option<String>,
    dir: Option<PathBuf>,
}

impl ServerOptions {
    fn new(listen: Listen) -> ServerOptions {
        ServerOptions {
            listen,
            port: Port::Free,
            args: Vec::new(),
            config: String::new(),
            sentinel: false,
            password: None,
            dir: None,
        }
    }

    /// A server on a free loopback TCP port.
    pub fn tcp() -> ServerOptions {
        ServerOptions::new(Listen::Tcp)
    }

    /// A server on a unix socket (`redis.sock` in its directory) only.
    pub fn unix() -> ServerOptions {
        ServerOptions::new(Listen::Unix)
    }

    /// A server on a free loopback TLS port only (`--port 0`), with the
    /// server certificate, key and CA of `certs`.
    pub fn tls(certs: &Certs) -> ServerOptions {
        let files = [
            certs.server_cert.clone(),
            certs.server_key.clone(),
            certs.ca_cert.clone(),
        ];
        ServerOptions::new(Listen::Tls(files))
    }

    /// On this TCP port rather than a free one.
    pub fn port(mut self, port: u16) -> ServerOptions {
        self.port = Port::Fixed(port);
        self
    }

    /// Command-line arguments after the standard ones (`--port`, `--bind
    /// 127.0.0.1`, `--dir`, and but for a sentinel `--save ""` and
    /// `--appendonly no`); added to those given before.
    pub fn args<S: AsRef<str>>(mut self, args: impl IntoIterator<Item = S>) -> ServerOptions {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// Lines of the config file the server starts from (`redis.conf` in its
    /// directory, written again at each start; a sentinel rewrites it);
    /// added to those given before.
    pub fn config(mut self, lines: &str) -> ServerOptions {
        self.config.push_str(lines);
        self
    }

    /// Runs it as a sentinel (`--sentinel`); its monitors go in
    /// [`ServerOptions::config`].
    pub fn sentinel(mut self) -> ServerOptions {
        self.sentinel = true;
        self
    }

    /// A cluster node (`cluster-enabled`, `nodes.conf`, this node timeout,
    /// a replica's sync without delay) on a free port whose bus port is
    /// free too.
    pub fn cluster_node(mut self, node_timeout_ms: u64) -> ServerOptions {
        self.port = Port::FreeCluster;
        let timeout = node_timeout_ms.to_string();
        self.args(["--cluster-enabled", "yes"])
            .args(["--cluster-config-file", "nodes.conf"])
            .args(["--cluster-node-timeout", timeout.as_str()])
            // A replica's first sync starts at once, not after the 5 s a
            // diskless sync waits by default for more replicas to join.
            .args(["--repl-diskless-sync-delay", "0"])
    }

    /// The password its URL and admin connections carry (the server's
    /// `requirepass` is the caller's to set).
    pub fn password(mut self, password: &str) -> ServerOptions {
        self.password = Some(password.to_owned());
        self
    }

    /// In this directory (created; left in place on drop) rather than a
    /// temporary one of its own.
    pub fn dir(mut self, dir: PathBuf) -> ServerOptions {
        self.dir = Some(dir);
        self
    }

    /// Starts the server and waits until it answers as itself (its
    /// `INFO server` names its pid; a server that wants a password the
    /// options do not give may answer with an error instead; a TLS server
    /// accepts connections). A port found taken is replaced by another
    /// free one, unless it was given.
    pub fn start(self) -> std::io::Result<Server> {
        let (temp, dir) = match &self.dir {
            Some(dir) => {
                std::fs::create_dir_all(dir)?;
                (None, dir.clone())
            }
            None => {
                let temp = TempDir::try_new("redis")?;
                let dir = temp.path().to_owned();
                (Some(temp), dir)
            }
        };
        let mut server = Server {
            port: 0,
            options: self,
            dir,
            _temp: temp,
            child: None,
        };
        server.port = server.pick_port()?;
        server.spawn(true)?;
        Ok(server)
    }
}

/// A redis-server process (or sentinel) of our own, stopped by its pid on
/// drop.
#[derive(Debug)]
pub struct Server {
    options: ServerOptions,
    port: u16,
    dir: PathBuf,
    _temp: Option<TempDir>,
    child: Option<Child>,
}

impl Server {
    /// A server on a free loopback TCP port with `args` after the standard
    /// ones; panics if it does not start.
    pub fn tcp(args: &[&str]) -> Server {
        started(ServerOptions::tcp().args(args).start())
    }

    /// A TLS-only server with the certificates of `certs` and `extra`
    /// arguments (`--tls-auth-clients yes`); panics if it does not start.
    pub fn tls(certs: &Certs, extra: &[&str]) -> Server {
        started(ServerOptions::tls(certs).args(extra).start())
    }

    fn pick_port(&self) -> std::io::Result<u16> {
        match (&self.options.listen, self.options.port) {
            (Listen::Unix, _) => Ok(0),
            (_, Port::Fixed(port)) => Ok(port),
            (_, Port::Free) => free_port(),
            (_, Port::FreeCluster) => free_cluster_port(),
        }
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("redis.sock")
    }

    fn command(&self) -> std::io::Result<Command> {
        let conf = self.dir.join("redis.conf");
        std::fs::write(&conf, &self.options.config)?;
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("server.log"))?;
        let mut command = Command::new(server_bin());
        command.arg(&conf);
        let port = self.port.to_string();
        match &self.options.listen {
            Listen::Tcp => {
                command.args(["--port", &port]);
            }
            Listen::Tls([cert, key, ca]) => {
                command.args(["--port", "0", "--tls-port", &port]);
                command.arg("--tls-cert-file").arg(cert);
                command.arg("--tls-key-file").arg(key);
                command.arg("--tls-ca-cert-file").arg(ca);
            }
            Listen::Unix => {
                command.args(["--port", "0", "--unixsocket"]);
                command.arg(self.socket()).args(["--unixsocketperm", "700"]);
            }
        }
        command
            .args(["--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(&self.dir);
        if !self.options.sentinel {
            command.args(["--save", "", "--appendonly", "no"]);
        }
        command.args(&self.options.args);
        if self.options.sentinel {
            command.arg("--sentinel");
        }
        command
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log));
        Ok(command)
    }

    /// Starts the process and waits until it answers; tries again (on
    /// another free port if `first` and the port was not given) when it
    /// found its port taken or did not answer in time. Fails at once when it
    /// exited for another reason (an option it does not have), with what it
    /// logged.
    fn spawn(&mut self, first: bool) -> std::io::Result<()> {
        let deadline = Instant::now() + START_LIMIT;
        let bin = server_bin();
        let mut logged = String::new();
        for _ in 0..START_TRIES {
            let seen = self.log().len();
            let child = self.command()?.spawn().map_err(|e| {
                std::io::Error::new(e.kind(), format!("{}: {e}", not_startable(&bin)))
            })?;
            self.child = Some(child);
            let left = deadline.saturating_duration_since(Instant::now());
            let answered = self.wait_ready(left.min(TRY_LIMIT));
            if answered {
                return Ok(());
            }
            let exited = self.child.as_mut().map(Child::try_wait);
            self.stop();
            logged = self.log().get(seen..).unwrap_or_default().to_owned();
            let port_taken = logged.contains("already in use");
            if matches!(exited, Some(Ok(Some(_)))) && !port_taken || Instant::now() >= deadline {
                break;
            }
            if first && !matches!(self.options.port, Port::Fixed(_)) {
                self.port = self.pick_port()?;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(std::io::Error::other(format!(
            "{} did not start on {}; it logged:\n{logged}",
            bin.to_string_lossy(),
            self.url(),
        )))
    }

    /// Whether the process answered within `limit` (false as soon as it
    /// exits).
    fn wait_ready(&mut self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            let Some(child) = self.child.as_mut() else {
                return false;
            };
            if !matches!(child.try_wait(), Ok(None)) {
                return false;
            }
            let pid = child.id();
            if self.answers(pid) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    fn answers(&self, pid: u32) -> bool {
        if let Listen::Tls(_) = self.options.listen {
            return TcpStream::connect(("127.0.0.1", self.port)).is_ok();
        }
        match self.admin(|con| redis::cmd("INFO").arg("server").query::<String>(con)) {
            Ok(info) => info.contains(&format!("process_id:{pid}\r")),
            // A server's error reply (NOAUTH): it is up, but cannot be
            // asked which process it is without the password. LOADING: up,
            // but not yet serving.
            Err(error) => error.code().is_some_and(|code| code != "LOADING"),
        }
    }

    /// Its TCP port (its TLS port for TLS; 0 for a unix-socket server).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its directory (config file, log, dump, socket).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Its URL: `unix://<socket>`, `redis://[:password@]127.0.0.1:<port>/`,
    /// or `rediss://127.0.0.1:<port>/` for TLS.
    pub fn url(&self) -> String {
        match (&self.options.listen, &self.options.password) {
            (Listen::Unix, _) => format!("unix://{}", self.socket().display()),
            (Listen::Tls(_), _) => format!("rediss://127.0.0.1:{}/", self.port),
            (Listen::Tcp, Some(password)) => {
                format!("redis://:{password}@127.0.0.1:{}/", self.port)
            }
            (Listen::Tcp, None) => format!("redis://127.0.0.1:{}/", self.port),
        }
    }

    /// `<scheme>://<userinfo>127.0.0.1:<port>`: a TCP URL with this scheme
    /// (`redis`, `rediss`) and user info (`user:password@`, or empty).
    pub fn url_as(&self, scheme: &str, userinfo: &str) -> String {
        format!("{scheme}://{userinfo}127.0.0.1:{}", self.port)
    }

    /// What it wrote on stdout and stderr so far (`server.log` in its
    /// directory).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    /// Runs `f` on a fresh connection to [`Server::url`] (timeouts of 2 s
    /// to connect, read and write).
    pub fn admin<T>(
        &self,
        f: impl FnOnce(&mut redis::Connection) -> redis::RedisResult<T>,
    ) -> redis::RedisResult<T> {
        let mut con =
            redis::Client::open(self.url())?.get_connection_with_timeout(Duration::from_secs(2))?;
        con.set_read_timeout(Some(Duration::from_secs(2)))?;
        con.set_write_timeout(Some(Duration::from_secs(2)))?;
        f(&mut con)
    }

    /// `cmd`'s answer, or `None` if the server did not give one within 2 s.
    pub fn query<T: redis::FromRedisValue>(&self, cmd: &mut redis::Cmd) -> Option<T> {
        self.admin(|con| cmd.query(con)).ok()
    }

    /// `INFO section`, or `None` if the server did not answer.
    pub fn info(&self, section: &str) -> Option<String> {
        self.query(redis::cmd("INFO").arg(section))
    }

    /// A plain connection to [`Server::url`], to set up or look at what the
    /// locks wrote; panics if the server does not take it.
    pub fn connection(&self) -> redis::Connection {
        connect(&self.url())
    }

    /// A plain connection as `userinfo` (`user:password@`) to
    /// [`Server::url_as`] with the `redis` scheme; panics if the server does
    /// not take it.
    pub fn connection_as(&self, userinfo: &str) -> redis::Connection {
        connect(&self.url_as("redis", userinfo))
    }

    /// How many times `command` ran, from `INFO commandstats`.
    pub fn command_calls(&self, command: &str) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut self.connection())
            .expect("INFO commandstats");
        calls_in(&info, command)
    }

    /// How many client connections the server has, this one included.
    pub fn connected_clients(&self) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("clients")
            .query(&mut self.connection())
            .expect("INFO clients");
        info.lines()
            .find_map(|line| line.strip_prefix("connected_clients:"))
            .and_then(|n| n.trim().parse().ok())
            .expect("connected_clients in INFO clients")
    }

    /// Resets `INFO commandstats` (`CONFIG RESETSTAT`).
    pub fn reset_stats(&self) {
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query(&mut self.connection())
            .expect("CONFIG RESETSTAT");
    }

    /// Writes an RDB snapshot now (`SAVE`): [`Server::restart`] with
    /// `from_dump` brings this state back.
    pub fn save(&self) -> redis::RedisResult<()> {
        self.admin(|con| redis::cmd("SAVE").query(con))
    }

    /// The pid of the running process.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether its process runs (started and not stopped).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Sends `signal` (`libc::SIGSTOP`...) to its pid; nothing if stopped.
    pub fn signal(&self, signal: libc::c_int) -> std::io::Result<()> {
        match self.pid() {
            Some(pid) => send(pid, signal),
            None => Ok(()),
        }
    }

    /// Freezes it (SIGSTOP by pid) until the guard is dropped (SIGCONT),
    /// so that a failing test never leaves it frozen; panics if it is not
    /// running.
    pub fn pause(&self) -> Paused {
        let pid = self.pid().expect("server running");
        send(pid, libc::SIGSTOP).unwrap_or_else(|e| panic!("SIGSTOP {pid}: {e}"));
        Paused(pid)
    }

    /// Stops it (SIGCONT, then SIGKILL by pid) and waits for it to exit.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // A frozen process does not die of SIGKILL before SIGCONT on
            // every kernel; thaw it first.
            let _ = send(child.id(), libc::SIGCONT);
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Listen::Unix = self.options.listen {
            let _ = std::fs::remove_file(self.socket());
        }
    }

    /// Stops it and starts it again on the same port or socket: from its
    /// last snapshot when `from_dump`, else empty (the dump is removed).
    pub fn restart(&mut self, from_dump: bool) -> std::io::Result<()> {
        self.stop();
        if !from_dump {
            let _ = std::fs::remove_file(self.dir.join("dump.rdb"));
        }
        self.spawn(false)
    }

    /// Replaces the arguments given with [`ServerOptions::args`], for its
    /// next [`Server::restart`] (a new master to replicate).
    pub fn set_args(&mut self, args: Vec<String>) {
        self.options.args = args;
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A frozen server; resumed (SIGCONT by pid) on drop.
#[must_use = "the server resumes when the guard is dropped"]
#[derive(Debug)]
pub struct Paused(u32);

impl Paused {
    /// Resumes the server now.
    pub fn resume(self) {}
}

impl Drop for Paused {
    fn drop(&mut self) {
        let _ = send(self.0, libc::SIGCONT);
    }
}

fn send(pid: u32, signal: libc::c_int) -> std::io::Result<()> {
    let pid = libc::pid_t::try_from(pid).map_err(std::io::Error::other)?;
    // SAFETY: kill(2) with a pid of a child of ours and a signal number.
    if unsafe { libc::kill(pid, signal) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn connect(url: &str) -> redis::Connection {
    redis::Client::open(url)
        .expect("url")
        .get_connection_with_timeout(Duration::from_secs(2))
        .expect("connect to the test server")
}

/// The server, or a panic that says why it did not start.
pub(crate) fn started(server: std::io::Result<Server>) -> Server {
    server.unwrap_or_else(|e| panic!("{e}"))
}

/// How many times `command` ran, read from the text of `INFO commandstats`
/// (0 when it is not there).
pub fn calls_in(info: &str, command: &str) -> u64 {
    let prefix = format!("cmdstat_{}:calls=", command.to_lowercase());
    info.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}
