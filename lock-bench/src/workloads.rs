//! The first five workloads of the bench, each for one contender at a
//! time (the lock kinds' are in `kinds.rs`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_runtime::LockClient;
use redis::aio::MultiplexedConnection;
use tokio::sync::watch;
use tokio::time::{timeout, Instant};

use crate::alloc;
use crate::contenders::{library_held, Failed, Key, Lockers, Who, HELD_LEASE_MS};
use crate::cpu::{context_switches, Meter, Split};
use crate::stats::{quantile, Commands};

/// Counts and durations of one run.
#[derive(Clone, Debug)]
pub struct Config {
    pub runs: usize,
    pub a_ops: usize,
    pub b_tasks: usize,
    pub b_time: Duration,
    pub c_tasks: usize,
    pub c_time: Duration,
    pub d_ops: usize,
    pub e_locks: usize,
    /// (e): the lease of the held locks; the watchdog renews them at a
    /// third of it.
    pub e_lease: Duration,
    /// (e): how long the locks stay held once all are taken (the window
    /// in which the renewals are counted).
    pub e_hold: Duration,
    pub e_runs: usize,
    /// (g), (h): pairs per kind per run.
    pub g_pairs: usize,
    /// (i): how long the readers and the writer run.
    pub i_time: Duration,
    /// (j): how long the 3 clients hand the lock round.
    pub j_time: Duration,
    /// (m): how long keys are taken and released, how many a second, and
    /// their lease (`None`: the library's default).
    pub m_time: Duration,
    pub m_rate: u32,
    pub m_lease: Option<Duration>,
    /// (n): the numbers of keys in a burst of hand-offs.
    pub n_keys: &'static [usize],
    /// (o): the numbers of clients in a fleet on one key, and how long
    /// each fleet runs.
    pub o_clients: &'static [usize],
    pub o_time: Duration,
}

impl Config {
    pub fn full() -> Config {
        Config {
            runs: 5,
            a_ops: 5_000,
            b_tasks: 64,
            b_time: Duration::from_secs(2),
            c_tasks: 8,
            c_time: Duration::from_secs(2),
            d_ops: 10_000,
            e_locks: 100_000,
            e_lease: Duration::from_secs(30),
            // Three renewal periods of the library (10 s), and the one
            // extension rslock makes 500 ms before a lock's validity ends.
            e_hold: Duration::from_secs(31),
            // One run: each takes the locks three times and holds them
            // 31 s (about 75 s for both contenders).
            e_runs: 1,
            g_pairs: 10_000,
            i_time: Duration::from_secs(10),
            j_time: Duration::from_secs(5),
            m_time: Duration::from_secs(60),
            m_rate: 1_000,
            m_lease: None,
            n_keys: &[1_000, 10_000, 50_000, 100_000],
            o_clients: &[1, 8, 32, 128],
            o_time: Duration::from_secs(5),
        }
    }

    /// Tiny counts: checks that every workload runs, in a few seconds.
    pub fn smoke() -> Config {
        Config {
            runs: 1,
            a_ops: 50,
            b_tasks: 64,
            b_time: Duration::from_millis(100),
            c_tasks: 8,
            c_time: Duration::from_millis(150),
            d_ops: 50,
            e_locks: 200,
            e_lease: Duration::from_secs(3),
            e_hold: Duration::from_millis(1_300),
            e_runs: 1,
            g_pairs: 50,
            i_time: Duration::from_secs(2),
            j_time: Duration::from_millis(500),
            m_time: Duration::from_secs(2),
            m_rate: 1_000,
            // The default 30 s would keep the run waiting for the keys.
            m_lease: Some(Duration::from_millis(500)),
            n_keys: &[200],
            o_clients: &[1, 4],
            o_time: Duration::from_millis(300),
        }
    }
}

/// What every workload needs.
pub struct Bench {
    pub lockers: Lockers,
    /// The library's client, also installed as the global one.
    pub client: LockClient,
    /// The bench's own connection: INFO, CONFIG RESETSTAT, FLUSHALL, DBSIZE.
    pub admin: MultiplexedConnection,
    pub server_pid: u32,
    /// Three more clients of the library, each with its own connections and
    /// thread, as three processes would have: (i)'s writer, (j)'s holders.
    pub others: Vec<LockClient>,
}

