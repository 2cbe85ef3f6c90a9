//! (m) Memory after churn: distinct keys taken and released at a steady
//! rate (1,000 a second) through the library, then what Redis keeps of them
//! and for how long. A freed lock keeps its key, `L1:<fence>:f:<owner>`, for the
//! rest of its lease (the fence must outlive a holder that may still write
//! with it; see `docs/redis-layout.md`), so the keys left are about the
//! rate times the lease, and the last is gone about a lease after the churn
//! ends.

use std::fmt::Write as _;
use std::time::Duration;

use lock_runtime::{LockError, LockOptions};
use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

use crate::contenders::{LEASE, PREFIX};
use crate::workloads::{redis_err, Bench, Config, Res};

/// The churn starts a batch of keys at each tick: a second's keys in 100
/// batches, 10 ms apart.
const TICKS_PER_SECOND: u32 = 100;

/// What (m) measured.
#[derive(Clone, Debug)]
pub struct Churn {
    /// Keys taken and released, each once.
    pub keys: u64,
    /// From the first pair's start to the last one's end.
    pub took: Duration,
    /// The lease of every lock.
    pub lease: Duration,
    /// INFO memory `used_memory` before the churn, right after it, and
    /// when the keys it left were gone (or at the end of the wait).
    pub memory_before: u64,
    pub memory_after: u64,
    pub memory_gone: u64,
    /// DBSIZE right after the churn (the clients' registry entries
    /// included).
    pub dbsize_after: u64,
    /// The churn's keys still in Redis right after it.
    pub left_after: u64,
    /// The last of them: its PTTL right after the churn, in ms.
    pub last_pttl_ms: i64,
    /// How long after the churn's end the last of its keys was gone; `None`
    /// when some were still there at the end of the wait (lease + 5 s).
    pub gone_after: Option<Duration>,
    /// The churn's keys still there at the end of the wait.
    pub left_at_end: u64,
}

/// The lease (m) uses: the library's default, but a short one in smoke
/// runs, whose churn is short too.
pub fn lease(cfg: &Config) -> Duration {
    cfg.m_lease.unwrap_or(LEASE)
}

/// (m) `cfg.m_rate` distinct keys a second taken and released through the
/// library's global client for `cfg.m_time`, then Redis's memory and the
/// keys left, polled until they are gone (at most the lease + 5 s).
pub async fn run(bench: &Bench, cfg: &Config) -> Res<Churn> {
    bench.fresh().await?;
    let mut admin = bench.admin.clone();
    let lease = lease(cfg);
    let memory_before = used_memory(&mut admin).await?;
    let start = Instant::now();
    let keys = churn(bench, cfg, lease).await?;
    let took = start.elapsed();
    let end = Instant::now();
    let memory_after = used_memory(&mut admin).await?;
    let dbsize_after: u64 = redis::cmd("DBSIZE")
        .query_async(&mut admin)
        .await
        .map_err(redis_err)?;
    let left_after = churn_keys(&mut admin).await?;
    let last = format!("{PREFIX}{}", key(keys.saturating_sub(1)));
    let last_pttl_ms: i64 = redis::cmd("PTTL")
        .arg(&last)
        .query_async(&mut admin)
        .await
        .map_err(redis_err)?;

    // Each second (a quarter of a shorter lease), until no key is left.
    let poll = (lease / 4).min(Duration::from_secs(1));
    let deadline = end + lease + Duration::from_secs(5);
    let mut left = left_after;
    let mut gone_after = None;
    for _ in 0..1_000 {
        if left == 0 {
            gone_after = Some(end.elapsed());
            break;
        }
        if Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(poll).await;
        left = churn_keys(&mut admin).await?;
    }
    Ok(Churn {
        keys,
        took,
        lease,
        memory_before,
        memory_after,
        memory_gone: used_memory(&mut admin).await?,
        dbsize_after,
        left_after,
        last_pttl_ms,
        gone_after,
        left_at_end: left,
    })
}

/// The `i`-th key of the churn, as given to the library.
fn key(i: u64) -> String {
    format!("m:{i}")
}

/// Takes and releases `cfg.m_rate` keys a second for `cfg.m_time`, each
/// key once: at each tick a task takes its batch of keys one after the
/// other. Answers how many pairs were made.
async fn churn(bench: &Bench, cfg: &Config, lease: Duration) -> Res<u64> {
    let per_tick = u64::from(cfg.m_rate.div_ceil(TICKS_PER_SECOND));
    let ticks = (cfg.m_time.as_secs_f64() * f64::from(TICKS_PER_SECOND)).round() as u64;
    let options = LockOptions::new().lease(lease);
    let mut interval = tokio::time::interval(Duration::from_secs(1) / TICKS_PER_SECOND);
    let mut tasks = Vec::with_capacity(ticks as usize);
    for tick in 0..ticks {
        interval.tick().await;
        let client = bench.client.clone();
        tasks.push(tokio::spawn(async move {
            for i in tick * per_tick..(tick + 1) * per_tick {
                client
                    .run_locked(&key(i), options, async { Ok::<(), LockError>(()) })
                    .await
                    .map_err(|e| format!("(m) key {}: {e}", key(i)))?;
            }
            Ok::<u64, String>(per_tick)
        }));
    }
    let mut pairs = 0;
    for task in tasks {
        pairs += task.await.map_err(|e| e.to_string())??;
    }
    Ok(pairs)
}

