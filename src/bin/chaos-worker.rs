//! A worker process of the chaos test: tasks that deposit 1 into a fenced
//! account under the lock, until the store says stop.
//!
//! `chaos-worker <lock-redis-url> <store-redis-url> <tasks>`
//!
//! Prints a line per lost lock (`lost <reason>`), per late write that a
//! lost holder still sends with its old token (`late-write refused` or
//! `late-write accepted`), and at the end
//! `summary pid=.. sections=.. lost=.. stale=.. errors=.. late_refused=.. late_accepted=..`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use lock_runtime::{distributed_lock, LockClient, LockError};
use lock_suite::fenced::Account;
use redis::aio::MultiplexedConnection;

#[derive(Debug, thiserror::Error)]
enum SectionError {
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error(transparent)]
    Store(#[from] redis::RedisError),
    #[error("the store refused a stale token")]
    Stale,
}

/// Deletes `holder` if it still names this process.
static CLEAR_HOLDER: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0",
    )
});

/// A write read but not yet made: what a holder that lost its lock would
/// still send if nothing stopped it.
type Pending = Mutex<Option<(u64, u64)>>;

/// One critical section: a fenced read, a pause, a fenced write. `holder`
/// in the store names this process while it runs, for the harness.
#[distributed_lock(key = "account:<name>", lease = "600ms", wait = "30s")]
async fn deposit(
    account: &mut Account,
    store: &mut MultiplexedConnection,
    name: &str,
    pending: &Pending,
) -> Result<(), SectionError> {
    let token = lock_runtime::fencing_token().expect("inside the lock");
    let balance = account.read(token).await?.ok_or(SectionError::Stale)?;
    *pending.lock().expect("pending") = Some((token, balance + 1));
    let pid = std::process::id();
    let _: () = redis::cmd("SET")
        .arg("holder")
        .arg(pid)
        .query_async(store)
        .await?;
    tokio::time::sleep(Duration::from_millis(3)).await;
    let accepted = account.write(token, balance + 1, 1).await?;
    *pending.lock().expect("pending") = None;
    let _: i64 = CLEAR_HOLDER
        .key("holder")
        .arg(pid)
        .invoke_async(store)
        .await?;
    if accepted {
        Ok(())
    } else {
        Err(SectionError::Stale)
    }
}

#[derive(Default)]
struct Counts {
    sections: AtomicU64,
    lost: AtomicU64,
    stale: AtomicU64,
    errors: AtomicU64,
    late_refused: AtomicU64,
    late_accepted: AtomicU64,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [lock_url, store_url, tasks] = args.as_slice() else {
        return Err("usage: chaos-worker <lock-redis-url> <store-redis-url> <tasks>".into());
    };
    let tasks: usize = tasks.parse()?;
    let client = LockClient::builder()
        .connect_timeout(Duration::from_secs(1))
        .command_timeout(Duration::from_millis(500))
        .connect(lock_url)
        .await?;
    lock_runtime::init(client)?;
    let store = redis::Client::open(store_url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let counts = Arc::new(Counts::default());
    let deadline = Instant::now() + Duration::from_secs(60);

    let mut handles = Vec::new();
    for _ in 0..tasks {
        let mut store = store.clone();
        let mut account = Account::new(store.clone(), "acct");
        let counts = counts.clone();
        handles.push(tokio::spawn(async move {
            let pending = Pending::default();
            for _ in 0..100_000 {
                let stop: Option<String> = redis::cmd("GET")
                    .arg("stop")
                    .query_async(&mut store)
                    .await
                    .ok()
                    .flatten();
                if stop.is_some() || Instant::now() > deadline {
                    break;
                }
                match deposit(&mut account, &mut store, "acct", &pending).await {
                    Ok(()) => {
                        counts.sections.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(SectionError::Lock(LockError::Lost { reason, .. })) => {
                        counts.lost.fetch_add(1, Ordering::Relaxed);
                        println!("lost {reason:?}");
                        // A holder without loss detection would still send
                        // its write: the store must refuse it.
                        let late = pending.lock().expect("pending").take();
                        if let Some((token, balance)) = late {
                            match account.write(token, balance, 1).await {
                                Ok(false) => {
                                    counts.late_refused.fetch_add(1, Ordering::Relaxed);
                                    println!("late-write refused");
                                }
                                Ok(true) => {
                                    counts.late_accepted.fetch_add(1, Ordering::Relaxed);
                                    println!("late-write accepted");
                                }
                                Err(_) => {
                                    counts.errors.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                        }
                    }
                    Err(SectionError::Stale) => {
                        counts.stale.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) => {
                        counts.errors.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
                pending.lock().expect("pending").take();
            }
        }));
    }
    for handle in handles {
        handle.await?;
    }
    let c = &counts;
    println!(
        "summary pid={} sections={} lost={} stale={} errors={} late_refused={} late_accepted={}",
        std::process::id(),
        c.sections.load(Ordering::Relaxed),
        c.lost.load(Ordering::Relaxed),
        c.stale.load(Ordering::Relaxed),
        c.errors.load(Ordering::Relaxed),
        c.late_refused.load(Ordering::Relaxed),
        c.late_accepted.load(Ordering::Relaxed),
    );
    Ok(())
}