pub(crate) type Res<T> = Result<T, String>;

pub(crate) fn redis_err(e: redis::RedisError) -> String {
    format!("redis: {e}")
}

impl Bench {
    pub(crate) async fn fresh(&self) -> Res<()> {
        let mut admin = self.admin.clone();
        redis::cmd("FLUSHALL")
            .query_async::<()>(&mut admin)
            .await
            .map_err(redis_err)?;
        Commands::reset(&mut admin).await.map_err(redis_err)
    }

    pub(crate) async fn reset(&self) -> Res<()> {
        Commands::reset(&mut self.admin.clone())
            .await
            .map_err(redis_err)
    }

    pub(crate) async fn commands(&self) -> Res<Commands> {
        Commands::read(&mut self.admin.clone())
            .await
            .map_err(redis_err)
    }

    async fn dbsize(&self) -> Res<u64> {
        redis::cmd("DBSIZE")
            .query_async(&mut self.admin.clone())
            .await
            .map_err(redis_err)
    }
}

fn floor_owner(task: usize) -> String {
    format!("floor-owner-{}-{task}", std::process::id())
}

// ---------------------------------------------------------------- (a)

#[derive(Clone, Debug)]
pub struct Uncontended {
    pub p50: Duration,
    pub p99: Duration,
    pub ops: u64,
    pub commands: Commands,
    pub allocs_per_op: f64,
    pub cpu: Split,
    /// This process's threads' context switches per call.
    pub switches_per_op: f64,
}

/// (a) One task takes and releases one free lock, again and again.
pub async fn uncontended(bench: &Bench, who: Who, cfg: &Config) -> Res<Uncontended> {
    bench.fresh().await?;
    let key = Key::new(who, "a");
    let owner = floor_owner(0);
    for _ in 0..cfg.a_ops.min(200) {
        let body = async {};
        bench
            .lockers
            .locked(who, &key, &owner, body)
            .await
            .map_err(|e| e.to_string())?;
    }
    let mut samples = Vec::with_capacity(cfg.a_ops);
    bench.reset().await?;
    let allocs = alloc::allocations();
    let meter = Meter::start(bench.server_pid);
    let switches = context_switches();
    let deadline = Instant::now() + Duration::from_secs(30);
    for _ in 0..cfg.a_ops {
        if Instant::now() > deadline {
            break;
        }
        let start = Instant::now();
        bench
            .lockers
            .locked(who, &key, &owner, async {})
            .await
            .map_err(|e| e.to_string())?;
        samples.push(start.elapsed());
    }
    let allocs = alloc::allocations() - allocs;
    let switches = context_switches().saturating_sub(switches);
    let cpu = meter.stop();
    let commands = bench.commands().await?;
    let ops = samples.len() as u64;
    Ok(Uncontended {
        p50: quantile(&mut samples, 0.50),
        p99: quantile(&mut samples, 0.99),
        ops,
        commands,
        allocs_per_op: allocs as f64 / ops.max(1) as f64,
        cpu,
        switches_per_op: switches as f64 / ops.max(1) as f64,
    })
}

// ---------------------------------------------------------------- (b)

#[derive(Clone, Debug)]
pub struct Parallel {
    pub ops_per_sec: f64,
    pub ops: u64,
    pub commands: Commands,
    pub cpu: Split,
}

impl Parallel {
    /// Redis CPU per pair, µs: INFO commandstats' time in the commands the
    /// clients sent (see [`Commands::server_usec`]).
    pub fn redis_us(&self) -> f64 {
        self.commands.server_usec() as f64 / self.ops.max(1) as f64
    }

    /// The redis-server process's CPU per pair, µs (/proc, 10 ms ticks).
    pub fn server_process_us(&self) -> f64 {
        self.cpu.server.as_secs_f64() * 1e6 / self.ops.max(1) as f64
    }
}

