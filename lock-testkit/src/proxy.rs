//! A freezable loopback TCP proxy: a connection that stalls without a reset
//! (a partition that drops packets, a hung proxy), or is cut.
//!
//! Std threads only: one accept thread, and per connection two pump
//! threads (client to target, target to client). Every wait is bounded and
//! checks the proxy's stop flag at least every 100 ms, so that a drop
//! returns promptly.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// How long the accept thread sleeps when no connection is pending.
const ACCEPT_POLL: Duration = Duration::from_millis(10);
/// The read timeout of both sockets of a connection: how often a pump that
/// waits for bytes looks at the stop flag.
const READ_TIMEOUT: Duration = Duration::from_millis(50);
/// The write timeout of both sockets of a connection: how long one write
/// call may block on a peer that does not read.
const WRITE_TIMEOUT: Duration = Duration::from_millis(100);
/// How long one wait on the frozen flag lasts before the stop flag is
/// looked at again.
const WAIT_SLICE: Duration = Duration::from_millis(50);
/// How long one attempt to connect to the target may take.
const CONNECT_ATTEMPT: Duration = Duration::from_millis(100);
/// How long the attempts to connect to the target may take in all.
const CONNECT_LIMIT: Duration = Duration::from_secs(2);
/// The size of a pump's buffer: the most bytes one direction of a
/// connection holds while frozen (the kernel's buffers hold the rest).
const BUF_SIZE: usize = 16 * 1024;

/// A TCP proxy on a loopback port that forwards every connection to one
/// loopback target, and can be frozen, thawed and cut.
///
/// [`Proxy::freeze`] stalls every connection without closing or resetting
/// it: the proxy stops moving bytes in both directions, and holds what it
/// reads until [`Proxy::thaw`], which forwards the held bytes in order and
/// resumes. Connections accepted while frozen are frozen too.
/// [`Proxy::cut`] closes every current connection. Dropping the proxy stops
/// its threads and closes its listener and every connection; it returns
/// within a few hundred milliseconds.
///
/// ```no_run
/// # fn main() -> std::io::Result<()> {
/// let server = lock_testkit::Server::tcp(&[]);
/// let target: std::net::SocketAddr = ([127, 0, 0, 1], server.port()).into();
/// let proxy = lock_testkit::Proxy::start(target)?;
/// let url = format!("redis://{}/", proxy.addr());
/// // ... connect a client to `url` ...
/// proxy.freeze(); // the client's calls now stall: no reply, no reset
/// proxy.thaw(); // held requests go through, in order
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Listens on 127.0.0.1 on a free port and forwards every connection
    /// to `target` (a loopback address; any other is refused with
    /// [`io::ErrorKind::InvalidInput`]).
    ///
    /// The connection to the target is made when the client's connection
    /// is accepted, or at [`Proxy::thaw`] if the proxy is frozen then. If
    /// the target cannot be reached, the client's connection is closed.
    pub fn start(target: SocketAddr) -> io::Result<Proxy> {
        if !target.ip().is_loopback() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("the proxy's target {target} is not a loopback address"),
            ));
        }
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            target,
            state: Mutex::new(State {
                frozen: false,
                moving: 0,
            }),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
            accepted: AtomicUsize::new(0),
            conns: Mutex::new(Vec::new()),
            threads: Mutex::new(Vec::new()),
        });
        let accept = {
            let shared = Arc::clone(&shared);
            thread::Builder::new()
                .name("testkit-proxy-accept".into())
                .spawn(move || shared.accept_loop(&listener))?
        };
        Ok(Proxy {
            addr,
            shared,
            accept: Some(accept),
        })
    }

    /// The address clients connect to (127.0.0.1 and [`Proxy::port`]).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The port clients connect to, on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Stalls every connection, current and new, until [`Proxy::thaw`]:
    /// the proxy moves no byte in either direction, passes on no close, and
    /// connects no new connection to the target. Nothing is closed or
    /// reset: the clients' writes still succeed (the proxy reads and holds
    /// up to one buffer per direction, the kernel buffers the rest) and
    /// their reads wait.
    ///
    /// Returns once no forwarding is under way (at most about 100 ms, one
    /// write's timeout): after it returns, nothing more moves. Bytes the
    /// proxy had written before are in the kernel and still arrive.
    pub fn freeze(&self) {
        let mut state = lock(&self.shared.state);
        state.frozen = true;
        while state.moving > 0 {
            state = self.shared.wait(state);
        }
    }

    /// Resumes forwarding: the bytes (and closes) held while frozen go
    /// through first, in order, then everything as before. Does nothing if
    /// the proxy is not frozen.
    pub fn thaw(&self) {
        lock(&self.shared.state).frozen = false;
        self.shared.changed.notify_all();
    }

    /// Whether the proxy is frozen ([`Proxy::freeze`] was called, and
    /// [`Proxy::thaw`] not since).
    pub fn is_frozen(&self) -> bool {
        lock(&self.shared.state).frozen
    }

    /// Closes every current connection, both sides (a shutdown of both
    /// directions of the client's and of the target's socket: their peers
    /// read EOF), frozen or not; bytes held for them are dropped. The proxy
    /// goes on accepting new connections.
    pub fn cut(&self) {
        self.shared.close_all();
    }

    /// Drops every answer on the current connections from now on, while
    /// their requests still go through: the server runs each request, and
    /// its answer is lost on the way back (the client sees a timeout, not
    /// a reset). Connections accepted later are not muted.
    pub fn mute_answers(&self) {
        for conn in lock(&self.shared.conns).iter() {
            conn.muted.store(true, Ordering::SeqCst);
        }
    }

    /// How many connections the proxy has accepted so far (cut, closed and
    /// frozen ones included).
    pub fn connections(&self) -> usize {
        self.shared.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    /// Stops the accept thread and every pump thread, and closes the
    /// listener and every connection (both sides); bounded, a few hundred
    /// milliseconds at most.
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.changed.notify_all();
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
        // No connection is added once the accept thread has ended.
        self.shared.close_all();
        let threads = std::mem::take(&mut *lock(&self.shared.threads));
        for thread in threads {
            let _ = thread.join();
        }
    }
}

