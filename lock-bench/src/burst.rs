//! (n) A burst of hand-offs: one client holds N distinct keys, a second
//! client waits on each of them (one call per key), and the holder releases
//! all N at once. Measured per key: from the holder's release (its call's
//! return) to the waiter's body starting; and first to last, the releases
//! and the acquisitions. Also how long the waiters' release subscriptions
//! took to be on the server, and the waiting client's memory per waiting
//! call. On one node and on a Redis Cluster of 3 masters, each started by
//! the bench on loopback and stopped by pid.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lock_runtime::{LockClient, LockError, LockOptions};
use lock_testkit::cluster::RedisCluster;
use lock_testkit::ServerOptions;
use redis::aio::MultiplexedConnection;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use crate::alloc;
use crate::stats::quantile;
use crate::workloads::{redis_err, Res};

/// The deployment (n) ran on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Where {
    OneNode,
    Cluster,
}

/// What one burst measured.
#[derive(Clone, Debug)]
pub struct Burst {
    pub deployment: Where,
    pub keys: usize,
    /// From the waiters' start to every key's channel subscribed on the
    /// server (`None`: not all within the bound).
    pub subscribed_in: Option<Duration>,
    /// The waiting client's live bytes per waiting call, once all wait.
    pub bytes_per_waiter: i64,
    /// From the signal to release to the last holder's call returning.
    pub releases: Duration,
    /// From the signal to release to the last waiter's body starting.
    pub acquisitions: Duration,
    /// Per key, from its release to its waiter's acquisition.
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
    /// The servers' CPU time from the signal to the last acquisition
    /// (INFO cpu, user and system, summed over the servers).
    pub redis_cpu: Duration,
}

/// How long the bench waits for every waiter's subscription.
const SUBSCRIBED_WITHIN: Duration = Duration::from_secs(60);

/// Runs (n) for each count on one node, then on a cluster
/// (`LOCK_BENCH_BURST=one` or `cluster`: only there).
pub fn run(counts: &[usize]) -> Res<Vec<Burst>> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let mut rows = Vec::new();
    let server = ServerOptions::tcp().start().map_err(|e| e.to_string())?;
    let url = server.url();
    let only = std::env::var("LOCK_BENCH_BURST").unwrap_or_default();
    for &n in counts.iter().filter(|_| only != "cluster") {
        eprintln!("(n) {n} keys on one node");
        rows.push(runtime.block_on(async {
            let admins = vec![connect(&url).await?];
            let holder = LockClient::connect(&url).await.map_err(|e| e.to_string())?;
            let waiter = LockClient::connect(&url).await.map_err(|e| e.to_string())?;
            burst(Where::OneNode, n, &holder, &waiter, &admins).await
        })?);
    }
    drop(server);
    let cluster = RedisCluster::try_start(0).map_err(|e| e.to_string())?;
    let urls = cluster.urls();
    let seeds: Vec<&str> = urls.iter().map(String::as_str).collect();
    for &n in counts.iter().filter(|_| only != "one") {
        eprintln!("(n) {n} keys on a cluster");
        rows.push(runtime.block_on(async {
            let mut admins = Vec::new();
            for url in &urls {
                admins.push(connect(url).await?);
            }
            let holder = LockClient::cluster(&seeds)
                .await
                .map_err(|e| e.to_string())?;
            let waiter = LockClient::cluster(&seeds)
                .await
                .map_err(|e| e.to_string())?;
            burst(Where::Cluster, n, &holder, &waiter, &admins).await
        })?);
    }
    Ok(rows)
}

async fn connect(url: &str) -> Res<MultiplexedConnection> {
    redis::Client::open(url)
        .map_err(redis_err)?
        .get_multiplexed_async_connection()
        .await
        .map_err(redis_err)
}

/// Nanoseconds since `base`, as a slot value (0: not yet).
fn since(base: Instant) -> u64 {
    base.elapsed().as_nanos() as u64 + 1
}