/// (b) Tasks on keys of their own (64 on 64), as fast as they can.
pub async fn parallel(bench: &Bench, who: Who, cfg: &Config) -> Res<Parallel> {
    bench.fresh().await?;
    let run = |duration: Duration| {
        let tasks: Vec<_> = (0..cfg.b_tasks)
            .map(|i| {
                let lockers = bench.lockers.clone();
                tokio::spawn(async move {
                    let key = Key::new(who, &format!("b:{i}"));
                    let owner = floor_owner(i);
                    let deadline = Instant::now() + duration;
                    let mut ops = 0u64;
                    while ops < 10_000_000 && Instant::now() < deadline {
                        lockers.locked(who, &key, &owner, async {}).await?;
                        ops += 1;
                    }
                    Ok::<u64, Failed>(ops)
                })
            })
            .collect();
        async move {
            let mut total = 0;
            for task in tasks {
                total += task
                    .await
                    .map_err(|e| e.to_string())?
                    .map_err(|e| e.to_string())?;
            }
            Ok::<u64, String>(total)
        }
    };
    run(cfg.b_time / 10).await?; // warm-up
    bench.reset().await?;
    let meter = Meter::start(bench.server_pid);
    let start = Instant::now();
    let ops = run(cfg.b_time).await?;
    let elapsed = start.elapsed();
    let cpu = meter.stop();
    if std::env::var_os("LOCK_BENCH_DEBUG").is_some() {
        let c = bench.commands().await?;
        for (name, calls) in &c.0 {
            let usec = c.1.get(name).copied().unwrap_or(0);
            eprintln!(
                "(b) {who:?} {name}: {:.3} per call, {:.2} µs each",
                *calls as f64 / ops as f64,
                usec as f64 / (*calls).max(1) as f64
            );
        }
    }
    Ok(Parallel {
        ops_per_sec: ops as f64 / elapsed.as_secs_f64(),
        ops,
        commands: bench.commands().await?,
        cpu,
    })
}

// ---------------------------------------------------------------- (c)

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The releaser calls again at once.
    RetryAtOnce,
    /// The releaser waits until another task holds the lock.
    StepBack,
}

#[derive(Clone, Debug)]
pub struct Contended {
    pub cs_per_sec: f64,
    pub critical_sections: u64,
    pub handoff_p50: Duration,
    pub handoff_p99: Duration,
    /// Acquire attempts that found the lock held, per critical section.
    pub failed_per_cs: f64,
    pub wait_p99: Duration,
    pub wait_max: Duration,
    /// Critical sections whose holder differs from the one before.
    pub switches: f64,
    /// Critical sections whose holder called after the section before had
    /// begun, ahead of the tasks already waiting.
    pub jumped: f64,
    pub overlaps: u64,
    pub timeouts: u64,
    /// Step-back mode: times the lock sat free for 1 s while others waited.
    pub stalls: u64,
    pub commands: Commands,
}

#[derive(Default)]
struct Section {
    inside: bool,
    last_end: Option<Instant>,
    last_holder: Option<usize>,
    last_start: Option<Instant>,
    jumped: u64,
    count: u64,
    switches: u64,
    overlaps: u64,
    handoffs: Vec<Duration>,
}

