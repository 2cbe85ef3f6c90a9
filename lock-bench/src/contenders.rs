//! The ways of taking a lock that the bench compares.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;
use std::time::Duration;

use lock_runtime::{distributed_lock, LockClient, LockError, LockOptions};
use redis::aio::MultiplexedConnection;
use redis::Script;
use tokio::time::{timeout, Instant};

/// The lease of every lock in workloads (a) to (d): the library's default.
pub const LEASE: Duration = Duration::from_secs(30);
/// How long any caller waits for a lock before it gives up: the library's
/// default.
pub const WAIT: Duration = Duration::from_secs(10);
/// The fixed interval of the polling reference.
pub const POLL: Duration = Duration::from_millis(50);
/// The library's key prefix.
pub const PREFIX: &str = "lock:";

/// The lock-runtime script `name` as the library sends it.
pub fn runtime_script(name: &str) -> &'static str {
    lock_runtime::__private::script_source(name).expect("a script of lock-runtime")
}

/// The plain lock's acquire before the lock kinds (commit 9c07927, copied
/// unchanged into `src/lua/before-kinds/`): `read.lua`, then `acquire.lua`.
pub const OLD_ACQUIRE_SOURCE: &str = concat!(
    include_str!("lua/before-kinds/read.lua"),
    include_str!("lua/before-kinds/acquire.lua")
);
/// The plain lock's release before the lock kinds (commit 9c07927).
pub const OLD_RELEASE_SOURCE: &str = concat!(
    include_str!("lua/before-kinds/read.lua"),
    include_str!("lua/before-kinds/release.lua")
);
/// Today's plain acquire without `hash.lua` before it: the bench tells
/// what prepending the shared kinds' functions costs apart from what the
/// scripts themselves changed.
pub const BARE_ACQUIRE_SOURCE: &str = concat!(
    include_str!("../../lock-runtime/src/kind/lua/exclusive/read.lua"),
    include_str!("../../lock-runtime/src/kind/lua/exclusive/acquire.lua")
);
/// Today's plain release without `hash.lua` before it.
pub const BARE_RELEASE_SOURCE: &str = concat!(
    include_str!("../../lock-runtime/src/kind/lua/exclusive/read.lua"),
    include_str!("../../lock-runtime/src/kind/lua/exclusive/release.lua")
);

/// Whether the library's clients coalesce their calls (see
/// `LockClientBuilder::coalesce`): on, unless `LOCK_BENCH_CALLS_ALONE` is
/// set, to compare the two in runs side by side.
pub fn coalescing() -> bool {
    std::env::var_os("LOCK_BENCH_CALLS_ALONE").is_none()
}

/// The library's own scripts, called directly, as the library builds them:
/// the floor.
static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(runtime_script("acquire")));
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(runtime_script("release")));
/// A fencing token from acquire.lua, given back to release.lua (`ARGV[3]`).
pub type Token = i64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Who {
    /// acquire.lua + release.lua (as the library builds them) by EVALSHA on
    /// one multiplexed connection; a failed acquire is retried at once.
    Floor,
    /// `#[distributed_lock]` on the global client.
    Library,
    /// `LockClient::run_locked` on a client built with `on_current_runtime()`
    /// on the runtime that runs the workload (one client per runtime).
    LibraryLocal,
    /// rslock's `LockManager::acquire` and `LockGuard::release`, defaults.
    Rslock,
    /// The floor's scripts, a failed acquire retried every 50 ms.
    Polling,
}

impl Who {
    pub fn tag(self) -> &'static str {
        match self {
            Who::Floor => "floor",
            Who::Library => "library",
            Who::LibraryLocal => "local",
            Who::Rslock => "rslock",
            Who::Polling => "poll50",
        }
    }
}

impl fmt::Display for Who {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Who::Floor => "floor (raw scripts)",
            Who::Library => "lock-runtime (attribute)",
            Who::LibraryLocal => "lock-runtime (on_current_runtime)",
            Who::Rslock => "rslock 0.10 (defaults)",
            Who::Polling => "polling every 50 ms",
        })
    }
}

/// A lock's name: `short` as the attribute renders it, `full` as it is in
/// Redis (the library adds its prefix; the others are given `full`).
#[derive(Clone, Debug)]
pub struct Key {
    pub short: String,
    pub full: String,
}

impl Key {
    /// Each contender has keys of its own, so one never meets another's
    /// leftovers (a freed key of the library keeps its fencing field).
    pub fn new(who: Who, name: &str) -> Key {
        let short = format!("{}:{name}", who.tag());
        Key {
            full: format!("{PREFIX}{short}"),
            short,
        }
    }
}

/// Why a locked call did not run its body.
#[derive(Debug)]
pub enum Failed {
    /// Not taken within [`WAIT`].
    TimedOut,
    Other(String),
}

impl fmt::Display for Failed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failed::TimedOut => f.write_str("timed out waiting"),
            Failed::Other(e) => f.write_str(e),
        }
    }
}

/// The connections of the contenders that are not the global client.
#[derive(Clone)]
pub struct Lockers {
    pub floor: Floor,
    pub rslock: rslock::LockManager,
    /// A client driven by the runtime this is connected on (call
    /// [`Lockers::connect`] inside that runtime).
    pub local: LockClient,
}