/// What the proxy's threads share.
#[derive(Debug)]
struct Shared {
    /// Where connections are forwarded.
    target: SocketAddr,
    /// Frozen or not, and how many forwardings are under way.
    state: Mutex<State>,
    /// Notified when `state` changes, and on stop.
    changed: Condvar,
    /// Set by the drop: every thread ends.
    stop: AtomicBool,
    /// Connections accepted so far.
    accepted: AtomicUsize,
    /// The open connections.
    conns: Mutex<Vec<Arc<Conn>>>,
    /// One thread per connection (it runs one pump and joins the other).
    threads: Mutex<Vec<JoinHandle<()>>>,
}

/// The proxy's frozen flag.
#[derive(Debug)]
struct State {
    /// Whether nothing may move.
    frozen: bool,
    /// How many forwardings (a write, a passed-on close, a connect to the
    /// target) are under way; [`Proxy::freeze`] waits for none.
    moving: usize,
}

/// One proxied connection.
#[derive(Debug)]
struct Conn {
    /// The accepted socket.
    client: TcpStream,
    /// The socket to the target, once connected.
    upstream: OnceLock<TcpStream>,
    /// Set by [`Conn::close`]; its pumps end.
    closed: AtomicBool,
    /// Orders [`Conn::close`] and [`Conn::set_upstream`].
    closing: Mutex<()>,
    /// Set by [`Proxy::mute_answers`]: the bytes from the target are
    /// dropped.
    muted: AtomicBool,
}

