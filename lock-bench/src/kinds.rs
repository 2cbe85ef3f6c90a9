//! The lock kinds (read, permits, fair) side by side with the plain lock,
//! in one run:
//! - (g) uncontended pairs (acquire + release) through the library, and
//!   two patterns of the plain lock: two keys in one call, a fenced write;
//! - (h) the same pairs as raw script calls, with the plain lock's scripts
//!   from before the kinds, so that old and new are weighed in one run;
//! - (i) 8 readers and a writer on one key;
//! - (j) one key handed round 3 clients.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use lock_runtime::{LockClient, LockError, LockMode, LockOptions};
use redis::aio::MultiplexedConnection;
use redis::{Script, Value};
use tokio::time::Instant;

use crate::contenders::{
    runtime_script, BARE_ACQUIRE_SOURCE, BARE_RELEASE_SOURCE, LEASE, OLD_ACQUIRE_SOURCE,
    OLD_RELEASE_SOURCE,
};
use crate::cpu::Meter;
use crate::stats::{quantile, server_cpu, Commands};
use crate::workloads::{redis_err, Bench, Config, Res};

/// The count of the counted lock in (g) and (h).
pub const PERMITS: u32 = 8;
/// How much earlier a call must have begun to wait than one that entered
/// before it for (j) to count the pair as served out of order.
pub const ORDER_MARGIN: Duration = Duration::from_millis(5);
/// The body of a reader, and of the writer, in (i).
pub const I_BODY: Duration = Duration::from_millis(1);
/// The writer's pause between its calls in (i).
pub const I_WRITER_EVERY: Duration = Duration::from_millis(50);
/// The readers in (i).
pub const I_READERS: usize = 8;

/// A lock kind, as a call asks for it through [`LockOptions`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// No kind: the plain exclusive lock.
    Plain,
    /// `.mode(LockMode::Read)`.
    Read,
    /// `.permits(8)`.
    Permits,
    /// `.fair(true)`.
    Fair,
}

impl Kind {
    pub fn options(self) -> LockOptions {
        match self {
            Kind::Plain => LockOptions::new(),
            Kind::Read => LockOptions::new().mode(LockMode::Read),
            Kind::Permits => LockOptions::new().permits(PERMITS),
            Kind::Fair => LockOptions::new().fair(true),
        }
    }

    pub fn tag(self) -> &'static str {
        match self {
            Kind::Plain => "plain",
            Kind::Read => "read",
            Kind::Permits => "permits",
            Kind::Fair => "fair",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Kind::Plain => f.write_str("plain lock"),
            Kind::Read => f.write_str("read (`mode(LockMode::Read)`)"),
            Kind::Permits => write!(f, "permits (`permits({PERMITS})`)"),
            Kind::Fair => f.write_str("fair (`fair(true)`)"),
        }
    }
}

// ---------------------------------------------------------------- (g), (h)

/// What (g) weighs: a lock kind's uncontended pair, or a pattern of use of
/// the plain lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// A call on one key of this kind.
    Kind(Kind),
    /// One call holding two keys (`run_locked_all`), plain locks.
    TwoKeys,
    /// A plain lock whose body makes one fenced write (`fenced_write`, one
    /// `SET`): acquire + write + release.
    FencedWrite,
}

/// The resource that (g)'s fenced write sets (its fence key is
/// `{g:fenced:resource}:fence`).
const FENCED_RESOURCE: &str = "g:fenced:resource";

impl Pattern {
    pub const PLAIN: Pattern = Pattern::Kind(Kind::Plain);
    pub const ALL: [Pattern; 6] = [
        Pattern::PLAIN,
        Pattern::Kind(Kind::Read),
        Pattern::Kind(Kind::Permits),
        Pattern::Kind(Kind::Fair),
        Pattern::TwoKeys,
        Pattern::FencedWrite,
    ];

    /// Round trips that one uncontended pair takes by the library's design:
    /// a script call to acquire (one for all the keys of a call) and one
    /// to release each key, and the fenced write's own.
    pub fn design_round_trips(self) -> f64 {
        match self {
            Pattern::Kind(_) => 2.0,
            Pattern::TwoKeys => 3.0,
            Pattern::FencedWrite => 3.0,
        }
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pattern::Kind(kind) => kind.fmt(f),
            Pattern::TwoKeys => f.write_str("two keys (`run_locked_all`, plain)"),
            Pattern::FencedWrite => f.write_str("a fenced write (plain lock, one `SET`)"),
        }
    }
}

