//! Free loopback ports.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU16, Ordering};

/// A loopback port that was free a moment ago (bind port 0, read it,
/// close).
pub fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A free loopback port whose cluster bus port (+10000) is free too, both
/// below the kernel's range for outgoing connections (32768 up), so that no
/// client takes a bus port between the check and the start. Each call of a
/// process tries the ports after the last one it gave, from a base of its
/// own (by pid), so that processes running at once seldom try the same.
pub fn free_cluster_port() -> std::io::Result<u16> {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let base = std::process::id() % 250 * 32;
    let free = |p: u16| TcpListener::bind(("127.0.0.1", p)).is_ok();
    for _ in 0..2000 {
        let next = u32::from(NEXT.fetch_add(1, Ordering::Relaxed));
        let port = 12_000 + ((base + next) % 10_000) as u16;
        if free(port) && free(port + 10_000) {
            return Ok(port);
        }
    }
    Err(std::io::Error::other(
        "no free loopback port with a free cluster bus port",
    ))
}