async fn burst(
    deployment: Where,
    n: usize,
    holder: &LockClient,
    waiter: &LockClient,
    admins: &[MultiplexedConnection],
) -> Res<Burst> {
    let run = format!("burst:{}:", since(Instant::now()));
    let keys: Arc<Vec<String>> = Arc::new((0..n).map(|i| format!("{run}{i}")).collect());
    let base = Instant::now();
    let released: Arc<Vec<AtomicU64>> = Arc::new((0..n).map(|_| AtomicU64::new(0)).collect());
    let acquired: Arc<Vec<AtomicU64>> = Arc::new((0..n).map(|_| AtomicU64::new(0)).collect());
    let (go, signal) = watch::channel(false);
    let held = Arc::new((AtomicUsize::new(0), Notify::new()));

    let mut holders = Vec::with_capacity(n);
    for i in 0..n {
        let (client, keys, released, held) =
            (holder.clone(), keys.clone(), released.clone(), held.clone());
        let mut signal = signal.clone();
        holders.push(tokio::spawn(async move {
            let options = LockOptions::new().wait(Duration::from_secs(60));
            let body = async {
                if held.0.fetch_add(1, Ordering::SeqCst) + 1 == n {
                    held.1.notify_one();
                }
                let _ = signal.wait_for(|go| *go).await;
                Ok::<_, LockError>(())
            };
            let answer = client.run_locked(&keys[i], options, body).await;
            released[i].store(since(base), Ordering::SeqCst);
            answer.map_err(|e| e.to_string())
        }));
    }
    let all_held = held.1.notified();
    if held.0.load(Ordering::SeqCst) < n
        && tokio::time::timeout(Duration::from_secs(120), all_held)
            .await
            .is_err()
    {
        let mut failed = 0;
        let mut first = None;
        for task in holders.iter_mut().filter(|t| t.is_finished()) {
            if let Ok(Err(e)) = task.await {
                failed += 1;
                first.get_or_insert(e);
            }
        }
        return Err(format!(
            "(n): the holder took {} of {n} keys within 120 s; {failed} calls failed, the first: {first:?}",
            held.0.load(Ordering::SeqCst)
        ));
    }

    eprintln!("(n) the holder took {n} keys in {:?}", base.elapsed());
    let channels_before = channels(deployment, admins).await?;
    let before = alloc::live_bytes();
    let start = Instant::now();
    let mut waiters = Vec::with_capacity(n);
    for i in 0..n {
        let (client, keys, acquired) = (waiter.clone(), keys.clone(), acquired.clone());
        waiters.push(tokio::spawn(async move {
            let options = LockOptions::new().wait(Duration::from_secs(120));
            let body = async {
                acquired[i].store(since(base), Ordering::SeqCst);
                Ok::<_, LockError>(())
            };
            client
                .run_locked(&keys[i], options, body)
                .await
                .map_err(|e| e.to_string())
        }));
    }
    let subscribed_in = subscribed(deployment, admins, channels_before, n, start).await?;
    quiet(admins).await?;
    let bytes_per_waiter = (alloc::live_bytes() - before) / n as i64;

    let cpu_before = cpu(admins).await?;
    let signalled = since(base);
    go.send_replace(true);
    for task in holders {
        task.await.map_err(|e| e.to_string())??;
    }
    for task in waiters {
        task.await.map_err(|e| e.to_string())??;
    }
    let redis_cpu = Duration::from_secs_f64((cpu(admins).await? - cpu_before).max(0.0));
    let last = |slots: &[AtomicU64]| {
        let ns = slots.iter().map(|s| s.load(Ordering::SeqCst)).max();
        Duration::from_nanos(ns.unwrap_or(0).saturating_sub(signalled))
    };
    let mut handoffs: Vec<Duration> = (0..n)
        .map(|i| {
            let (r, a) = (
                released[i].load(Ordering::SeqCst),
                acquired[i].load(Ordering::SeqCst),
            );
            Duration::from_nanos(a.saturating_sub(r))
        })
        .collect();
    let row = Burst {
        deployment,
        keys: n,
        subscribed_in,
        bytes_per_waiter,
        releases: last(&released),
        acquisitions: last(&acquired),
        p50: quantile(&mut handoffs, 0.50),
        p99: quantile(&mut handoffs, 0.99),
        max: quantile(&mut handoffs, 1.0),
        redis_cpu,
    };
    eprintln!("{row:?}");
    Ok(row)
}