/// One contender's uncontended pairs in one run.
#[derive(Clone, Debug)]
pub struct Pairs {
    pub p50: Duration,
    pub p99: Duration,
    pub pairs: u64,
    pub commands: Commands,
    /// The server's CPU time over the window (INFO cpu: user + system).
    pub server_cpu: Duration,
    /// This process's CPU time over the window (/proc, 10 ms ticks).
    pub client_cpu: Duration,
}

impl Pairs {
    fn per_pair(&self, total: f64) -> f64 {
        total / self.pairs.max(1) as f64
    }

    /// Commands that clients sent, per pair.
    pub fn round_trips(&self) -> f64 {
        self.per_pair(self.commands.round_trips() as f64)
    }

    /// The server's CPU per pair, µs (INFO cpu).
    pub fn server_us(&self) -> f64 {
        self.per_pair(self.server_cpu.as_secs_f64() * 1e6)
    }

    /// The server's time inside the commands sent, per pair, µs (INFO
    /// commandstats: a script's `usec`, what it calls included).
    pub fn in_commands_us(&self) -> f64 {
        self.per_pair(self.commands.server_usec() as f64)
    }

    /// This process's CPU per pair, µs.
    pub fn client_us(&self) -> f64 {
        self.per_pair(self.client_cpu.as_secs_f64() * 1e6)
    }
}

/// Pairs per block of [`interleaved`].
const BLOCK: usize = 500;

/// Runs `pair(c)` `n` times for each contender `c` of `list`, in one task,
/// after a warm-up, and weighs each. The contenders take turns in blocks
/// of [`BLOCK`] pairs (the first of each round rotating), so that what
/// else runs on the machine meanwhile weighs on all of them alike; each
/// block's server CPU and command counts are read around it.
async fn interleaved<K, F, Fut>(bench: &Bench, list: &[K], n: usize, pair: F) -> Res<Vec<Pairs>>
where
    K: Copy,
    F: Fn(K) -> Fut,
    Fut: Future<Output = Res<()>>,
{
    bench.fresh().await?;
    // Warm-up: the scripts are loaded, the keys are made.
    for &c in list {
        for _ in 0..n.min(200) {
            pair(c).await?;
        }
    }
    let mut admin = bench.admin.clone();
    let mut pairs: Vec<Pairs> = list
        .iter()
        .map(|_| Pairs {
            p50: Duration::ZERO,
            p99: Duration::ZERO,
            pairs: 0,
            commands: Commands::default(),
            server_cpu: Duration::ZERO,
            client_cpu: Duration::ZERO,
        })
        .collect();
    let mut samples: Vec<Vec<Duration>> = list.iter().map(|_| Vec::with_capacity(n)).collect();
    let deadline = Instant::now() + Duration::from_secs(30 * list.len() as u64);
    let blocks = n.div_ceil(BLOCK);
    for block in 0..blocks {
        let size = BLOCK.min(n - block * BLOCK);
        for turn in 0..list.len() {
            let who = (block + turn) % list.len();
            if Instant::now() > deadline {
                break;
            }
            bench.reset().await?;
            let cpu_before = server_cpu(&mut admin).await.map_err(redis_err)?;
            let meter = Meter::start(bench.server_pid);
            for _ in 0..size {
                let start = Instant::now();
                pair(list[who]).await?;
                samples[who].push(start.elapsed());
            }
            let client_cpu = meter.stop().client;
            let cpu_after = server_cpu(&mut admin).await.map_err(redis_err)?;
            let commands = bench.commands().await?;
            let p = &mut pairs[who];
            p.pairs += size as u64;
            p.server_cpu += cpu_after.saturating_sub(cpu_before);
            p.client_cpu += client_cpu;
            p.commands.add(&commands);
        }
    }
    for (p, s) in pairs.iter_mut().zip(&mut samples) {
        p.p50 = quantile(s, 0.50);
        p.p99 = quantile(s, 0.99);
    }
    Ok(pairs)
}

