//! A PostgreSQL server of its own for a test: Debian's `postgresql`
//! binaries (`initdb`, `postgres`), a temporary data directory, a unix
//! socket in that directory only, run as a non-root user, stopped by pid.
//!
//! Unlike the Redis servers, the `postgres` process gets a parent-death
//! signal (SIGQUIT: PostgreSQL's immediate shutdown, which stops its
//! backends and removes its shared memory), so that a test process that
//! dies without running its drops leaves no server behind. Linux sends it
//! when the *thread* that started the server exits, not the process: start
//! a [`Postgres`] from a thread that lives as long as the server is used
//! (a test's own thread; not `spawn_blocking`, whose threads end when idle).

use std::fs::{File, OpenOptions};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::dir::TempDir;

/// How long `initdb` may take.
const INITDB_LIMIT: Duration = Duration::from_secs(120);
/// How long the server may take to accept connections.
const READY_LIMIT: Duration = Duration::from_secs(60);
/// How long an immediate shutdown may take before SIGKILL.
const STOP_LIMIT: Duration = Duration::from_secs(10);
/// The port number in the socket's name (`.s.PGSQL.5432`): the socket is
/// in the server's own directory, so no two servers share it.
const PORT: u16 = 5432;
/// The superuser `initdb` makes, whom every local connection may be
/// (`trust`): the server is reached only through its private socket.
const USER: &str = "postgres";

/// A `postgres` process of our own on a unix socket in its temporary
/// directory, stopped by its pid on drop.
#[derive(Debug)]
pub struct Postgres {
    dir: TempDir,
    child: Option<Child>,
}

impl Postgres {
    /// A new server with an empty cluster (database `postgres`, superuser
    /// `postgres`, no password); panics if it does not start.
    pub fn start() -> Postgres {
        Postgres::try_start().unwrap_or_else(|e| panic!("{e}"))
    }

