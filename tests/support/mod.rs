//! Test support: what the integration tests share beyond the servers
//! (which `lock-testkit` starts): a unix-socket server with readers of the
//! lock values, the two backends of a behaviour test, a racy counter, a
//! lock holder, and the checks several deployment tests run.
#![allow(dead_code)]

pub mod executor;
pub mod several;

use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_runtime::{LockClient, LockError, LockOptions};
use lock_testkit::{Server, ServerOptions};
use tokio::sync::Notify;

/// When `key` expires, in ms by the server's clock (its `TIME` plus
/// `PTTL`, read in one script); `None` when it is gone or has no expiry.
pub fn expiry_ms(con: &mut impl redis::ConnectionLike, key: &str) -> Option<u64> {
    const EXPIRY: &str = "local p = redis.call('pttl', KEYS[1]) \
         if p < 0 then return p end \
         local t = redis.call('time') \
         return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + p";
    let at: i64 = redis::Script::new(EXPIRY)
        .key(key)
        .invoke(con)
        .expect("the expiry script");
    u64::try_from(at).ok()
}

/// A redis-server of our own on a unix socket in a temporary directory
/// (a [`Server`]), with readers of the lock values.
pub struct RedisServer {
    server: Server,
    /// Whether a restart loads its last snapshot.
    persistent: bool,
}

impl RedisServer {
    /// Starts a server and waits until it answers.
    pub fn start() -> RedisServer {
        let server = ServerOptions::unix()
            .start()
            .unwrap_or_else(|e| panic!("{e}"));
        RedisServer {
            server,
            persistent: false,
        }
    }

    /// Starts a server that loads its RDB snapshot when restarted; take one
    /// with [`Server::save`].
    pub fn start_persistent() -> RedisServer {
        let mut server = RedisServer::start();
        server.persistent = true;
        server
    }

    /// Starts the server again on the same socket: empty, or from its last
    /// snapshot if it is persistent.
    pub fn restart(&mut self) {
        let from_dump = self.persistent;
        self.server
            .restart(from_dump)
            .unwrap_or_else(|e| panic!("{e}"));
    }

    /// The owner holding the lock `key` (full key) and its fence, if any:
    /// from the lock's value `L1:<fence>:<state>:<owner>` (see
    /// docs/redis-layout.md), held when the state is `h` or `w`.
    pub fn owners(&self, key: &str) -> Vec<(String, u64)> {
        self.lock_value(key)
            .filter(|(_, state, _)| state != "f")
            .map(|(fence, _, owner)| (owner, fence))
            .into_iter()
            .collect()
    }

    /// The lock `key`'s value as (fence, state, owner), if it has one.
    pub fn lock_value(&self, key: &str) -> Option<(u64, String, String)> {
        let value: Option<String> = redis::cmd("GET")
            .arg(key)
            .query(&mut self.connection())
            .expect("GET");
        value.and_then(|value| parse_lock(&value))
    }
}

impl Deref for RedisServer {
    type Target = Server;

    fn deref(&self) -> &Server {
        &self.server
    }
}

impl DerefMut for RedisServer {
    fn deref_mut(&mut self) -> &mut Server {
        &mut self.server
    }
}

/// Runs `f` until it returns true, up to `limit`; whether it did.
pub async fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if f() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// How many connections listen on `key`'s release channel on `server`
/// (`PUBSUB NUMSUB`).
pub fn release_subscribers(server: &Server, key: &str) -> u64 {
    redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(key)
        .query(&mut server.connection())
        .map(|mut pairs: Vec<(String, u64)>| pairs.pop().map_or(0, |(_, n)| n))
        .expect("PUBSUB NUMSUB")
}

/// Sends `signal` (`-STOP`, `-CONT`, `-KILL`) to the process `pid`, by
/// `kill`.
pub fn signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill")
        .arg(signal)
        .arg(pid.to_string())
        .status()
        .expect("kill");
    assert!(status.success(), "kill {signal} {pid}");
}

/// Which backend a behaviour test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Memory,
    Redis,
}

/// A client on one backend, and the server behind it (for Redis).
pub struct Env {
    pub kind: Kind,
    pub client: lock_runtime::LockClient,
    pub server: Option<RedisServer>,
}