/// (g) One task takes and releases a free lock of each kind, or of each
/// pattern, again and again, on keys of its own, through the library's
/// global client (`run_locked`, `run_locked_all`, `fenced_write`); they
/// take turns (see [`interleaved`]).
pub async fn library_pairs(bench: &Bench, list: &[Pattern], cfg: &Config) -> Res<Vec<Pairs>> {
    let client = &bench.client;
    interleaved(bench, list, cfg.g_pairs, |pattern| {
        library_pair(client, pattern)
    })
    .await
}

/// One uncontended pair of `pattern` on `client`.
async fn library_pair(client: &LockClient, pattern: Pattern) -> Res<()> {
    let nothing = async { Ok::<(), LockError>(()) };
    match pattern {
        Pattern::Kind(kind) => {
            let key = format!("g:{}", kind.tag());
            client.run_locked(&key, kind.options(), nothing).await
        }
        Pattern::TwoKeys => {
            client
                .run_locked_all(["g:two:a", "g:two:b"], LockOptions::new(), nothing)
                .await
        }
        Pattern::FencedWrite => {
            let write = async {
                client
                    .fenced_write(FENCED_RESOURCE)
                    .cmd("SET", [FENCED_RESOURCE], "v")
                    .run()
                    .await
                    .map(drop)
            };
            client
                .run_locked("g:fenced", LockOptions::new(), write)
                .await
        }
    }
    .map_err(|e| e.to_string())
}

/// The scripts of (h), called directly by EVALSHA.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Raw {
    /// The plain lock's scripts before the kinds (commit 9c07927).
    OldPlain,
    /// Today's plain scripts without `hash.lua` before them.
    BarePlain,
    /// Today's plain scripts, as the library sends them.
    Plain,
    /// The shared scripts as a reader.
    Read,
    /// The shared scripts as one of 8 permit holders.
    Permits,
    /// The shared scripts as a fair holder.
    Fair,
}

static OLD_ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(OLD_ACQUIRE_SOURCE));
static OLD_RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(OLD_RELEASE_SOURCE));
static BARE_ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(BARE_ACQUIRE_SOURCE));
static BARE_RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(BARE_RELEASE_SOURCE));
static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(runtime_script("acquire")));
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(runtime_script("release")));
static SHARED_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(runtime_script("shared_acquire")));
static SHARED_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(runtime_script("shared_release")));

impl Raw {
    pub const ALL: [Raw; 6] = [
        Raw::OldPlain,
        Raw::BarePlain,
        Raw::Plain,
        Raw::Read,
        Raw::Permits,
        Raw::Fair,
    ];

    fn scripts(self) -> (&'static Script, &'static Script) {
        match self {
            Raw::OldPlain => (&OLD_ACQUIRE, &OLD_RELEASE),
            Raw::BarePlain => (&BARE_ACQUIRE, &BARE_RELEASE),
            Raw::Plain => (&ACQUIRE, &RELEASE),
            Raw::Read | Raw::Permits | Raw::Fair => (&SHARED_ACQUIRE, &SHARED_RELEASE),
        }
    }

    /// The shared acquire's `ARGV[3]` and `ARGV[5]`, as the library sends them.
    fn shared_kind(self) -> Option<(&'static str, u32)> {
        match self {
            Raw::Read => Some(("r", 0)),
            Raw::Permits => Some(("p", PERMITS)),
            Raw::Fair => Some(("q", 0)),
            _ => None,
        }
    }

    fn tag(self) -> &'static str {
        match self {
            Raw::OldPlain => "old-plain",
            Raw::BarePlain => "bare-plain",
            Raw::Plain => "plain",
            Raw::Read => "read",
            Raw::Permits => "permits",
            Raw::Fair => "fair",
        }
    }
}

impl fmt::Display for Raw {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Raw::OldPlain => f.write_str("plain, before the kinds (9c07927)"),
            Raw::BarePlain => f.write_str("plain, today's scripts without hash.lua"),
            Raw::Plain => f.write_str("plain, today (as the library sends it)"),
            Raw::Read => f.write_str("read (shared scripts)"),
            Raw::Permits => write!(f, "permits {PERMITS} (shared scripts)"),
            Raw::Fair => f.write_str("fair (shared scripts)"),
        }
    }
}

/// The releasing client's id in (h)'s releases.
const RAW_CLIENT: &str = "raw-client";