impl Shared {
    /// Whether the proxy is being dropped.
    fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// One bounded wait for a change of `state`.
    fn wait<'a>(&self, state: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.changed
            .wait_timeout(state, WAIT_SLICE)
            .unwrap_or_else(PoisonError::into_inner)
            .0
    }

    /// Runs `f` (one forwarding step, bounded in time) once the proxy is
    /// not frozen; `None`, without running it, if the proxy stops or `conn`
    /// is closed first.
    fn forward<R>(&self, conn: &Conn, f: impl FnOnce() -> R) -> Option<R> {
        let mut state = lock(&self.state);
        loop {
            if self.stopping() || conn.is_closed() {
                return None;
            }
            if !state.frozen {
                break;
            }
            state = self.wait(state);
        }
        state.moving += 1;
        drop(state);
        let _moving = Moving(self);
        Some(f())
    }

    /// Accepts connections until the proxy stops.
    fn accept_loop(self: &Arc<Self>, listener: &TcpListener) {
        while !self.stopping() {
            match listener.accept() {
                Ok((client, _)) => self.admit(client),
                // None pending, or a transient error (out of descriptors,
                // a connection aborted before its accept).
                Err(_) => thread::sleep(ACCEPT_POLL),
            }
        }
    }

    /// Registers an accepted connection and starts its thread.
    fn admit(self: &Arc<Self>, client: TcpStream) {
        self.accepted.fetch_add(1, Ordering::SeqCst);
        let Ok(conn) = Conn::new(client) else {
            return;
        };
        let conn = Arc::new(conn);
        lock(&self.conns).push(Arc::clone(&conn));
        let spawned = {
            let shared = Arc::clone(self);
            let conn = Arc::clone(&conn);
            thread::Builder::new()
                .name("testkit-proxy-conn".into())
                .spawn(move || shared.serve(&conn))
        };
        match spawned {
            Ok(thread) => {
                let mut threads = lock(&self.threads);
                threads.retain(|t| !t.is_finished());
                threads.push(thread);
            }
            Err(_) => self.finish(&conn),
        }
    }

    /// A connection's thread: connects to the target (once not frozen),
    /// pumps client to target while a second thread pumps target to client,
    /// then closes the connection.
    fn serve(self: &Arc<Self>, conn: &Arc<Conn>) {
        if let Some(upstream) = self.connect(conn) {
            if conn.set_upstream(upstream) {
                let back = {
                    let shared = Arc::clone(self);
                    let conn = Arc::clone(conn);
                    thread::Builder::new()
                        .name("testkit-proxy-pump".into())
                        .spawn(move || {
                            if let Some(upstream) = conn.upstream.get() {
                                shared.pump(&conn, upstream, &conn.client);
                            }
                        })
                };
                if let (Ok(back), Some(upstream)) = (back, conn.upstream.get()) {
                    self.pump(conn, &conn.client, upstream);
                    let _ = back.join();
                }
            }
        }
        self.finish(conn);
    }

    /// A socket to the target, configured like the client's; `None` if the
    /// target cannot be reached, the proxy stops or `conn` is closed.
    fn connect(&self, conn: &Conn) -> Option<TcpStream> {
        let deadline = Instant::now() + CONNECT_LIMIT;
        loop {
            match self.forward(conn, || {
                TcpStream::connect_timeout(&self.target, CONNECT_ATTEMPT)
            })? {
                Ok(upstream) => return configure(upstream).ok(),
                Err(e) if is_timeout(&e) && Instant::now() < deadline => {}
                Err(_) => return None,
            }
        }
    }

    /// Moves bytes from `src` to `dst` until EOF, an error, the close of
    /// `conn` or the stop of the proxy; holds them while frozen. An EOF is
    /// passed on as a shutdown of `dst`'s write side, an error as a close
    /// of the connection (both once not frozen).
    fn pump(&self, conn: &Conn, mut src: &TcpStream, dst: &TcpStream) {
        let mut buf = vec![0u8; BUF_SIZE];
        loop {
            if self.stopping() || conn.is_closed() {
                return;
            }
            let n = match src.read(&mut buf) {
                Ok(n) => n,
                Err(e) if is_timeout(&e) => continue,
                Err(_) => {
                    self.forward(conn, || conn.close());
                    return;
                }
            };
            if n == 0 {
                self.forward(conn, || dst.shutdown(Shutdown::Write));
                return;
            }
            let answers = std::ptr::eq(dst, &conn.client);
            if answers && conn.muted.load(Ordering::SeqCst) {
                continue;
            }
            if !self.write_all(conn, dst, &buf[..n]) {
                conn.close();
                return;
            }
        }
    }

    /// Writes `data` to `dst`, one bounded write at a time, each once the
    /// proxy is not frozen; whether all of it was written.
    fn write_all(&self, conn: &Conn, dst: &TcpStream, mut data: &[u8]) -> bool {
        while !data.is_empty() {
            let written = self.forward(conn, || {
                let mut dst = dst;
                dst.write(data)
            });
            match written {
                Some(Ok(n)) if n > 0 => data = &data[n..],
                Some(Err(e)) if is_timeout(&e) => {}
                // Closed, stopped, a peer gone.
                _ => return false,
            }
        }
        true
    }

    /// Closes `conn` and forgets it.
    fn finish(&self, conn: &Arc<Conn>) {
        conn.close();
        lock(&self.conns).retain(|c| !Arc::ptr_eq(c, conn));
    }

    /// Closes every open connection.
    fn close_all(&self) {
        let conns = lock(&self.conns).clone();
        for conn in conns {
            conn.close();
        }
        self.changed.notify_all();
    }
}