impl Env {
    /// A client with default options on a fresh backend.
    pub async fn new(kind: Kind) -> Env {
        Env::with(kind, lock_runtime::LockClient::builder()).await
    }

    /// A client built from `builder` on a fresh backend.
    pub async fn with(kind: Kind, builder: lock_runtime::LockClientBuilder) -> Env {
        match kind {
            Kind::Memory => Env {
                kind,
                client: builder.in_memory(),
                server: None,
            },
            Kind::Redis => {
                let server = RedisServer::start();
                let client = builder.connect(&server.url()).await.expect("connect");
                Env {
                    kind,
                    client,
                    server: Some(server),
                }
            }
        }
    }

    /// A second client on the same backend (another process, as far as the
    /// locks can tell), for Redis; the same client for memory.
    pub async fn other_client(&self) -> lock_runtime::LockClient {
        match &self.server {
            Some(server) => lock_runtime::LockClient::connect(&server.url())
                .await
                .expect("connect"),
            None => self.client.clone(),
        }
    }

    /// Whether the lock `key` (full key) exists in the backend: read from
    /// Redis, or probed with a zero-wait acquire on memory.
    pub async fn is_locked(&self, key: &str) -> bool {
        match &self.server {
            Some(server) => !server.owners(key).is_empty(),
            None => {
                let short = key.strip_prefix("lock:").expect("default prefix");
                let options = lock_runtime::LockOptions::new().wait(Duration::ZERO);
                let probe = tokio::spawn({
                    let client = self.client.clone();
                    let short = short.to_owned();
                    async move {
                        client
                            .run_locked(&short, options, async {
                                Ok::<_, lock_runtime::LockError>(())
                            })
                            .await
                    }
                });
                matches!(
                    probe.await.expect("probe task"),
                    Err(lock_runtime::LockError::Timeout { .. })
                )
            }
        }
    }
}

