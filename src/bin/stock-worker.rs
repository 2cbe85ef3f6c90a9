//! A separate OS process for the multi-process tests.
//!
//! `stock-worker deduct <lock-urls> <store-url> <sku> <attempts>`: tries to
//! deduct one unit `attempts` times, then prints `sold <n>`. `lock-urls` is
//! one Redis URL, or several separated by commas for Redlock, or
//! `cluster:` and the URLs of Redis Cluster nodes separated by commas.
//!
//! `stock-worker hold <redis-url> <key> <lease-ms>`: takes the lock `key`
//! (renewed by the watchdog), prints `held`, then sleeps until killed (at
//! most 60 s).
//!
//! The lock kinds (tests/kinds_processes.rs). Times printed are wall-clock
//! milliseconds since the UNIX epoch, so that lines from several processes
//! compare:
//!
//! `stock-worker read-hold <redis-url> <key> <lease-ms>`: takes `key` as a
//! reader (renewed by the watchdog), prints `held`, then sleeps until killed
//! (at most 60 s).
//!
//! `stock-worker permits <redis-url> <key> <n> <tasks> <rounds> <lease-ms>
//! [<hold-ms>]`: `tasks` tasks each take `key` with `permits = n` `rounds`
//! times (waiting up to 60 s) and hold it `hold-ms` (default 50) each time.
//! Each hold prints `enter <ms> <id>` when its body starts and `exit <ms>
//! <id>` just before its body returns, `id` unique across processes
//! (`<pid>.<task>.<round>`); at the end, `done`.
//!
//! `stock-worker fair-wait <redis-url> <key> <lease-ms> [<waiter-lease-ms>]`:
//! prints `waiting <ms>`, then waits (up to 30 s) for `key` as a fair lock,
//! its place in line kept for `waiter-lease-ms` (default: the runtime's)
//! without a heartbeat; inside prints `entered <ms>`, holds 50 ms, exits.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lock_runtime::{LockClient, LockError, LockMode, LockOptions};
use lock_suite::inventory::{self, InventoryError};

type Error = Box<dyn std::error::Error>;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [mode, locks, store, sku, n] if mode == "deduct" => {
            deduct(locks, store, sku, n.parse()?).await
        }
        [mode, url, key, lease] if mode == "hold" => hold(url, key, lease.parse()?).await,
        [mode, url, key, lease] if mode == "read-hold" => read_hold(url, key, lease.parse()?).await,
        [mode, url, key, n, tasks, rounds, lease, rest @ ..]
            if mode == "permits" && rest.len() <= 1 =>
        {
            let hold = rest.first().map_or(Ok(50), |hold| hold.parse())?;
            let shape = (n.parse()?, tasks.parse()?, rounds.parse()?);
            permits(url, key, shape, lease.parse()?, hold).await
        }
        [mode, url, key, lease, rest @ ..] if mode == "fair-wait" && rest.len() <= 1 => {
            let waiter_lease = rest.first().map(|ms| ms.parse()).transpose()?;
            fair_wait(url, key, lease.parse()?, waiter_lease).await
        }
        _ => Err(
            "usage: stock-worker deduct <lock-urls> <store-url> <sku> <attempts> \
                  | hold <redis-url> <key> <lease-ms> \
                  | read-hold <redis-url> <key> <lease-ms> \
                  | permits <redis-url> <key> <n> <tasks> <rounds> <lease-ms> [<hold-ms>] \
                  | fair-wait <redis-url> <key> <lease-ms> [<waiter-lease-ms>]"
                .into(),
        ),
    }
}

/// Wall-clock milliseconds since the UNIX epoch: one clock for every
/// process on the machine.
fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_millis()
}

async fn deduct(locks: &str, store: &str, sku: &str, attempts: u64) -> Result<(), Error> {
    let seeds = locks.strip_prefix("cluster:");
    let urls: Vec<&str> = seeds.unwrap_or(locks).split(',').collect();
    let client = match urls.as_slice() {
        seeds if locks.starts_with("cluster:") => LockClient::cluster(seeds).await?,
        [one] => LockClient::connect(one).await?,
        many => {
            LockClient::builder()
                .node_timeout(Duration::from_millis(200))
                .redlock(many)
                .await?
        }
    };
    lock_runtime::init(client)?;
    let mut con = redis::Client::open(store)?
        .get_multiplexed_async_connection()
        .await?;
    let mut sold = 0;
    for _ in 0..attempts {
        match inventory::deduct(&mut con, sku, 1).await {
            Ok(_) => sold += 1,
            Err(InventoryError::OutOfStock { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    println!("sold {sold}");
    Ok(())
}

async fn hold(url: &str, key: &str, lease_ms: u64) -> Result<(), Error> {
    let client = LockClient::builder()
        .default_lease(Duration::from_millis(lease_ms))
        .connect(url)
        .await?;
    client
        .run_locked(key, LockOptions::new(), async {
            println!("held");
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok::<_, LockError>(())
        })
        .await?;
    Ok(())
}

async fn read_hold(url: &str, key: &str, lease_ms: u64) -> Result<(), Error> {
    let client = LockClient::connect(url).await?;
    let options = LockOptions::new()
        .mode(LockMode::Read)
        .lease(Duration::from_millis(lease_ms));
    client
        .run_locked(key, options, async {
            println!("held");
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok::<_, LockError>(())
        })
        .await?;
    Ok(())
}

async fn permits(
    url: &str,
    key: &str,
    (n, tasks, rounds): (u32, usize, usize),
    lease_ms: u64,
    hold_ms: u64,
) -> Result<(), Error> {
    let client = LockClient::connect(url).await?;
    let options = LockOptions::new()
        .permits(n)
        .lease(Duration::from_millis(lease_ms))
        .wait(Duration::from_secs(60));
    let pid = std::process::id();
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let (client, key) = (client.clone(), key.to_owned());
            tokio::spawn(async move {
                for round in 0..rounds {
                    let id = format!("{pid}.{task}.{round}");
                    client
                        .run_locked(&key, options, async {
                            println!("enter {} {id}", now_ms());
                            tokio::time::sleep(Duration::from_millis(hold_ms)).await;
                            println!("exit {} {id}", now_ms());
                            Ok::<_, LockError>(())
                        })
                        .await?;
                }
                Ok::<_, LockError>(())
            })
        })
        .collect();
    for handle in handles {
        handle.await??;
    }
    println!("done");
    Ok(())
}

async fn fair_wait(
    url: &str,
    key: &str,
    lease_ms: u64,
    waiter_lease_ms: Option<u64>,
) -> Result<(), Error> {
    let client = LockClient::connect(url).await?;
    let mut options = LockOptions::new()
        .fair(true)
        .lease(Duration::from_millis(lease_ms))
        .wait(Duration::from_secs(30));
    if let Some(ms) = waiter_lease_ms {
        options = options.waiter_lease(Duration::from_millis(ms));
    }
    println!("waiting {}", now_ms());
    client
        .run_locked(key, options, async {
            println!("entered {}", now_ms());
            tokio::time::sleep(Duration::from_millis(50)).await;
            Ok::<_, LockError>(())
        })
        .await?;
    Ok(())
}