/// INFO memory's `used_memory`, in bytes.
async fn used_memory(admin: &mut MultiplexedConnection) -> Res<u64> {
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(admin)
        .await
        .map_err(redis_err)?;
    info.lines()
        .find_map(|line| line.strip_prefix("used_memory:"))
        .and_then(|n| n.trim().parse().ok())
        .ok_or_else(|| "INFO memory has no used_memory".to_owned())
}

/// How many of the churn's keys are in Redis (SCAN, bounded).
async fn churn_keys(admin: &mut MultiplexedConnection) -> Res<u64> {
    let pattern = format!("{PREFIX}m:*");
    let mut cursor = 0u64;
    let mut count = 0u64;
    for _ in 0..100_000 {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(1_000)
            .query_async(admin)
            .await
            .map_err(redis_err)?;
        count += keys.len() as u64;
        cursor = next;
        if cursor == 0 {
            return Ok(count);
        }
    }
    Err("(m) SCAN did not finish in 100,000 steps".into())
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// The Markdown section of (m), the (f).
pub fn render(runs: &[Churn], cfg: &Config) -> String {
    let Some(m) = runs.first() else {
        return String::new();
    };
    let mut out = String::new();
    let o = &mut out;
    let lease_note = match cfg.m_lease {
        Some(lease) => format!(
            "a {:.1} s lease (short, to keep this run short; the library's default is {} s)",
            lease.as_secs_f64(),
            LEASE.as_secs()
        ),
        None => format!("the library's default {} s lease", LEASE.as_secs()),
    };
    let _ = writeln!(
        o,
        "### (m) Memory after 1,000 keys a second: {} distinct keys taken and released through the \
         global client's `run_locked`, {}, multi-thread runtime, over {:.1} s\n",
        m.keys,
        lease_note,
        m.took.as_secs_f64()
    );
    let _ = writeln!(o, "| pairs per second | Redis `used_memory` before | right after | when the keys were gone | DBSIZE right after | the churn's keys left right after | per key left | the last key's PTTL right after | the last key gone after the churn's end |");
    let _ = writeln!(o, "|---|---|---|---|---|---|---|---|---|");
    let grown = m.memory_after.saturating_sub(m.memory_before);
    let gone = match m.gone_after {
        Some(d) => format!("{:.1} s", d.as_secs_f64()),
        None => format!(
            "not within {:.0} s: {} left",
            (m.lease + Duration::from_secs(5)).as_secs_f64(),
            m.left_at_end
        ),
    };
    let _ = writeln!(
        o,
        "| {:.0} | {} | {} | {} | {} | {} | {:.0} B | {:.1} s | {} |",
        m.keys as f64 / m.took.as_secs_f64().max(1e-9),
        mib(m.memory_before),
        mib(m.memory_after),
        mib(m.memory_gone),
        m.dbsize_after,
        m.left_after,
        grown as f64 / m.left_after.max(1) as f64,
        m.last_pttl_ms as f64 / 1000.0,
        gone,
    );
    let _ = writeln!(
        o,
        "\nWhat a released lock leaves behind: its key, `L1:<fence>:f:<owner id>` (who freed it), \
         kept for the rest of its \
         lease so that its fence outlives any holder that may still write with it, then expired by \
         Redis. Per key left: `used_memory` right after less before, over the keys left. The keys \
         were counted by SCAN every {} until none was left (at most the lease + 5 s).\n",
        if m.lease >= Duration::from_secs(4) {
            "second".to_owned()
        } else {
            format!("{:.0} ms", (m.lease / 4).as_secs_f64() * 1e3)
        }
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contenders::Lockers;
    use lock_runtime::LockClient;
    use lock_testkit::Server;

    /// A short churn on a real server: every key taken and released once,
    /// the freed keys there right after with the rest of their lease, and
    /// gone within the lease (and the bound) after.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_churn_leaves_its_freed_keys_for_their_lease_then_none() {
        let server = Server::tcp(&[]);
        let url = server.url();
        let admin = redis::Client::open(url.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let bench = Bench {
            lockers: Lockers::connect(&url).await.unwrap(),
            client: LockClient::connect(&url).await.unwrap(),
            admin,
            server_pid: server.pid().unwrap(),
            others: Vec::new(),
        };
        let mut cfg = Config::smoke();
        cfg.m_time = Duration::from_millis(300);
        cfg.m_lease = Some(Duration::from_secs(2));
        let m = run(&bench, &cfg).await.unwrap();
        assert_eq!(m.keys, 300);
        // A 2 s lease outlives a churn of 0.3 s (on a busy machine, of up
        // to a few seconds: then the first keys may be gone already).
        assert!(
            m.left_after > 0 && m.left_after <= 300,
            "{} keys left",
            m.left_after
        );
        assert!(m.dbsize_after >= m.left_after);
        assert!(
            m.last_pttl_ms > 0 && m.last_pttl_ms <= 2_000,
            "PTTL {}",
            m.last_pttl_ms
        );
        let gone = m.gone_after.expect("the keys outlived the lease + 5 s");
        assert!(gone <= Duration::from_secs(7), "gone after {gone:?}");
        assert_eq!(m.left_at_end, 0);
        let text = render(&[m], &cfg);
        assert!(text.contains("a 2.0 s lease (short"), "{text}");
    }
}