/// (c) Tasks on one key: critical sections per second, hand-off latency
/// (the end of one body to the start of the next), failed acquires, waits.
pub async fn contended(bench: &Bench, who: Who, mode: Mode, cfg: &Config) -> Res<Contended> {
    bench.fresh().await?;
    let key = Key::new(who, "c");
    // Warm-up: the scripts are loaded and the library subscribes once.
    bench
        .lockers
        .locked(who, &key, &floor_owner(0), async {})
        .await
        .map_err(|e| e.to_string())?;
    bench.reset().await?;

    let section = Arc::new(Mutex::new(Section::default()));
    let (starts, _) = watch::channel(0u64);
    let starts = Arc::new(starts);
    let start = Instant::now();
    let deadline = start + cfg.c_time;
    let tasks: Vec<_> = (0..cfg.c_tasks)
        .map(|me| {
            let (lockers, key, section, starts) =
                (bench.lockers.clone(), key.clone(), section.clone(), starts.clone());
            tokio::spawn(async move {
                let owner = floor_owner(me);
                let mut waits = Vec::new();
                let mut timeouts = 0u64;
                let mut stalls = 0u64;
                let mut n = 0;
                while n < 1_000_000 && Instant::now() < deadline {
                    n += 1;
                    let called = Instant::now();
                    let mut mine = 0;
                    let body = async {
                        let now = Instant::now();
                        waits.push(now - called);
                        if std::env::var_os("LOCK_BENCH_DEBUG").is_some() && now - called > Duration::from_millis(50) {
                            eprintln!("{who:?} {mode:?} task {me} call {n}: waited {:?}, called at {:?} after start", now - called, called - start);
                        }
                        {
                            let mut s = section.lock().unwrap();
                            if s.inside {
                                s.overlaps += 1;
                            }
                            s.inside = true;
                            if let Some(end) = s.last_end {
                                s.handoffs.push(now - end);
                            }
                            // Called after the section before began: every
                            // other task was already waiting, so this one
                            // went ahead of them.
                            if s.last_start.is_some_and(|prev| called > prev) {
                                s.jumped += 1;
                            }
                            s.last_start = Some(now);
                            if s.last_holder.is_some_and(|h| h != me) {
                                s.switches += 1;
                            }
                            s.last_holder = Some(me);
                            s.count += 1;
                            mine = s.count;
                        }
                        starts.send_replace(mine);
                        tokio::task::yield_now().await;
                        let mut s = section.lock().unwrap();
                        s.inside = false;
                        s.last_end = Some(Instant::now());
                    };
                    match lockers.locked(who, &key, &owner, body).await {
                        Ok(()) => {}
                        Err(Failed::TimedOut) => timeouts += 1,
                        Err(e) => return Err(e.to_string()),
                    }
                    if mode == Mode::StepBack && mine > 0 && Instant::now() < deadline {
                        let mut rx = starts.subscribe();
                        // Bounded: with nobody else taking the lock, go on
                        // after 1 s (a stall: the lock sat free while the
                        // others waited).
                        let stepped = timeout(Duration::from_secs(1), rx.wait_for(|&n| n > mine)).await;
                        if stepped.is_err() && Instant::now() < deadline {
                            stalls += 1;
                        }
                    }
                }
                Ok((waits, timeouts, stalls))
            })
        })
        .collect();
    let mut waits = Vec::new();
    let mut timeouts = 0;
    let mut stalls = 0;
    for task in tasks {
        let (w, t, st) = task.await.map_err(|e| e.to_string())??;
        waits.extend(w);
        timeouts += t;
        stalls += st;
    }
    let elapsed = start.elapsed();
    let commands = bench.commands().await?;
    let mut s = std::mem::take(&mut *section.lock().unwrap());
    let cs = s.count;
    let attempts = match who {
        // rslock's acquire is SET NX PX (a failed one also sends its unlock
        // script); the others' is one acquire.lua call, and each critical
        // section also sends one release.lua call.
        Who::Rslock => commands.get("set"),
        _ => commands.script_calls().saturating_sub(cs),
    };
    Ok(Contended {
        cs_per_sec: cs as f64 / elapsed.as_secs_f64(),
        critical_sections: cs,
        handoff_p50: quantile(&mut s.handoffs, 0.50),
        handoff_p99: quantile(&mut s.handoffs, 0.99),
        failed_per_cs: attempts.saturating_sub(cs) as f64 / cs.max(1) as f64,
        wait_p99: quantile(&mut waits, 0.99),
        wait_max: quantile(&mut waits, 1.0),
        switches: s.switches as f64 / cs.saturating_sub(1).max(1) as f64,
        jumped: s.jumped as f64 / cs.saturating_sub(1).max(1) as f64,
        overlaps: s.overlaps,
        timeouts,
        stalls,
        commands,
    })
}

// ---------------------------------------------------------------- (d)

#[derive(Clone, Debug)]
pub struct Nested {
    pub per_call: Duration,
    pub round_trips_per_call: f64,
    pub commands: Commands,
}