/// One acquire and one release of `raw`'s scripts on `key`.
async fn raw_pair(con: &mut MultiplexedConnection, raw: Raw, key: &str, owner: &str) -> Res<()> {
    let (acquire, release) = raw.scripts();
    let mut call = acquire.key(key);
    call.arg(owner).arg(LEASE.as_millis() as u64);
    if let Some((kind, count)) = raw.shared_kind() {
        call.arg(kind)
            .arg(LockOptions::DEFAULT_WAITER_LEASE.as_millis() as u64)
            .arg(count);
    }
    let answer: Value = call.invoke_async(con).await.map_err(redis_err)?;
    let token = match &answer {
        Value::Int(token @ 1..) => *token,
        Value::Array(items) => match items.first() {
            Some(Value::Int(token @ 1..)) => *token,
            _ => return Err(format!("{raw}: the acquire answered {answer:?}")),
        },
        _ => return Err(format!("{raw}: the acquire answered {answer:?}")),
    };
    let freed: i64 = release
        .key(key)
        .arg(owner)
        .arg(RAW_CLIENT)
        .arg(token)
        .invoke_async(con)
        .await
        .map_err(redis_err)?;
    if freed != 1 {
        return Err(format!("{raw}: the release answered {freed}"));
    }
    Ok(())
}

/// (h) One task calls each contender's acquire and release scripts
/// directly, on one key each, again and again: what the scripts cost the
/// server, without the library's client. The contenders take turns (see
/// [`interleaved`]).
pub async fn raw_pairs(bench: &Bench, raws: &[Raw], cfg: &Config) -> Res<Vec<Pairs>> {
    let owner = format!("raw-owner-{}", std::process::id());
    let con = bench.lockers.floor.connection();
    let owner = owner.as_str();
    interleaved(bench, raws, cfg.g_pairs, |raw| {
        let mut con = con.clone();
        async move {
            let key = format!("lock:h:{}", raw.tag());
            raw_pair(&mut con, raw, &key, owner).await
        }
    })
    .await
}

// ---------------------------------------------------------------- (i)

/// 8 readers and a writer on one key, in one run.
#[derive(Clone, Debug)]
pub struct ReadersWriter {
    pub reader_sections: u64,
    pub reader_sections_per_sec: f64,
    pub writer_sections: u64,
    pub writer_wait_p50: Duration,
    pub writer_wait_p99: Duration,
    pub writer_wait_max: Duration,
    pub reader_wait_p99: Duration,
    pub reader_wait_max: Duration,
    /// The most readers inside at once.
    pub most_readers: usize,
    /// A writer inside with a reader; with the plain lock, any two holders.
    pub overlaps: u64,
    pub timeouts: u64,
    pub commands: Commands,
}

#[derive(Default)]
struct Inside {
    readers: AtomicUsize,
    writer: AtomicBool,
    most_readers: AtomicUsize,
    overlaps: AtomicU64,
}