    /// As [`Postgres::start`], with the reason when it does not start
    /// (binaries missing, `initdb` or the server failed: what it logged).
    pub fn try_start() -> std::io::Result<Postgres> {
        let bin = postgres_bin_dir()?;
        let dir = TempDir::try_new("postgres")?;
        let owner = run_as()?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))?;
        }
        let mut server = Postgres { dir, child: None };
        server.initdb(&bin, owner)?;
        let child = server.command(&bin, owner)?.spawn().map_err(|e| {
            std::io::Error::new(e.kind(), format!("{}: {e}", bin.join("postgres").display()))
        })?;
        server.child = Some(child);
        if let Err(e) = server.wait_ready() {
            server.stop();
            return Err(std::io::Error::other(format!(
                "{e}; postgres logged:\n{}",
                server.log()
            )));
        }
        Ok(server)
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn log_file(&self, name: &str) -> std::io::Result<File> {
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(name))
    }

    /// Makes the cluster in `data/` (as `owner`), waiting for `initdb`.
    fn initdb(&self, bin: &Path, owner: Option<(u32, u32)>) -> std::io::Result<()> {
        let log = self.log_file("initdb.log")?;
        let mut command = Command::new(bin.join("initdb"));
        command
            .arg("-D")
            .arg(self.data())
            .args(["-U", USER, "-A", "trust", "-E", "UTF8", "--locale=C"])
            .args(["--no-sync", "--no-instructions"])
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log));
        as_owner(&mut command, owner);
        let mut child = command.spawn().map_err(|e| {
            std::io::Error::new(e.kind(), format!("{}: {e}", bin.join("initdb").display()))
        })?;
        let status = wait_exit(&mut child, INITDB_LIMIT);
        let logged = std::fs::read_to_string(self.dir.path().join("initdb.log"));
        match status {
            Some(status) if status.success() => Ok(()),
            _ => Err(std::io::Error::other(format!(
                "initdb failed ({status:?}); it logged:\n{}",
                logged.unwrap_or_default()
            ))),
        }
    }

    /// The server: unix socket only, in the server's directory; no
    /// durability (a test's data dies with it).
    fn command(&self, bin: &Path, owner: Option<(u32, u32)>) -> std::io::Result<Command> {
        let log = self.log_file("postgres.log")?;
        let mut command = Command::new(bin.join("postgres"));
        command
            .arg("-D")
            .arg(self.data())
            .arg("-k")
            .arg(self.dir.path())
            .args(["-p", &PORT.to_string()])
            .args(["-c", "listen_addresses="])
            .args(["-c", "fsync=off", "-c", "synchronous_commit=off"])
            .args(["-c", "full_page_writes=off", "-c", "shared_buffers=16MB"])
            .args(["-c", "max_connections=30"])
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log));
        as_owner(&mut command, owner);
        let parent = std::process::id();
        // SAFETY: only async-signal-safe calls (prctl, getppid) between fork
        // and exec. The closure runs after the uid/gid change (which would
        // clear the signal), so the signal stays set for the exec.
        unsafe {
            command.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGQUIT) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The parent died before the signal was set: do not start.
                if u32::try_from(libc::getppid()).ok() != Some(parent) {
                    return Err(std::io::Error::other("the test process is gone"));
                }
                Ok(())
            });
        }
        Ok(command)
    }

    /// Waits until `postmaster.pid` names this process and says `ready`
    /// (as `pg_ctl` does); an error as soon as the process exits.
    fn wait_ready(&mut self) -> std::io::Result<()> {
        let deadline = Instant::now() + READY_LIMIT;
        let pid_file = self.data().join("postmaster.pid");
        while Instant::now() < deadline {
            let Some(child) = self.child.as_mut() else {
                break;
            };
            if let Ok(Some(status)) = child.try_wait() {
                return Err(std::io::Error::other(format!("postgres exited: {status}")));
            }
            let pid = child.id().to_string();
            let text = std::fs::read_to_string(&pid_file).unwrap_or_default();
            let lines: Vec<&str> = text.lines().map(str::trim).collect();
            if lines.first() == Some(&pid.as_str()) && lines.get(7) == Some(&"ready") {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(std::io::Error::other(format!(
            "postgres did not accept connections within {READY_LIMIT:?}"
        )))
    }

    /// The directory of its socket (`.s.PGSQL.5432`): the `host` of a
    /// connection.
    pub fn socket_dir(&self) -> &Path {
        self.dir.path()
    }

    /// Its connection string, `host=<socket dir> port=5432 user=postgres
    /// dbname=postgres` (libpq's key-value form, which `tokio-postgres`
    /// parses too).
    pub fn conninfo(&self) -> String {
        format!(
            "host={} port={PORT} user={USER} dbname=postgres",
            self.socket_dir().display()
        )
    }

    /// The pid of the running server (the postmaster).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// What the server wrote on stdout and stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("postgres.log")).unwrap_or_default()
    }

    /// Stops it by pid: SIGQUIT (immediate shutdown: its backends stop and
    /// its shared memory is removed), SIGKILL if it has not exited within
    /// 10 s; waits for it.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if let Ok(pid) = libc::pid_t::try_from(child.id()) {
                // SAFETY: kill(2) with the pid of our own child.
                unsafe {
                    libc::kill(pid, libc::SIGCONT);
                    libc::kill(pid, libc::SIGQUIT);
                }
            }
            // SIGKILL when it did not exit in time.
            wait_exit(&mut child, STOP_LIMIT);
        }
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Where `initdb` and `postgres` are: `LOCK_TEST_POSTGRES_BIN`, else the
/// newest `/usr/lib/postgresql/<version>/bin` that has both (Debian's
/// layout; the binaries are not on PATH there).
pub fn postgres_bin_dir() -> std::io::Result<PathBuf> {
    if let Some(dir) = std::env::var_os("LOCK_TEST_POSTGRES_BIN").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    let has_both = |bin: &Path| bin.join("initdb").is_file() && bin.join("postgres").is_file();
    let newest = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version: u32 = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            has_both(&bin).then_some((version, bin))
        })
        .max_by_key(|(version, _)| *version);
    newest.map(|(_, bin)| bin).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "no PostgreSQL server under /usr/lib/postgresql/*/bin: install the `postgresql` \
             package (scripts/test.sh installs it) or set LOCK_TEST_POSTGRES_BIN to the \
             directory of initdb and postgres",
        )
    })
}

/// The uid and gid to run the server as: `None` when this process is not
/// root (the server runs as us), else `nobody`/`nogroup` (PostgreSQL
/// refuses to run as root).
fn run_as() -> std::io::Result<Option<(u32, u32)>> {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(None);
    }
    // SAFETY: getpwnam/getgrnam with NUL-terminated names; the fields are
    // read at once, before any other call could reuse their buffers.
    let (uid, gid) = unsafe {
        let user = libc::getpwnam(c"nobody".as_ptr());
        let group = libc::getgrnam(c"nogroup".as_ptr());
        if user.is_null() {
            return Err(std::io::Error::other(
                "running as root, and there is no user `nobody` to run PostgreSQL as",
            ));
        }
        let gid = if group.is_null() {
            (*user).pw_gid
        } else {
            (*group).gr_gid
        };
        ((*user).pw_uid, gid)
    };
    Ok(Some((uid, gid)))
}

fn as_owner(command: &mut Command, owner: Option<(u32, u32)>) {
    if let Some((uid, gid)) = owner {
        command.uid(uid).gid(gid);
    }
}

/// Waits up to `limit` for `child` to exit; its status, or `None` (still
/// running: killed and reaped).
fn wait_exit(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}