/// (d) Locked calls on a key that the running body already holds.
pub async fn nested(bench: &Bench, who: Who, cfg: &Config) -> Res<Nested> {
    bench.fresh().await?;
    let key = Key::new(who, "d");
    let owner = floor_owner(0);
    let lockers = &bench.lockers;
    let n = cfg.d_ops as u32;
    let outer = async {
        let run = async {
            bench.reset().await?;
            let start = Instant::now();
            for _ in 0..n {
                match who {
                    // The same owner takes the hash lock again (its count
                    // goes up), then gives that hold back: two round trips.
                    Who::Floor => {
                        let token = lockers
                            .floor
                            .try_acquire(&key.full, &owner, crate::contenders::LEASE)
                            .await
                            .map_err(|e| e.to_string())?
                            .ok_or("the floor could not re-enter")?;
                        lockers
                            .floor
                            .release(&key.full, &owner, token)
                            .await
                            .map_err(|e| e.to_string())?;
                    }
                    _ => {
                        crate::contenders::library(&key.short, async {})
                            .await
                            .map_err(|e| e.to_string())?;
                    }
                }
            }
            let elapsed = start.elapsed();
            Ok::<_, String>((elapsed, bench.commands().await?))
        };
        let result = run.await;
        tokio::task::yield_now().await;
        result
    };
    let result = std::sync::Mutex::new(None);
    let body = async {
        *result.lock().unwrap() = Some(outer.await);
    };
    lockers
        .locked(who, &key, &owner, body)
        .await
        .map_err(|e| e.to_string())?;
    let (elapsed, commands) = result
        .into_inner()
        .unwrap()
        .ok_or("the outer call did not run its body")??;
    Ok(Nested {
        per_call: elapsed / n.max(1),
        round_trips_per_call: commands.round_trips() as f64 / n.max(1) as f64,
        commands,
    })
}

// ---------------------------------------------------------------- (e)

#[derive(Clone, Debug)]
pub struct Held {
    pub locks: usize,
    pub lease: Duration,
    pub acquire_time: Duration,
    /// Client memory per held lock: live bytes with the locks held, less
    /// the same tasks without locks.
    pub bytes_per_lock: f64,
    /// Of which: the held call's future, inline in its task (its size less
    /// the control's).
    pub future_bytes: usize,
    /// Locks renewed in the hold window, as Redis counts them: the
    /// renewal scripts' inner `PEXPIREAT` or `PEXPIRE` (this library: the
    /// latter in its earlier renewal script, and for a shared kind's hold)
    /// or `SET` (rslock's extend) calls.
    pub renewed: u64,
    /// Renewal script calls in the hold window.
    pub renewal_calls: u64,
    /// Redis time (µs) inside those calls, from INFO commandstats.
    pub renewal_usec: u64,
    /// The renewal calls that SLOWLOG logged (every one of at least
    /// [`SLOW_FROM_USEC`]), by their Redis time (µs), sorted.
    pub logged_usec: Vec<u64>,
    /// Locks whose key was gone at the end of the hold, or whose call
    /// returned an error.
    pub expired: u64,
    /// The library's `renewing()` while held.
    pub renewing: Option<usize>,
}

/// SLOWLOG logs the script calls of at least this many µs during (e)'s
/// hold window: every renewal call of a batch, few single-lock ones.
pub const SLOW_FROM_USEC: u64 = 100;

impl Held {
    /// Renewal periods the window saw: renewals per lock.
    fn rounds(&self) -> f64 {
        self.renewed as f64 / self.locks.max(1) as f64
    }

    /// Renewal calls per renewal period (per renewal of every lock).
    pub fn calls_per_period(&self) -> f64 {
        self.renewal_calls as f64 / self.rounds()
    }

    /// Mean Redis time (µs) per renewal call: how long one blocks Redis.
    pub fn call_usec(&self) -> f64 {
        self.renewal_usec as f64 / self.renewal_calls.max(1) as f64
    }

    /// Redis time (µs) per held lock per renewal period.
    pub fn usec_per_lock(&self) -> f64 {
        self.renewal_usec as f64 / self.renewed as f64
    }

    /// The longest renewal call (µs), if one took at least
    /// [`SLOW_FROM_USEC`].
    pub fn slowest_call_usec(&self) -> Option<u64> {
        self.logged_usec.last().copied()
    }

    /// The median renewal call (µs), when it is among those SLOWLOG logged
    /// (the others took less than any of them).
    pub fn median_call_usec(&self) -> Option<u64> {
        let unlogged = self
            .renewal_calls
            .checked_sub(self.logged_usec.len() as u64)?;
        let rank = (self.renewal_calls / 2).checked_sub(unlogged)?;
        self.logged_usec.get(usize::try_from(rank).ok()?).copied()
    }