/// (i) 8 reader tasks on the global client loop on one key with 1 ms
/// bodies; a writer on a client of its own takes the key every 50 ms for a
/// 1 ms body. `Kind::Read`: the readers read, the writer writes;
/// `Kind::Plain`: all nine take the plain lock.
pub async fn readers_writer(bench: &Bench, kind: Kind, cfg: &Config) -> Res<ReadersWriter> {
    let (read, write) = match kind {
        Kind::Read => (
            LockOptions::new().mode(LockMode::Read),
            LockOptions::new().mode(LockMode::Write),
        ),
        Kind::Plain => (LockOptions::new(), LockOptions::new()),
        other => return Err(format!("(i) has no {other} side")),
    };
    let shared = kind == Kind::Read;
    bench.fresh().await?;
    let key = format!("i:{}", kind.tag());
    let writer_client = bench
        .others
        .first()
        .ok_or("(i) needs another client")?
        .clone();
    // Warm-up: both clients load the scripts.
    let nothing = || async { Ok::<(), LockError>(()) };
    bench
        .client
        .run_locked(&key, read, nothing())
        .await
        .map_err(|e| e.to_string())?;
    writer_client
        .run_locked(&key, write, nothing())
        .await
        .map_err(|e| e.to_string())?;
    bench.reset().await?;

    let inside = Arc::new(Inside::default());
    let start = Instant::now();
    let deadline = start + cfg.i_time;
    let readers: Vec<_> = (0..I_READERS)
        .map(|_| {
            let (client, key, inside) = (bench.client.clone(), key.clone(), inside.clone());
            tokio::spawn(async move {
                let (mut sections, mut timeouts, mut waits) = (0u64, 0u64, Vec::new());
                while Instant::now() < deadline {
                    let called = Instant::now();
                    let body = async {
                        waits.push(called.elapsed());
                        let now_inside = inside.readers.fetch_add(1, SeqCst) + 1;
                        inside.most_readers.fetch_max(now_inside, SeqCst);
                        if inside.writer.load(SeqCst) || (!shared && now_inside > 1) {
                            inside.overlaps.fetch_add(1, SeqCst);
                        }
                        tokio::time::sleep(I_BODY).await;
                        inside.readers.fetch_sub(1, SeqCst);
                        Ok::<(), LockError>(())
                    };
                    match client.run_locked(&key, read, body).await {
                        Ok(()) => sections += 1,
                        Err(LockError::Timeout { .. }) => timeouts += 1,
                        Err(e) => return Err(e.to_string()),
                    }
                }
                Ok((sections, timeouts, waits))
            })
        })
        .collect();
    let writer = {
        let (key, inside) = (key.clone(), inside.clone());
        tokio::spawn(async move {
            let (mut sections, mut timeouts, mut waits) = (0u64, 0u64, Vec::new());
            loop {
                tokio::time::sleep(I_WRITER_EVERY).await;
                if Instant::now() >= deadline {
                    break;
                }
                let called = Instant::now();
                let body = async {
                    waits.push(called.elapsed());
                    inside.writer.store(true, SeqCst);
                    if inside.readers.load(SeqCst) > 0 {
                        inside.overlaps.fetch_add(1, SeqCst);
                    }
                    tokio::time::sleep(I_BODY).await;
                    inside.writer.store(false, SeqCst);
                    Ok::<(), LockError>(())
                };
                match writer_client.run_locked(&key, write, body).await {
                    Ok(()) => sections += 1,
                    Err(LockError::Timeout { .. }) => timeouts += 1,
                    Err(e) => return Err(e.to_string()),
                }
            }
            Ok((sections, timeouts, waits))
        })
    };
    let (mut reader_sections, mut timeouts, mut reader_waits) = (0, 0, Vec::new());
    for task in readers {
        let (s, t, w) = task.await.map_err(|e| e.to_string())??;
        reader_sections += s;
        timeouts += t;
        reader_waits.extend(w);
    }
    let (writer_sections, t, mut writer_waits) = writer.await.map_err(|e| e.to_string())??;
    let elapsed = start.elapsed();
    timeouts += t;
    Ok(ReadersWriter {
        reader_sections,
        reader_sections_per_sec: reader_sections as f64 / elapsed.as_secs_f64(),
        writer_sections,
        writer_wait_p50: quantile(&mut writer_waits, 0.50),
        writer_wait_p99: quantile(&mut writer_waits, 0.99),
        writer_wait_max: quantile(&mut writer_waits, 1.0),
        reader_wait_p99: quantile(&mut reader_waits, 0.99),
        reader_wait_max: quantile(&mut reader_waits, 1.0),
        most_readers: inside.most_readers.load(SeqCst),
        overlaps: inside.overlaps.load(SeqCst),
        timeouts,
        commands: bench.commands().await?,
    })
}

// ---------------------------------------------------------------- (j)

/// One key handed round 3 clients, in one run.
#[derive(Clone, Debug)]
pub struct Handoff {
    pub sections: u64,
    pub sections_per_sec: f64,
    /// From a holder's body's end to the next holder's body's start, where
    /// the next holder is another client.
    pub handoff_p50: Duration,
    pub handoff_p99: Duration,
    /// Sections whose holder is another client than the one before.
    pub changed: f64,
    pub wait_p50: Duration,
    pub wait_p99: Duration,
    pub wait_max: Duration,
    /// Pairs of calls where one began to wait more than [`ORDER_MARGIN`]
    /// before the other, yet entered after it.
    pub inversions: u64,
    /// Calls that entered ahead of at least one such earlier call.
    pub served_early: u64,
    pub overlaps: u64,
    pub timeouts: u64,
    pub commands: Commands,
}

