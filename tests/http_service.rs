//! The example service `stock_service` as two processes on one Redis,
//! driven over HTTP on loopback: hundreds of concurrent deductions (tens at
//! once) never oversell, a lock held past the others' wait turns them into
//! 503s, and each process's `/metrics` counted what happened.
//!
//! The example's binary is the one `cargo test` builds next to this test
//! (`target/<profile>/examples/stock_service`).

mod support;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use support::RedisServer;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// Deductions of one unit in the main run, and the stock they share.
const REQUESTS: usize = 400;
const STOCK: u64 = 150;
/// Requests in flight at once.
const AT_ONCE: usize = 20;
/// Requests sent while one request holds the lock past their wait.
const BLOCKED: usize = 10;

/// The example's binary, built by `cargo test` with the examples.
fn example_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    // target/<profile>/deps/http_service-<hash> -> target/<profile>/examples/
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("a target dir");
    let binary = profile_dir
        .join("examples")
        .join(format!("stock_service{}", std::env::consts::EXE_SUFFIX));
    assert!(
        binary.exists(),
        "{} is missing: `cargo test` builds it, or run `cargo build --example stock_service`",
        binary.display()
    );
    binary
}

/// One service process, killed (by its pid) when dropped.
struct Service {
    child: Child,
    addr: SocketAddr,
    /// Kept open, so the service's later writes to stdout do not fail.
    _stdout: BufReader<tokio::process::ChildStdout>,
}

