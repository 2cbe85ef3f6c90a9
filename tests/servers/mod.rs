//! Test support for deployments: redis-server processes on loopback TCP
//! ports with extra options (TLS, passwords, replication, sentinel, cluster
//! mode), certificates made with `openssl`, and the behaviour checks the
//! deployment tests share. Servers are stopped by their pid.
#![allow(dead_code)]

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_runtime::{LockClient, LockError, LockOptions};
use tokio::sync::Notify;

#[path = "../support/mod.rs"]
pub mod support;

pub use support::TempDir;

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local addr").port()
}

/// A redis-server on a loopback TCP port.
pub struct TcpServer {
    child: Option<Child>,
    pub port: u16,
    pub dir: TempDir,
}

impl TcpServer {
    /// Starts `redis-server` with `args` (after the port and directory
    /// options; `--port 0 --tls-port P` for TLS) and waits until its port
    /// accepts connections.
    pub fn start(args: &[&str]) -> TcpServer {
        TcpServer::start_on(free_port(), args, |port| {
            vec!["--port".into(), port.to_string()]
        })
    }

    /// Starts a TLS-only server on a free port with the given TLS options.
    pub fn start_tls(certs: &Certs, extra: &[&str]) -> TcpServer {
        let mut args = vec![
            "--tls-cert-file".to_owned(),
            path_str(&certs.server_cert),
            "--tls-key-file".to_owned(),
            path_str(&certs.server_key),
            "--tls-ca-cert-file".to_owned(),
            path_str(&certs.ca_cert),
        ];
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        TcpServer::start_on(free_port(), &args, |port| {
            vec![
                "--port".into(),
                "0".into(),
                "--tls-port".into(),
                port.to_string(),
            ]
        })
    }

    /// Starts `redis-server` with a config file first (sentinel mode needs
    /// one), then `args`.
    pub fn start_with_config(config: &str, args: &[&str]) -> TcpServer {
        let dir = TempDir::new("redis-tcp");
        let file = dir.path().join("server.conf");
        std::fs::write(&file, config).expect("write config");
        let port = free_port();
        let mut command = Command::new(support::server_bin());
        command
            .arg(&file)
            .args(["--port", &port.to_string()])
            .arg("--dir")
            .arg(dir.path())
            .args(args);
        TcpServer::spawn(command, port, dir)
    }

    fn start_on(port: u16, args: &[&str], ports: impl Fn(u16) -> Vec<String>) -> TcpServer {
        let dir = TempDir::new("redis-tcp");
        let mut command = Command::new(support::server_bin());
        command
            .args(ports(port))
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path())
            .args(args);
        TcpServer::spawn(command, port, dir)
    }

    fn spawn(mut command: Command, port: u16, dir: TempDir) -> TcpServer {
        let log = std::fs::File::create(dir.path().join("server.log")).expect("log file");
        let child = command
            .stdout(Stdio::from(log))
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", support::not_startable(&support::server_bin())));
        let server = TcpServer {
            child: Some(child),
            port,
            dir,
        };
        server.wait_listening();
        server
    }

    fn wait_listening(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!(
            "redis-server on port {} did not listen within 10 s; its log:\n{}",
            self.port,
            self.log()
        );
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// `redis://127.0.0.1:port` (or `rediss://` with `tls`), with `userinfo`
    /// (`user:password@`) if not empty.
    pub fn url(&self, scheme: &str, userinfo: &str) -> String {
        format!("{scheme}://{userinfo}127.0.0.1:{}", self.port)
    }

    /// A plain connection as `userinfo`, for set-up commands.
    pub fn connection(&self, userinfo: &str) -> redis::Connection {
        redis::Client::open(self.url("redis", userinfo))
            .expect("url")
            .get_connection_with_timeout(Duration::from_secs(2))
            .expect("connect to test redis")
    }
}