impl Conn {
    /// A connection of the accepted `client`, not connected to the target
    /// yet.
    fn new(client: TcpStream) -> io::Result<Conn> {
        Ok(Conn {
            client: configure(client)?,
            upstream: OnceLock::new(),
            closed: AtomicBool::new(false),
            closing: Mutex::new(()),
            muted: AtomicBool::new(false),
        })
    }

    /// Whether [`Conn::close`] was called.
    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Sets the socket to the target; false (and closes it) if the
    /// connection is closed already.
    fn set_upstream(&self, upstream: TcpStream) -> bool {
        let _closing = lock(&self.closing);
        if self.is_closed() {
            let _ = upstream.shutdown(Shutdown::Both);
            return false;
        }
        self.upstream.set(upstream).is_ok()
    }

    /// Shuts down both directions of both sockets (their descriptors are
    /// closed when the connection is dropped, after its pumps end).
    fn close(&self) {
        let _closing = lock(&self.closing);
        self.closed.store(true, Ordering::SeqCst);
        let _ = self.client.shutdown(Shutdown::Both);
        if let Some(upstream) = self.upstream.get() {
            let _ = upstream.shutdown(Shutdown::Both);
        }
    }
}

/// Ends a forwarding started by [`Shared::forward`] (also if it panics).
struct Moving<'a>(&'a Shared);

impl Drop for Moving<'_> {
    fn drop(&mut self) {
        lock(&self.0.state).moving -= 1;
        self.0.changed.notify_all();
    }
}

/// A connection's socket: blocking (an accepted socket may inherit the
/// listener's nonblocking mode), no Nagle delay, bounded reads and writes.
fn configure(stream: TcpStream) -> io::Result<TcpStream> {
    stream.set_nonblocking(false)?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(READ_TIMEOUT))?;
    stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
    Ok(stream)
}