impl Service {
    async fn start(redis_url: &str) -> Service {
        let mut child = Command::new(example_binary())
            .args([redis_url, "127.0.0.1:0"])
            .env("RUST_LOG", "warn")
            // The demo knob `x-pause-ms`, which the test uses.
            .env("STOCK_DEMO_PAUSE", "1")
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start stock_service");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut line = String::new();
        let read = stdout.read_line(&mut line);
        tokio::time::timeout(Duration::from_secs(30), read)
            .await
            .expect("the service printed its address within 30 s")
            .expect("read the service's stdout");
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"));
        Service {
            child,
            addr,
            _stdout: stdout,
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// One HTTP/1.1 request (`Connection: close`): the status and the body.
async fn request(addr: SocketAddr, method: &str, path: &str, headers: &str) -> (u16, String) {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
             Content-Length: 0\r\n{headers}\r\n"
        );
        stream.write_all(head.as_bytes()).await.expect("send");
        let mut response = String::new();
        stream.read_to_string(&mut response).await.expect("read");
        response
    };
    let response = tokio::time::timeout(Duration::from_secs(60), exchange)
        .await
        .unwrap_or_else(|_| panic!("{method} {path}: no answer within 60 s"));
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {response:?}"));
    let body = response
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_owned();
    (status, body)
}

/// The sum of a metric over all its label sets, from a Prometheus page.
fn metric(page: &str, name: &str) -> f64 {
    page.lines()
        .filter(|line| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// How many answers had each status.
#[derive(Debug, Default)]
struct Tally {
    ok: Vec<u64>,
    conflict: usize,
    unavailable: usize,
}

impl Tally {
    fn add(&mut self, (status, body): (u16, String)) {
        match status {
            200 => self.ok.push(body.trim().parse().expect("the stock left")),
            409 => self.conflict += 1,
            503 => self.unavailable += 1,
            other => panic!("unexpected status {other}: {body}"),
        }
    }
}

/// Sends `count` deductions of one unit of `sku`, `AT_ONCE` at a time,
/// alternating between the services.
async fn deduct_many(services: &[SocketAddr], sku: &str, count: usize, headers: &str) -> Tally {
    let gate = Arc::new(Semaphore::new(AT_ONCE));
    let mut calls = JoinSet::new();
    for i in 0..count {
        let addr = services[i % services.len()];
        let (gate, path, headers) = (
            gate.clone(),
            format!("/stock/{sku}/deduct/1"),
            headers.to_owned(),
        );
        calls.spawn(async move {
            let _permit = gate.acquire_owned().await.expect("open");
            request(addr, "POST", &path, &headers).await
        });
    }
    let mut tally = Tally::default();
    while let Some(answer) = calls.join_next().await {
        tally.add(answer.expect("no panic"));
    }
    tally
}

fn stock_of(server: &RedisServer, sku: &str) -> u64 {
    let mut conn = server.connection();
    redis::cmd("GET")
        .arg(format!("stock:{sku}"))
        .query::<Option<u64>>(&mut conn)
        .expect("GET")
        .unwrap_or(0)
}

fn set_stock(server: &RedisServer, sku: &str, n: u64) {
    let mut conn = server.connection();
    let () = redis::cmd("SET")
        .arg(format!("stock:{sku}"))
        .arg(n)
        .query(&mut conn)
        .expect("SET");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_service_processes_never_oversell_and_count_what_happened() {
    let redis = RedisServer::start();
    let url = redis.url();
    let one = Service::start(&url).await;
    let two = Service::start(&url).await;
    let addrs = [one.addr, two.addr];

    // Hundreds of deductions on one item from both processes.
    set_stock(&redis, "widget", STOCK);
    let main = deduct_many(&addrs, "widget", REQUESTS, "").await;
    eprintln!(
        "{REQUESTS} deductions: {} sold, {} refused (409), {} timed out (503)",
        main.ok.len(),
        main.conflict,
        main.unavailable
    );
    let left = stock_of(&redis, "widget");
    let sold = main.ok.len() as u64;
    assert_eq!(main.ok.len() + main.conflict + main.unavailable, REQUESTS);
    assert_eq!(left, STOCK - sold, "{main:?}");
    let mut seen = main.ok.clone();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), main.ok.len(), "two sales saw the same stock");
    if main.unavailable == 0 {
        assert_eq!(sold, STOCK, "all stock sold when no call timed out");
        assert_eq!(main.conflict, REQUESTS - STOCK as usize);
    }
    assert!(sold > 0, "{main:?}");

    // One slow deduction holds the lock for 5 s; the others wait 1 s each.
    set_stock(&redis, "slow", 100);
    let slow = tokio::spawn(request(
        one.addr,
        "POST",
        "/stock/slow/deduct/1",
        "x-pause-ms: 5000\r\n",
    ));
    let held = support::eventually(Duration::from_secs(20), || {
        let mut conn = redis.connection();
        redis::cmd("EXISTS")
            .arg("lock:stock:slow")
            .query::<u64>(&mut conn)
            .expect("EXISTS")
            == 1
    });
    assert!(held.await, "the slow deduction never took the lock");
    let blocked = deduct_many(&addrs, "slow", BLOCKED, "").await;
    assert_eq!(blocked.unavailable, BLOCKED, "{blocked:?}");
    let (status, body) = slow.await.expect("no panic");
    assert_eq!((status, body.trim()), (200, "99"));

    // What each process counted, summed over both.
    let mut acquisitions = 0.0;
    let mut timeouts = 0.0;
    for addr in addrs {
        let (status, page) = request(addr, "GET", "/metrics", "").await;
        assert_eq!(status, 200);
        acquisitions += metric(&page, "distributed_lock_acquisitions_total");
        timeouts += metric(&page, "distributed_lock_timeouts_total");
        assert_eq!(metric(&page, "distributed_lock_held"), 0.0, "{page}");
        assert_eq!(
            metric(&page, "distributed_lock_losses_total"),
            0.0,
            "{page}"
        );
        assert!(
            page.contains("distributed_lock_wait_seconds_count"),
            "{page}"
        );
    }
    // Every 200 and 409 held the lock; the 503s and only they timed out.
    let held_calls = main.ok.len() + main.conflict + 1;
    assert_eq!(acquisitions, held_calls as f64);
    assert_eq!(timeouts, (main.unavailable + blocked.unavailable) as f64);
}