    /// Renewal calls that blocked Redis for more than 1 ms.
    pub fn calls_over_1ms(&self) -> usize {
        self.logged_usec.iter().filter(|&&u| u > 1_000).count()
    }
}

/// Spawns `n` tasks that each run `hold(i, body)`, where the body reports in
/// and waits for `release`. Returns when all reported (or after 120 s).
type Body = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

async fn spawn_holders<F, Fut, E>(
    n: usize,
    hold: F,
) -> (
    Vec<tokio::task::JoinHandle<Result<(), E>>>,
    watch::Sender<bool>,
    Arc<AtomicUsize>,
)
where
    F: Fn(usize, Body) -> Fut,
    Fut: std::future::Future<Output = Result<(), E>> + Send + 'static,
    E: Send + 'static,
{
    let (release, released) = watch::channel(false);
    let inside = Arc::new(AtomicUsize::new(0));
    let tasks = (0..n)
        .map(|i| {
            let mut released = released.clone();
            let inside = inside.clone();
            let body = Box::pin(async move {
                inside.fetch_add(1, Ordering::Relaxed);
                let _ = released.wait_for(|&r| r).await;
            });
            tokio::spawn(hold(i, body))
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    while inside.load(Ordering::Relaxed) < n && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    (tasks, release, inside)
}

async fn join_holders<E: std::fmt::Display>(
    tasks: Vec<tokio::task::JoinHandle<Result<(), E>>>,
) -> (u64, Option<String>) {
    let mut failed = 0;
    let mut first = None;
    for task in tasks {
        match task.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                failed += 1;
                first.get_or_insert(e.to_string());
            }
            Err(e) => {
                failed += 1;
                first.get_or_insert(e.to_string());
            }
        }
    }
    (failed, first)
}

/// (e) Many locks held at once, with renewal: what they cost the client in
/// memory and Redis in renewal calls, and whether any expired.
///
/// Each task is the contender's call itself, given its key as a `String`
/// (as an application's handler would be), and the control's tasks are the
/// same key and body without a lock ([`unlocked`]): the difference is what
/// the lock costs, not the bench's own state.
pub async fn held(bench: &Bench, who: Who, cfg: &Config) -> Res<Held> {
    let lease = cfg.e_lease;
    match who {
        Who::Library => {
            let ms = u64::try_from(lease.as_millis()).unwrap_or(u64::MAX);
            HELD_LEASE_MS.store(ms, Ordering::Relaxed);
            let key = move |i: usize| Key::new(who, &format!("e:{i}")).short;
            let hold = move |i: usize, body: Body| library_held(key(i), body);
            held_by(bench, (who, cfg), key, hold).await
        }
        Who::Rslock => {
            let rslock = bench.lockers.rslock.clone();
            let key = move |i: usize| Key::new(who, &format!("e:{i}")).full;
            let hold = move |i: usize, body: Body| rslock_held(rslock.clone(), key(i), lease, body);
            held_by(bench, (who, cfg), key, hold).await
        }
        _ => Err(format!("{who} has no renewal")),
    }
}

/// rslock's `using`: `body` under the lock `key`, extended until it ends.
async fn rslock_held(
    rslock: rslock::LockManager,
    key: String,
    lease: Duration,
    body: Body,
) -> Result<(), String> {
    let held = rslock.using(key.as_bytes(), lease, async || body.await);
    match timeout(Duration::from_secs(60), held).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("rslock: not taken within 60 s".into()),
    }
}

/// (e)'s control: a holder's task without the lock, keeping its key.
async fn unlocked(key: String, body: Body) -> Result<(), String> {
    body.await;
    drop(key);
    Ok(())
}