/// Declares one test per backend: `mod name { memory(), redis() }`. The
/// client has default options, or is built from the builder after `=`:
/// `async fn name(env: Env = LockClient::builder().kind_check(false))`.
#[macro_export]
macro_rules! on_both_backends {
    ($(#[$meta:meta])* async fn $name:ident($env:ident: Env) $body:block) => {
        $crate::on_both_backends! {
            $(#[$meta])*
            async fn $name($env: Env = ::lock_runtime::LockClient::builder()) $body
        }
    };
    ($(#[$meta:meta])* async fn $name:ident($env:ident: Env = $builder:expr) $body:block) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            $(#[$meta])*
            async fn run($env: $crate::support::Env) $body

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn memory() {
                let env = $crate::support::Env::with($crate::support::Kind::Memory, $builder);
                run(env.await).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn redis() {
                let env = $crate::support::Env::with($crate::support::Kind::Redis, $builder);
                run(env.await).await;
            }
        }
    };
}

/// A counter updated by a non-atomic read, yield, write: correct only when
/// the updates are serialised by a lock. In Redis for the Redis backend.
#[derive(Clone)]
pub enum Counter {
    Redis(redis::aio::MultiplexedConnection, String),
    Memory(std::sync::Arc<std::sync::atomic::AtomicU64>),
}

impl Counter {
    pub async fn new(env: &Env, name: &str) -> Counter {
        match &env.server {
            Some(server) => {
                let con = redis::Client::open(server.url())
                    .expect("url")
                    .get_multiplexed_async_connection()
                    .await
                    .expect("connect");
                Counter::Redis(con, name.to_owned())
            }
            None => Counter::Memory(Default::default()),
        }
    }

    pub async fn get(&mut self) -> u64 {
        match self {
            Counter::Redis(con, key) => {
                let v: Option<u64> = redis::cmd("GET")
                    .arg(&*key)
                    .query_async(con)
                    .await
                    .expect("GET");
                v.unwrap_or(0)
            }
            Counter::Memory(v) => v.load(std::sync::atomic::Ordering::SeqCst),
        }
    }

    pub async fn set(&mut self, value: u64) {
        match self {
            Counter::Redis(con, key) => {
                let _: () = redis::cmd("SET")
                    .arg(&*key)
                    .arg(value)
                    .query_async(con)
                    .await
                    .expect("SET");
            }
            Counter::Memory(v) => v.store(value, std::sync::atomic::Ordering::SeqCst),
        }
    }

    /// Read, yield to the other tasks, write back plus one.
    pub async fn increment_slowly(&mut self) {
        let v = self.get().await;
        tokio::task::yield_now().await;
        self.set(v + 1).await;
    }
}

/// A task holding a lock until told to release it (or for at most 60 s).
pub struct Holder {
    release: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), lock_runtime::LockError>>,
}

impl Holder {
    /// Spawns a task that takes `key` on `client` and holds it; returns once
    /// the lock is held.
    pub async fn start(
        client: &lock_runtime::LockClient,
        key: &str,
        options: lock_runtime::LockOptions,
    ) -> Holder {
        match Holder::try_start(client, key, options).await {
            Ok(holder) => holder,
            Err(error) => panic!("the holder took the lock: {error:?}"),
        }
    }

    /// As [`Holder::start`], or the error of a call that ended before its
    /// body ran.
    pub async fn try_start(
        client: &lock_runtime::LockClient,
        key: &str,
        options: lock_runtime::LockOptions,
    ) -> Result<Holder, lock_runtime::LockError> {
        let key = key.to_owned();
        let (held_tx, held_rx) = tokio::sync::oneshot::channel();
        let (release, release_rx) = tokio::sync::oneshot::channel::<()>();
        let client = client.clone();
        let task = tokio::spawn(async move {
            client
                .run_locked(&key, options, async {
                    held_tx.send(()).expect("test alive");
                    let _ = tokio::time::timeout(Duration::from_secs(60), release_rx).await;
                    Ok(())
                })
                .await
        });
        if held_rx.await.is_err() {
            let outcome = task.await.expect("holder task");
            return Err(outcome.expect_err("a call whose body did not run failed"));
        }
        Ok(Holder {
            release: Some(release),
            task,
        })
    }

    /// Lets the body end and returns how the call ended.
    pub async fn release(mut self) -> Result<(), lock_runtime::LockError> {
        if let Some(release) = self.release.take() {
            let _ = release.send(());
        }
        self.task.await.expect("holder task")
    }

    /// Waits for the call to end by itself (lost, say), without releasing.
    pub async fn outcome(self) -> Result<(), lock_runtime::LockError> {
        self.task.await.expect("holder task")
    }
}

/// 4 worker processes x 40 attempts on a stock of 100, locking on
/// `lock_urls` (comma-separated for Redlock), the stock in `store_url`:
/// exactly 100 sold.
pub async fn four_processes_never_oversell(lock_urls: &str, store_url: &str) {
    let mut con = redis::Client::open(store_url)
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    lock_suite::inventory::set_stock(&mut con, "sku-1", 100)
        .await
        .expect("stock");

    let workers: Vec<_> = (0..4)
        .map(|_| {
            tokio::process::Command::new(env!("CARGO_BIN_EXE_stock-worker"))
                .args(["deduct", lock_urls, store_url, "sku-1", "40"])
                .stdout(std::process::Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .expect("start worker")
        })
        .collect();
    let mut sold = 0;
    for worker in workers {
        let output = tokio::time::timeout(Duration::from_secs(120), worker.wait_with_output())
            .await
            .expect("worker finished in time")
            .expect("worker output");
        assert!(output.status.success(), "worker failed: {output:?}");
        let line = String::from_utf8(output.stdout).expect("utf-8");
        let n: u64 = line
            .trim()
            .strip_prefix("sold ")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("unexpected worker output {line:?}"));
        sold += n;
    }
    assert_eq!(sold, 100, "every unit sold exactly once");
    assert_eq!(
        lock_suite::inventory::stock(&mut con, "sku-1")
            .await
            .expect("stock"),
        0
    );
}

/// `tasks` tasks, each doing `rounds` slow increments of `counter` under the
/// lock `key` on `client`; returns when all are done.
pub async fn increment_under_lock(
    client: &lock_runtime::LockClient,
    counter: &Counter,
    key: &'static str,
    (tasks, rounds): (usize, usize),
) {
    let options = lock_runtime::LockOptions::new().wait(Duration::from_secs(60));
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let client = client.clone();
        let mut counter = counter.clone();
        handles.push(tokio::spawn(async move {
            for _ in 0..rounds {
                client
                    .run_locked(key, options, async {
                        counter.increment_slowly().await;
                        Ok::<_, lock_runtime::LockError>(())
                    })
                    .await
                    .expect("locked increment");
            }
        }));
    }
    for handle in handles {
        handle.await.expect("task");
    }
}

/// renew.lua as the watchdog calls it: `lease_ms` for every lock, and for
/// each `(key, owner, token)` the value that the lock holds while that
/// acquisition holds it and nobody waits (`L1:<token>:h:<owner>`). Its
/// answer, the indexes (from 1, in order) of the locks it did not renew,
/// read as whether each lock was renewed.
pub fn renew_locks(
    con: &mut impl redis::ConnectionLike,
    lease_ms: u64,
    locks: &[(&str, &str, u64)],
) -> Vec<bool> {
    let source = lock_runtime::__private::script_source("renew").expect("renew.lua");
    let script = redis::Script::new(source);
    let mut call = script.prepare_invoke();
    call.arg(lease_ms);
    for (key, owner, token) in locks {
        call.key(*key).arg(format!("L1:{token}:h:{owner}"));
    }
    let answers: Vec<usize> = call.invoke(con).expect("renew.lua");
    // 4 * index + why (renew.lua).
    let failed: Vec<usize> = answers.iter().map(|a| a / 4).collect();
    assert!(
        failed.windows(2).all(|w| w[0] < w[1])
            && failed.iter().all(|&i| (1..=locks.len()).contains(&i)),
        "renew.lua answers the locks it did not renew, in order: {answers:?}"
    );
    (1..=locks.len()).map(|i| !failed.contains(&i)).collect()
}

/// A fresh server and a client of it through a [`lock_testkit::Proxy`]
/// (to freeze, mute or cut its connections), with `command_timeout`, after
/// three calls that make every connection a call may use (this runtime's
/// own is made after the first).
pub async fn proxied_client(
    command_timeout: Duration,
) -> (Server, lock_testkit::Proxy, LockClient) {
    let server = Server::tcp(&[]);
    let proxy =
        lock_testkit::Proxy::start(([127, 0, 0, 1], server.port()).into()).expect("the proxy");
    let client = LockClient::builder()
        .command_timeout(command_timeout)
        .connect(&format!("redis://{}/", proxy.addr()))
        .await
        .expect("connect through the proxy");
    for _ in 0..3 {
        client
            .run_locked("warm", LockOptions::new(), async { Ok::<_, LockError>(()) })
            .await
            .expect("a call before the fault");
    }
    (server, proxy, client)
}

/// renew.lua on the one lock `key` of `owner` (acquired with `token`), as
/// the watchdog sends it: 4 * 1 + why when it is not renewed (see
/// renew.lua), nothing when it is.
pub fn renew_one(
    con: &mut impl redis::ConnectionLike,
    key: &str,
    (owner, token): (&str, u64),
    lease_ms: u64,
) -> Vec<i64> {
    let source = lock_runtime::__private::script_source("renew").expect("renew.lua");
    redis::Script::new(source)
        .key(key)
        .arg(lease_ms)
        .arg(format!("L1:{token}:h:{owner}"))
        .invoke(con)
        .expect("renew.lua")
}

/// release.lua's answer as one integer: 1 freed, -1 gone, -2 freed by the
/// same owner's earlier release, -3 freed by an operator, -4 taken (also
/// for `{-4, fence}`, another owner holding it now).
pub fn release_answer(answer: redis::Value) -> i64 {
    match answer {
        redis::Value::Int(n) => n,
        redis::Value::Array(items) if matches!(items.first(), Some(redis::Value::Int(-4))) => -4,
        other => panic!("release.lua answered {other:?}"),
    }
}

/// A lock value of layout 1, `L1:<fence>:<state>:<owner>`, as (fence, state,
/// owner).
pub fn parse_lock(value: &str) -> Option<(u64, String, String)> {
    let mut parts = value.strip_prefix("L1:")?.splitn(3, ':');
    let fence = parts.next()?.parse().ok()?;
    let state = parts.next()?.to_owned();
    let owner = parts.next()?.to_owned();
    Some((fence, state, owner))
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