/// Whether `e` is a timeout of a socket's read, write or connect (or an
/// interrupted call): try again.
fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// Locks `m`, also if a thread panicked while holding it.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    use crate::wait_until;

    /// A target: a loopback echo server that also reports every chunk it
    /// receives, and counts the connections it accepts.
    struct Echo {
        addr: SocketAddr,
        received: mpsc::Receiver<Vec<u8>>,
        accepted: Arc<AtomicUsize>,
    }

    impl Echo {
        fn start() -> Echo {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            let (tx, received) = mpsc::channel();
            let accepted = Arc::new(AtomicUsize::new(0));
            let count = Arc::clone(&accepted);
            thread::spawn(move || {
                for stream in listener.incoming() {
                    let Ok(mut stream) = stream else { continue };
                    count.fetch_add(1, Ordering::SeqCst);
                    let tx = tx.clone();
                    thread::spawn(move || {
                        let mut buf = [0u8; 4096];
                        loop {
                            match stream.read(&mut buf) {
                                Ok(0) | Err(_) => return,
                                Ok(n) => {
                                    let _ = tx.send(buf[..n].to_vec());
                                    if stream.write_all(&buf[..n]).is_err() {
                                        return;
                                    }
                                }
                            }
                        }
                    });
                }
            });
            Echo {
                addr,
                received,
                accepted,
            }
        }

        /// The bytes the server receives within `limit`, up to `len`.
        fn receive(&self, len: usize, limit: Duration) -> Vec<u8> {
            let deadline = Instant::now() + limit;
            let mut got = Vec::new();
            while got.len() < len {
                let left = deadline.saturating_duration_since(Instant::now());
                match self.received.recv_timeout(left) {
                    Ok(chunk) => got.extend(chunk),
                    Err(_) => break,
                }
            }
            got
        }
    }

    fn client(proxy: &Proxy) -> TcpStream {
        let stream = TcpStream::connect(proxy.addr()).unwrap();
        stream.set_nodelay(true).unwrap();
        stream
    }

    /// Reads exactly `len` bytes within 2 s.
    fn read_n(mut stream: &TcpStream, len: usize) -> Vec<u8> {
        stream
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        let mut buf = vec![0u8; len];
        stream.read_exact(&mut buf).unwrap();
        buf
    }

    /// Asserts that a read waits `limit` and times out: no byte, no EOF, no
    /// reset.
    fn assert_stalls(mut stream: &TcpStream, limit: Duration) {
        stream.set_read_timeout(Some(limit)).unwrap();
        let mut buf = [0u8; 64];
        match stream.read(&mut buf) {
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Ok(0) => panic!("EOF on a frozen connection"),
            Ok(n) => panic!("{n} bytes through a frozen proxy"),
            Err(e) => panic!("error on a frozen connection: {e}"),
        }
    }

    /// Asserts that a read ends (EOF or an error) within 2 s.
    fn assert_closed(mut stream: &TcpStream) {
        stream
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        let mut buf = [0u8; 64];
        loop {
            match stream.read(&mut buf) {
                Ok(0) => return,
                // Bytes already on their way: read on to the end.
                Ok(_) => {}
                Err(e) => {
                    assert!(!is_timeout(&e), "connection still open after 2 s");
                    return;
                }
            }
        }
    }

    /// A round trip through a connection.
    fn round_trip(mut stream: &TcpStream, echo: &Echo, msg: &[u8]) {
        stream.write_all(msg).unwrap();
        assert_eq!(read_n(stream, msg.len()), msg);
        assert_eq!(echo.receive(msg.len(), Duration::from_secs(2)), msg);
    }

    #[test]
    fn proxy_forwards_both_ways() {
        let echo = Echo::start();
        let proxy = Proxy::start(echo.addr).unwrap();
        assert_eq!(proxy.addr().ip(), Ipv4Addr::LOCALHOST);
        assert_eq!(proxy.port(), proxy.addr().port());
        assert!(!proxy.is_frozen());
        let a = client(&proxy);
        let b = client(&proxy);
        round_trip(&a, &echo, b"hello");
        round_trip(&b, &echo, b"world");
        // More than one buffer of the pump.
        let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let reader = {
            let a = a.try_clone().unwrap();
            let len = big.len();
            thread::spawn(move || read_n(&a, len))
        };
        (&a).write_all(&big).unwrap();
        assert_eq!(reader.join().unwrap(), big);
        assert_eq!(proxy.connections(), 2);
        assert_eq!(echo.accepted.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn proxy_freeze_holds_bytes_without_closing_and_thaw_delivers_them() {
        let echo = Echo::start();
        let proxy = Proxy::start(echo.addr).unwrap();
        let c = client(&proxy);
        round_trip(&c, &echo, b"before");

        proxy.freeze();
        assert!(proxy.is_frozen());
        for part in [&b"one "[..], b"two ", b"three"] {
            (&c).write_all(part).unwrap();
            thread::sleep(Duration::from_millis(20));
        }
        // Not delivered to the target, and the client's read neither gets
        // bytes nor sees the connection end.
        assert_eq!(echo.receive(1, Duration::from_millis(300)), b"");
        assert_stalls(&c, Duration::from_millis(300));
        assert!(proxy.is_frozen());

        proxy.thaw();
        assert!(!proxy.is_frozen());
        assert_eq!(read_n(&c, 13), b"one two three");
        assert_eq!(echo.receive(13, Duration::from_secs(2)), b"one two three");
        round_trip(&c, &echo, b"after");
        assert_eq!(proxy.connections(), 1);
    }

    #[test]
    fn proxy_freeze_holds_the_targets_bytes_too() {
        // A target that writes when told to.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let target = listener.local_addr().unwrap();
        let (say, said) = mpsc::channel::<&'static [u8]>();
        let server = thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            for msg in said {
                stream.write_all(msg).unwrap();
            }
        });
        let proxy = Proxy::start(target).unwrap();
        let c = client(&proxy);
        say.send(b"first").unwrap();
        assert_eq!(read_n(&c, 5), b"first");

        proxy.freeze();
        say.send(b"second").unwrap();
        assert_stalls(&c, Duration::from_millis(300));
        proxy.thaw();
        assert_eq!(read_n(&c, 6), b"second");

        drop(say);
        server.join().unwrap();
        assert_closed(&c);
    }

    #[test]
    fn proxy_connections_accepted_while_frozen_are_frozen() {
        let echo = Echo::start();
        let proxy = Proxy::start(echo.addr).unwrap();
        proxy.freeze();
        let c = client(&proxy);
        assert!(wait_until(Duration::from_secs(2), || proxy.connections() == 1));
        (&c).write_all(b"late").unwrap();
        assert_eq!(echo.receive(1, Duration::from_millis(300)), b"");
        assert_stalls(&c, Duration::from_millis(300));
        // Not even connected to the target yet.
        assert_eq!(echo.accepted.load(Ordering::SeqCst), 0);

        proxy.thaw();
        assert_eq!(read_n(&c, 4), b"late");
        assert_eq!(echo.receive(4, Duration::from_secs(2)), b"late");
        assert_eq!(echo.accepted.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn proxy_cut_closes_connections_and_keeps_accepting() {
        let echo = Echo::start();
        let proxy = Proxy::start(echo.addr).unwrap();
        let a = client(&proxy);
        round_trip(&a, &echo, b"a");
        proxy.cut();
        assert_closed(&a);

        // Frozen, with held bytes: cut too.
        let b = client(&proxy);
        round_trip(&b, &echo, b"b");
        proxy.freeze();
        (&b).write_all(b"held").unwrap();
        thread::sleep(Duration::from_millis(100));
        proxy.cut();
        assert_closed(&b);
        proxy.thaw();
        assert_eq!(echo.receive(1, Duration::from_millis(200)), b"");

        // New connections still go through.
        let c = client(&proxy);
        round_trip(&c, &echo, b"c");
        assert_eq!(proxy.connections(), 3);
    }

    #[test]
    fn proxy_passes_on_the_targets_close() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let target = listener.local_addr().unwrap();
        let server = thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            stream.write_all(b"bye").unwrap();
        });
        let proxy = Proxy::start(target).unwrap();
        let c = client(&proxy);
        server.join().unwrap();
        assert_eq!(read_n(&c, 3), b"bye");
        assert_closed(&c);
    }

    #[test]
    fn proxy_closes_a_client_whose_target_is_gone() {
        let target = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let proxy = Proxy::start(target).unwrap();
        let c = client(&proxy);
        assert_closed(&c);
    }

    #[test]
    fn proxy_drop_is_prompt_and_closes_everything() {
        let echo = Echo::start();
        let proxy = Proxy::start(echo.addr).unwrap();
        let addr = proxy.addr();
        let a = client(&proxy);
        round_trip(&a, &echo, b"a");
        proxy.freeze();
        let b = client(&proxy);
        (&a).write_all(b"held").unwrap();
        (&b).write_all(b"held").unwrap();
        assert!(wait_until(Duration::from_secs(2), || proxy.connections() == 2));
        thread::sleep(Duration::from_millis(100));

        let started = Instant::now();
        drop(proxy);
        let took = started.elapsed();
        assert!(took < Duration::from_secs(2), "drop took {took:?}");
        assert_closed(&a);
        assert_closed(&b);
        // The listener is closed: a new connection is refused (or, if the
        // port was taken again meanwhile, at least not proxied to the echo).
        if let Ok(late) = TcpStream::connect_timeout(&addr, Duration::from_millis(500)) {
            drop(late);
        }
        assert_eq!(echo.receive(1, Duration::from_millis(200)), b"");
        assert_eq!(echo.accepted.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn proxy_refuses_a_target_off_loopback() {
        let err = Proxy::start(([10, 0, 0, 1], 6379).into()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }
}
