//! A TCP proxy in front of one server, switchable at run time: pass, delay
//! every chunk, black-hole (read and drop, never answer), or reset every
//! open connection.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Pass everything.
const PASS: u64 = 0;
/// Drop everything.
const BLACK_HOLE: u64 = u64::MAX;

/// The proxy's controls.
#[derive(Debug)]
pub struct Proxy {
    /// The port workers connect to.
    pub port: u16,
    /// 0: pass, `u64::MAX`: black hole, else a delay in ms per chunk.
    mode: Arc<AtomicU64>,
    /// Bumped to close every open connection.
    resets: watch::Sender<u64>,
    accept: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free loopback port, forwarding to `upstream_port`.
    pub async fn start(upstream_port: u16) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let mode = Arc::new(AtomicU64::new(PASS));
        let (resets, _) = watch::channel(0);
        let accept = tokio::spawn(accept_loop(
            listener,
            upstream_port,
            mode.clone(),
            resets.clone(),
        ));
        Ok(Proxy {
            port,
            mode,
            resets,
            accept,
        })
    }

    /// The URL for workers.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Forward everything.
    pub fn pass(&self) {
        self.mode.store(PASS, Ordering::SeqCst);
    }

    /// Delay each chunk by `ms`.
    pub fn delay(&self, ms: u64) {
        self.mode.store(ms.clamp(1, 60_000), Ordering::SeqCst);
    }

    /// Read and drop everything, answer nothing.
    pub fn black_hole(&self) {
        self.mode.store(BLACK_HOLE, Ordering::SeqCst);
    }

    /// Close every open connection now.
    pub fn reset(&self) {
        self.resets.send_modify(|n| *n += 1);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.reset();
        self.accept.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    upstream_port: u16,
    mode: Arc<AtomicU64>,
    resets: watch::Sender<u64>,
) {
    for _ in 0..1_000_000u32 {
        let Ok((client, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let mode = mode.clone();
        let reset = resets.subscribe();
        tokio::spawn(async move {
            let connect = TcpStream::connect(("127.0.0.1", upstream_port));
            let Ok(Ok(server)) = tokio::time::timeout(Duration::from_secs(1), connect).await else {
                return;
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let (cr, cw) = client.into_split();
            let (sr, sw) = server.into_split();
            let mut reset_a = reset.clone();
            let mut reset_b = reset;
            reset_a.mark_unchanged();
            reset_b.mark_unchanged();
            tokio::select! {
                _ = pump(cr, sw, mode.clone()) => {}
                _ = pump(sr, cw, mode) => {}
                _ = reset_a.changed() => {}
                _ = reset_b.changed() => {}
            }
        });
    }
}

/// Copies one direction, as the mode says, until either side closes.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mode: Arc<AtomicU64>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    for _ in 0..u32::MAX {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        match mode.load(Ordering::SeqCst) {
            PASS => {}
            BLACK_HOLE => continue,
            ms => tokio::time::sleep(Duration::from_millis(ms)).await,
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
