//! The PostgreSQL test server: it runs as a non-root user on its own unix
//! socket, is stopped by pid, and dies with the thread that started it.

use std::os::unix::net::UnixStream;
use std::time::Duration;

use lock_testkit::{wait_until, Postgres};

/// The state letter of `pid` in `/proc/<pid>/stat` (`None`: no process).
fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

/// The real uid of `pid`, from `/proc/<pid>/status`.
fn uid(pid: u32) -> u32 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().next()?.parse().ok())
        .expect("Uid line")
}

#[test]
fn a_server_runs_unprivileged_on_its_socket_and_stops_by_pid() {
    let mut server = Postgres::start();
    let pid = server.pid().expect("running");
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        assert_ne!(uid(pid), 0, "postgres runs as a non-root user");
    }
    let socket = server.socket_dir().join(".s.PGSQL.5432");
    UnixStream::connect(&socket).expect("the socket takes a connection");
    assert!(
        server.conninfo().contains("host=/"),
        "{}",
        server.conninfo()
    );
    server.stop();
    assert_eq!(state(pid), None, "the server's process is gone");
    assert!(!socket.exists(), "the socket is removed");
}

#[test]
fn a_server_dies_with_the_thread_that_started_it() {
    let (pid, dir) = std::thread::spawn(|| {
        let server = Postgres::start();
        let found = (
            server.pid().expect("running"),
            server.socket_dir().to_owned(),
        );
        // No drop: only the parent-death signal can stop it now.
        std::mem::forget(server);
        found
    })
    .join()
    .expect("the starting thread");
    // Gone or a zombie of ours: exited either way.
    let exited = wait_until(Duration::from_secs(30), || {
        matches!(state(pid), None | Some('Z'))
    });
    // Reap it and remove what the forgotten server left.
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        if !exited {
            // SAFETY: kill(2) with the pid of our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        // SAFETY: waitpid(2) on our own child; the status is not read.
        unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
    }
    let _ = std::fs::remove_dir_all(dir);
    assert!(exited, "postgres {pid} outlived the thread that started it");
}