/// (e) for one contender, whose call holding the lock `key(i)` around
/// `body` is `hold(i, body)`.
async fn held_by<K, F, Fut, E>(
    bench: &Bench,
    (who, cfg): (Who, &Config),
    key: K,
    hold: F,
) -> Res<Held>
where
    K: Fn(usize) -> String + Copy,
    F: Fn(usize, Body) -> Fut,
    Fut: std::future::Future<Output = Result<(), E>> + Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    // The call's future, inline in its task: its size less the control's.
    let future_bytes = std::mem::size_of_val(&hold(0, Box::pin(async {})))
        .saturating_sub(std::mem::size_of_val(&unlocked(key(0), Box::pin(async {}))));
    bench.fresh().await?;
    let n = cfg.e_locks;
    let allocs_before = alloc::allocations();
    // A first round takes and frees all the locks, so that buffers and
    // tables that a burst of n calls grows (and keeps) are in the baseline,
    // not counted as memory per held lock.
    let (tasks, release, _) = spawn_holders(n, &hold).await;
    if std::env::var_os("LOCK_BENCH_DEBUG").is_some() {
        eprintln!(
            "(e) {who:?}: {:.1} allocations per lock taken",
            (alloc::allocations() - allocs_before) as f64 / n as f64
        );
    }
    release.send_replace(true);
    join_holders(tasks).await;
    bench.fresh().await?;
    tokio::time::sleep(Duration::from_millis(200)).await;

    // The control: the same tasks, keys and bodies, without a lock.
    let before = alloc::live_bytes();
    let (tasks, release, _) = spawn_holders(n, |i, body| unlocked(key(i), body)).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let control = alloc::live_bytes() - before;
    release.send_replace(true);
    join_holders(tasks).await;

    let before = alloc::live_bytes();
    let start = Instant::now();
    let (tasks, release, inside) = spawn_holders(n, &hold).await;
    let acquire_time = start.elapsed();
    if inside.load(Ordering::Relaxed) < n {
        release.send_replace(true);
        let (_, first) = join_holders(tasks).await;
        return Err(format!(
            "only {} of {n} locks taken: {}",
            inside.load(Ordering::Relaxed),
            first.unwrap_or_default()
        ));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let with_locks = alloc::live_bytes() - before;
    let renewing = (who == Who::Library).then(|| bench.client.renewing());

    slowlog_from(bench, SLOW_FROM_USEC, 65_536).await?;
    bench.reset().await?;
    tokio::time::sleep(cfg.e_hold).await;
    let commands = bench.commands().await?;
    let logged_usec = slow_script_calls(bench).await?;
    slowlog_from(bench, 10_000, 128).await?;
    let present = bench.dbsize().await?;
    release.send_replace(true);
    let (failed, _) = join_holders(tasks).await;

    Ok(Held {
        locks: n,
        lease: cfg.e_lease,
        acquire_time,
        bytes_per_lock: (with_locks - control) as f64 / n as f64,
        future_bytes,
        renewed: commands.get("pexpireat") + commands.get("pexpire") + commands.get("set"),
        renewal_calls: commands.script_calls(),
        renewal_usec: commands.script_usec(),
        logged_usec,
        expired: (n as u64).saturating_sub(present).max(failed),
        renewing,
    })
}

/// Has SLOWLOG keep the last `len` commands of at least `usec` µs, from
/// none now.
async fn slowlog_from(bench: &Bench, usec: u64, len: u64) -> Res<()> {
    let mut admin = bench.admin.clone();
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-log-slower-than")
        .arg(usec)
        .arg("slowlog-max-len")
        .arg(len)
        .query_async::<()>(&mut admin)
        .await
        .map_err(redis_err)?;
    redis::cmd("SLOWLOG")
        .arg("RESET")
        .query_async::<()>(&mut admin)
        .await
        .map_err(redis_err)
}

/// The Redis time (µs) of the script calls that SLOWLOG logged, sorted.
async fn slow_script_calls(bench: &Bench) -> Res<Vec<u64>> {
    let entries: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(65_536)
        .query_async(&mut bench.admin.clone())
        .await
        .map_err(redis_err)?;
    // Each entry: id, timestamp, duration (µs), the command's words, ...
    let mut usec: Vec<u64> = entries
        .iter()
        .filter_map(|entry| {
            let redis::Value::Array(fields) = entry else {
                return None;
            };
            let duration: u64 = redis::from_redis_value(fields.get(2)?.clone()).ok()?;
            let words: Vec<String> = redis::from_redis_value(fields.get(3)?.clone()).ok()?;
            let name = words.first()?.to_ascii_lowercase();
            (name == "evalsha" || name == "eval").then_some(duration)
        })
        .collect();
    usec.sort_unstable();
    Ok(usec)
}