impl Lockers {
    pub async fn connect(url: &str) -> Result<Lockers, String> {
        Ok(Lockers {
            floor: Floor::connect(url).await.map_err(|e| e.to_string())?,
            rslock: rslock::LockManager::new(vec![url.to_owned()]),
            local: LockClient::builder()
                .on_current_runtime()
                .coalesce(coalescing())
                .connect(url)
                .await
                .map_err(|e| e.to_string())?,
        })
    }

    /// Runs `body` under the lock `key`. `owner` is the floor's owner id
    /// (the library and rslock make their own).
    pub async fn locked<F>(&self, who: Who, key: &Key, owner: &str, body: F) -> Result<(), Failed>
    where
        F: Future<Output = ()> + Send,
    {
        match who {
            Who::Library => library(&key.short, body).await.map_err(failed),
            Who::LibraryLocal => self
                .local
                .run_locked(&key.short, LockOptions::new(), async {
                    body.await;
                    Ok::<(), LockError>(())
                })
                .await
                .map_err(failed),
            Who::Floor | Who::Polling => {
                let retry = if who == Who::Polling {
                    POLL
                } else {
                    Duration::ZERO
                };
                let token = self.floor.acquire(&key.full, owner, LEASE, retry).await?;
                body.await;
                self.floor.release(&key.full, owner, token).await
            }
            Who::Rslock => {
                let guard = match timeout(WAIT, self.rslock.acquire(key.full.as_str(), LEASE)).await
                {
                    Err(_) => return Err(Failed::TimedOut),
                    Ok(Err(e)) => return Err(Failed::Other(e.to_string())),
                    Ok(Ok(guard)) => guard,
                };
                body.await;
                guard.release().await;
                Ok(())
            }
        }
    }
}

fn failed(e: LockError) -> Failed {
    match e {
        LockError::Timeout { .. } => Failed::TimedOut,
        e => Failed::Other(e.to_string()),
    }
}

/// This library, through the attribute, with the client's defaults
/// (30 s lease, 10 s wait, renewal on).
#[distributed_lock(key = "<key>")]
pub async fn library<F: Future<Output = ()>>(key: &str, body: F) -> Result<(), LockError> {
    body.await;
    Ok(())
}

/// The lease of workload (e)'s locks in ms (`Config::e_lease`), set before
/// it runs.
pub static HELD_LEASE_MS: AtomicU64 = AtomicU64::new(30_000);

/// (e)'s lease, read by the attribute at each call: the call's future then
/// carries no lease of its own, as with a literal lease.
fn held_lease() -> Duration {
    Duration::from_millis(HELD_LEASE_MS.load(Ordering::Relaxed))
}

/// This library with the lease of workload (e), whose locks the watchdog
/// renews at a third of it.
#[distributed_lock(key = "<key>", lease = held_lease(), wait = "60s")]
pub async fn library_held<F: Future<Output = ()>>(key: String, body: F) -> Result<(), LockError> {
    body.await;
    Ok(())
}

/// The floor: the library's scripts over one multiplexed connection, and
/// nothing else.
#[derive(Clone)]
pub struct Floor {
    con: MultiplexedConnection,
    client_id: String,
}

impl Floor {
    pub async fn connect(url: &str) -> redis::RedisResult<Floor> {
        let con = redis::Client::open(url)?
            .get_multiplexed_async_connection()
            .await?;
        Ok(Floor {
            con,
            client_id: format!("floor-{}", std::process::id()),
        })
    }

    /// The floor's connection (a handle on the same multiplexed one).
    pub fn connection(&self) -> MultiplexedConnection {
        self.con.clone()
    }

    /// One acquire.lua call: the fencing token if `owner` holds `key` now.
    pub async fn try_acquire(
        &self,
        key: &str,
        owner: &str,
        lease: Duration,
    ) -> Result<Option<Token>, Failed> {
        let answer: i64 = ACQUIRE
            .key(key)
            .arg(owner)
            .arg(lease.as_millis() as u64)
            .invoke_async(&mut self.con.clone())
            .await
            .map_err(|e| Failed::Other(e.to_string()))?;
        // acquire.lua answers the token (> 0) or -2 - the holder's TTL.
        Ok((answer > 0).then_some(answer))
    }

    /// Tries until taken, `retry` apart, for at most [`WAIT`].
    pub async fn acquire(
        &self,
        key: &str,
        owner: &str,
        lease: Duration,
        retry: Duration,
    ) -> Result<Token, Failed> {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(token) = self.try_acquire(key, owner, lease).await? {
                return Ok(token);
            }
            if Instant::now() >= deadline {
                return Err(Failed::TimedOut);
            }
            if retry.is_zero() {
                tokio::task::yield_now().await;
            } else {
                tokio::time::sleep(retry).await;
            }
        }
    }

    /// One release.lua call.
    pub async fn release(&self, key: &str, owner: &str, token: Token) -> Result<(), Failed> {
        let _: i64 = RELEASE
            .key(key)
            .arg(owner)
            .arg(&self.client_id)
            .arg(token)
            .invoke_async(&mut self.con.clone())
            .await
            .map_err(|e| Failed::Other(e.to_string()))?;
        Ok(())
    }
}