/// One call of (j): which client, when it began to wait, when its body
/// began and ended (one monotonic clock, this process's).
#[derive(Clone, Copy)]
struct Call {
    client: usize,
    began: Instant,
    entered: Instant,
    left: Instant,
}

/// (j) 3 clients (3 `LockClient`s), a task on each, loop on one key with
/// a body that yields once; each calls again as soon as its call returns.
/// `Kind::Fair` takes the fair lock, `Kind::Plain` the plain one.
pub async fn handoff(bench: &Bench, kind: Kind, cfg: &Config) -> Res<Handoff> {
    let options = match kind {
        Kind::Fair | Kind::Plain => kind.options(),
        other => return Err(format!("(j) has no {other} side")),
    };
    if bench.others.len() < 3 {
        return Err("(j) needs 3 clients".into());
    }
    bench.fresh().await?;
    let key = format!("j:{}", kind.tag());
    for client in &bench.others {
        client
            .run_locked(&key, options, async { Ok::<(), LockError>(()) })
            .await
            .map_err(|e| e.to_string())?;
    }
    bench.reset().await?;

    let busy = Arc::new(AtomicBool::new(false));
    let overlaps = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let deadline = start + cfg.j_time;
    let tasks: Vec<_> = bench
        .others
        .iter()
        .take(3)
        .enumerate()
        .map(|(me, client)| {
            let (client, key) = (client.clone(), key.clone());
            let (busy, overlaps) = (busy.clone(), overlaps.clone());
            tokio::spawn(async move {
                let (mut calls, mut timeouts) = (Vec::new(), 0u64);
                while calls.len() < 1_000_000 && Instant::now() < deadline {
                    let began = Instant::now();
                    let mut times = None;
                    let body = async {
                        let entered = Instant::now();
                        if busy.swap(true, SeqCst) {
                            overlaps.fetch_add(1, SeqCst);
                        }
                        tokio::task::yield_now().await;
                        busy.store(false, SeqCst);
                        times = Some((entered, Instant::now()));
                        Ok::<(), LockError>(())
                    };
                    match client.run_locked(&key, options, body).await {
                        Ok(()) => {}
                        Err(LockError::Timeout { .. }) => timeouts += 1,
                        Err(e) => return Err(e.to_string()),
                    }
                    if let Some((entered, left)) = times {
                        calls.push(Call {
                            client: me,
                            began,
                            entered,
                            left,
                        });
                    }
                }
                Ok((calls, timeouts))
            })
        })
        .collect();
    let (mut calls, mut timeouts) = (Vec::new(), 0);
    for task in tasks {
        let (c, t) = task.await.map_err(|e| e.to_string())??;
        calls.extend(c);
        timeouts += t;
    }
    let elapsed = start.elapsed();
    let commands = bench.commands().await?;

    calls.sort_by_key(|c| c.entered);
    let mut handoffs = Vec::new();
    let mut changed = 0u64;
    for pair in calls.windows(2) {
        if pair[1].client != pair[0].client {
            changed += 1;
            handoffs.push(pair[1].entered.saturating_duration_since(pair[0].left));
        }
    }
    let mut waits: Vec<Duration> = calls.iter().map(|c| c.entered - c.began).collect();
    let (inversions, served_early) = out_of_order(&calls, ORDER_MARGIN);
    if inversions > 0 && std::env::var_os("LOCK_BENCH_DEBUG").is_some() {
        // The calls that others went ahead of, and by how many.
        for a in &calls {
            let ahead = calls
                .iter()
                .filter(|b| a.began + ORDER_MARGIN < b.began && b.entered < a.entered)
                .count();
            if ahead > 0 {
                eprintln!(
                    "(j) {kind:?}: client {} began {:?} after the start, waited {:?}; {ahead} calls that began over 5 ms later entered first",
                    a.client,
                    a.began - start,
                    a.entered - a.began
                );
            }
        }
    }
    let sections = calls.len() as u64;
    Ok(Handoff {
        sections,
        sections_per_sec: sections as f64 / elapsed.as_secs_f64(),
        handoff_p50: quantile(&mut handoffs, 0.50),
        handoff_p99: quantile(&mut handoffs, 0.99),
        changed: changed as f64 / sections.saturating_sub(1).max(1) as f64,
        wait_p50: quantile(&mut waits, 0.50),
        wait_p99: quantile(&mut waits, 0.99),
        wait_max: quantile(&mut waits, 1.0),
        inversions,
        served_early,
        overlaps: overlaps.load(SeqCst),
        timeouts,
        commands,
    })
}