impl Drop for TcpServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn path_str(path: &Path) -> String {
    path.to_str().expect("utf-8 temp path").to_owned()
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate made
/// by it, and a second CA that signed neither; PEM files in a temp dir.
pub struct Certs {
    pub dir: TempDir,
    pub ca_cert: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    pub other_ca_cert: PathBuf,
}

impl Certs {
    /// Makes them with `openssl` (P-256 keys, valid for 2 days).
    pub fn generate() -> Certs {
        let dir = TempDir::new("certs");
        let at = |name: &str| dir.path().join(name);
        let certs = Certs {
            ca_cert: at("ca.crt"),
            server_cert: at("server.crt"),
            server_key: at("server.key"),
            client_cert: at("client.crt"),
            client_key: at("client.key"),
            other_ca_cert: at("other-ca.crt"),
            dir,
        };
        for ca in ["ca", "other-ca"] {
            openssl(
                certs.dir.path(),
                &[
                    "req",
                    "-x509",
                    "-newkey",
                    "ec",
                    "-pkeyopt",
                    "ec_paramgen_curve:P-256",
                    "-nodes",
                    "-days",
                    "2",
                    "-subj",
                    &format!("/CN=lock-runtime test {ca}"),
                    "-keyout",
                    &format!("{ca}.key"),
                    "-out",
                    &format!("{ca}.crt"),
                ],
            );
        }
        let server_ext = "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n";
        let client_ext = "extendedKeyUsage=clientAuth\n";
        for (name, cn, ext) in [
            ("server", "127.0.0.1", server_ext),
            ("client", "lock-runtime test client", client_ext),
        ] {
            let ext_file = certs.dir.path().join(format!("{name}.ext"));
            std::fs::write(ext_file, ext).expect("write ext");
            openssl(
                certs.dir.path(),
                &[
                    "req",
                    "-newkey",
                    "ec",
                    "-pkeyopt",
                    "ec_paramgen_curve:P-256",
                    "-nodes",
                    "-subj",
                    &format!("/CN={cn}"),
                    "-keyout",
                    &format!("{name}.key"),
                    "-out",
                    &format!("{name}.csr"),
                ],
            );
            openssl(
                certs.dir.path(),
                &[
                    "x509",
                    "-req",
                    "-in",
                    &format!("{name}.csr"),
                    "-CA",
                    "ca.crt",
                    "-CAkey",
                    "ca.key",
                    "-CAcreateserial",
                    "-days",
                    "2",
                    "-sha256",
                    "-extfile",
                    &format!("{name}.ext"),
                    "-out",
                    &format!("{name}.crt"),
                ],
            );
        }
        // redis-server runs as this user and reads the key itself.
        certs
    }

    /// The client's key certified again by the CA as an X.509 v1
    /// certificate (no extensions), which rustls refuses; its path.
    pub fn client_v1_cert(&self) -> PathBuf {
        openssl(
            self.dir.path(),
            &[
                "x509",
                "-req",
                "-in",
                "client.csr",
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-sha256",
                "-out",
                "client-v1.crt",
            ],
        );
        self.dir.path().join("client-v1.crt")
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl must be installed (scripts/test.sh installs it)");
    assert!(
        output.status.success(),
        "openssl {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// `a` holds `key` while `b` waits for it (wait 10 s, far below the 30 s
/// lease, so only a release notice can let `b` in); `a` releases; `b` gets
/// it within a few seconds of the release, then releases.
pub async fn contention_with_wakeup(a: &LockClient, b: &LockClient, key: &str) {
    let held = Arc::new(Notify::new());
    let release = Arc::new(Notify::new());
    let holder = {
        let (a, key, held, release) = (a.clone(), key.to_owned(), held.clone(), release.clone());
        tokio::spawn(async move {
            a.run_locked(&key, LockOptions::new(), async {
                held.notify_one();
                release.notified().await;
                Ok::<_, LockError>(())
            })
            .await
        })
    };
    tokio::time::timeout(Duration::from_secs(10), held.notified())
        .await
        .expect("the holder took the lock");
    let waiter = {
        let (b, key) = (b.clone(), key.to_owned());
        tokio::spawn(async move {
            let options = LockOptions::new().wait(Duration::from_secs(10));
            b.run_locked(&key, options, async { Ok::<_, LockError>(Instant::now()) })
                .await
        })
    };
    // The waiter finds the lock held (and subscribes) before the release.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiter.is_finished(),
        "the waiter got in while the lock was held"
    );
    let released = Instant::now();
    release.notify_one();
    holder
        .await
        .expect("holder task")
        .expect("the holder released its lock");
    let entered = waiter
        .await
        .expect("waiter task")
        .expect("the waiter got the lock after the release");
    assert!(
        entered.duration_since(released) < Duration::from_secs(5),
        "the waiter was not woken by the release"
    );
}