/// Polls the servers until `n` more channels than `before` are
/// subscribed, or the bound passes (`None`).
async fn subscribed(
    deployment: Where,
    admins: &[MultiplexedConnection],
    before: u64,
    n: usize,
    start: Instant,
) -> Res<Option<Duration>> {
    loop {
        if channels(deployment, admins).await? >= before + n as u64 {
            return Ok(Some(start.elapsed()));
        }
        if start.elapsed() > SUBSCRIBED_WITHIN {
            return Ok(None);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The sum over the servers of what `read` takes from each one's `INFO
/// section`.
async fn info_sum<T: std::iter::Sum<T>>(
    admins: &[MultiplexedConnection],
    section: &str,
    read: impl Fn(&str) -> T,
) -> Res<T> {
    let mut each = Vec::with_capacity(admins.len());
    for admin in admins {
        let info: String = redis::cmd("INFO")
            .arg(section)
            .query_async(&mut admin.clone())
            .await
            .map_err(redis_err)?;
        each.push(read(&info));
    }
    Ok(each.into_iter().sum())
}

/// The numbers of the fields `names` in an INFO text, summed.
fn fields<T: std::str::FromStr + std::iter::Sum<T>>(info: &str, names: &[&str]) -> T {
    info.lines()
        .filter_map(|line| {
            let (name, value) = line.split_once(':')?;
            names.contains(&name).then(|| value.trim().parse().ok())?
        })
        .sum()
}

/// The channels subscribed on the servers, all clients together (INFO
/// stats: `pubsub_channels`, or on a cluster `pubsubshard_channels`).
async fn channels(deployment: Where, admins: &[MultiplexedConnection]) -> Res<u64> {
    let field = match deployment {
        Where::OneNode => "pubsub_channels",
        Where::Cluster => "pubsubshard_channels",
    };
    info_sum(admins, "stats", |info| fields::<u64>(info, &[field])).await
}

/// Waits until the servers run no script for 100 ms (the waiters' tries
/// after their subscriptions are answered), at most 30 s.
async fn quiet(admins: &[MultiplexedConnection]) -> Res<()> {
    let mut last = u64::MAX;
    for _ in 0..300 {
        let calls = info_sum(admins, "commandstats", |info| {
            lock_testkit::calls_in(info, "evalsha")
        })
        .await?;
        if calls == last {
            return Ok(());
        }
        last = calls;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// The servers' CPU seconds so far (INFO cpu, user and system), summed.
async fn cpu(admins: &[MultiplexedConnection]) -> Res<f64> {
    info_sum(admins, "cpu", |info| {
        fields::<f64>(info, &["used_cpu_user", "used_cpu_sys"])
    })
    .await
}

/// The Markdown section of (n).
pub fn render(rows: &[Burst]) -> String {
    let mut out = String::from(
        "### (n) A burst of hand-offs: N keys held by one client, waited on by another, released at once\n\n\
         | deployment | keys | waiters subscribed in | bytes per waiting call | releases, first to last | \
         acquisitions, first to last | hand-off p50 | p99 | max | Redis CPU in the burst |\n\
         |---|---|---|---|---|---|---|---|---|---|\n",
    );
    let ms = |d: Duration| format!("{:.0} ms", d.as_secs_f64() * 1e3);
    for r in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            match r.deployment {
                Where::OneNode => "one node",
                Where::Cluster => "Cluster, 3 masters",
            },
            r.keys,
            r.subscribed_in.map_or("not all".into(), ms),
            r.bytes_per_waiter,
            ms(r.releases),
            ms(r.acquisitions),
            ms(r.p50),
            ms(r.p99),
            ms(r.max),
            ms(r.redis_cpu),
        );
    }
    out
}