/// The pairs of `calls` (sorted by entry) where one began to wait more than
/// `margin` before the other yet entered after it, and the calls that
/// entered ahead of at least one such call. O(n log n): calls are taken in
/// the order they began; a Fenwick tree over entry ranks counts, among the
/// calls that began more than `margin` before, those that entered later.
fn out_of_order(calls: &[Call], margin: Duration) -> (u64, u64) {
    let n = calls.len();
    // `calls` is sorted by entry: its index is the entry rank.
    let mut by_began: Vec<usize> = (0..n).collect();
    by_began.sort_by_key(|&i| calls[i].began);
    let mut tree = vec![0u64; n + 1];
    let add = |tree: &mut Vec<u64>, rank: usize| {
        let mut i = rank + 1;
        while i <= n {
            tree[i] += 1;
            i += i & i.wrapping_neg();
        }
    };
    // How many added calls have an entry rank at most `rank`.
    let up_to = |tree: &Vec<u64>, rank: usize| {
        let (mut i, mut sum) = (rank + 1, 0);
        while i > 0 {
            sum += tree[i];
            i -= i & i.wrapping_neg();
        }
        sum
    };
    let (mut added, mut next) = (0u64, 0);
    let (mut pairs, mut early) = (0u64, 0u64);
    for &b in &by_began {
        while next < n && calls[by_began[next]].began + margin < calls[b].began {
            add(&mut tree, by_began[next]);
            added += 1;
            next += 1;
        }
        let later = added - up_to(&tree, b);
        pairs += later;
        early += u64::from(later > 0);
    }
    (pairs, early)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (g)'s patterns do what they are named for, in the script calls they
    /// are weighed by: two keys in one acquire and a release each; a
    /// fenced write between the acquire and the release.
    #[tokio::test]
    async fn the_patterns_take_their_keys_and_write_in_three_script_calls() {
        let server = lock_testkit::Server::tcp(&[]);
        let url = server.url();
        let client = LockClient::connect(&url).await.unwrap();
        let mut admin = redis::Client::open(url.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        for pattern in [Pattern::TwoKeys, Pattern::FencedWrite] {
            // The first pair loads the scripts.
            library_pair(&client, pattern).await.unwrap();
            Commands::reset(&mut admin).await.unwrap();
            library_pair(&client, pattern).await.unwrap();
            let commands = Commands::read(&mut admin).await.unwrap();
            assert_eq!(commands.get("evalsha"), 3, "{pattern}: {commands:?}");
            assert_eq!(commands.round_trips(), 3, "{pattern}: {commands:?}");
        }
        let written: Option<String> = redis::cmd("GET")
            .arg(FENCED_RESOURCE)
            .query_async(&mut admin)
            .await
            .unwrap();
        assert_eq!(written.as_deref(), Some("v"));
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("lock:g:two:*")
            .query_async(&mut admin)
            .await
            .unwrap();
        assert_eq!(keys.len(), 2, "{keys:?}");
    }

    fn calls(spec: &[(u64, u64)]) -> Vec<Call> {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut v: Vec<Call> = spec
            .iter()
            .map(|&(began, entered)| Call {
                client: 0,
                began: t0 + ms(began),
                entered: t0 + ms(entered),
                left: t0 + ms(entered),
            })
            .collect();
        v.sort_by_key(|c| c.entered);
        v
    }

    #[test]
    fn calls_in_order_have_no_inversions() {
        let c = calls(&[(0, 1), (10, 20), (12, 30), (40, 41)]);
        assert_eq!(out_of_order(&c, ORDER_MARGIN), (0, 0));
    }

    #[test]
    fn a_call_served_ahead_of_earlier_waiters_counts_once_per_pair() {
        // (0, 50) and (3, 40) began 3 ms apart: within the margin. (20, 30)
        // went ahead of both, which began more than 5 ms before it.
        let c = calls(&[(0, 50), (3, 40), (20, 30)]);
        assert_eq!(out_of_order(&c, ORDER_MARGIN), (2, 1));
    }
}
