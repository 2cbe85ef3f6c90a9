//! Leader election across OS processes (`lead`, in `leader-worker`
//! processes: see src/bin/leader-worker.rs) against one Redis.
//!
//! Each term ticks while it leads: a fenced write of `<pid> <token> <ms>`
//! onto the list `ticks`, with the term's token, taken after a synchronous
//! stretch of work (where a pause from outside lands after the lock's lease
//! check). The list is the order in which the resource accepted the ticks;
//! a resumed stale leader's tick is refused by the resource, and the worker
//! prints it.
//!
//! - `three_processes_elect_one_leader_through_kills_pauses_and_resignations`:
//!   3 processes campaign with a 1 s lease while a seeded schedule kills
//!   the leader (SIGKILL, then a new process), pauses it past its lease
//!   (SIGSTOP until another leader ticked, then SIGCONT) or makes it resign
//!   (its term's future returns `Ok`, and it calls `lead` again). Asserted:
//!   tokens never go down in the list (no stale leader ticks after a newer
//!   term did), each term's token is above the last, a new term ticks
//!   within 1 s of a resignation and within the lease plus
//!   [`TAKEOVER_BOUND_MS`] (the guide's bound) of a kill or a pause, and
//!   every fault made a new term. `LOCK_ELECTION_SEED` and
//!   `LOCK_ELECTION_SECS` (default 30) set the schedule and the run's
//!   length.
//! - `a_campaigner_leads_within_500_ms_of_each_resignation`: two
//!   processes, the leader resigning `LOCK_HANDOVER_ROUNDS` times (default
//!   30) and campaigning again only after 500 ms: the other leads within
//!   500 ms each time; the median and p99 hand-over are printed.
mod support;

use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use support::RedisServer;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::task::JoinHandle;
use tokio::time::{sleep, timeout, Instant};

const WORKER: &str = env!("CARGO_BIN_EXE_leader-worker");
/// The leaders' lease.
const LEASE_MS: u64 = 1000;
/// How long after a killed (or paused) leader's lease ends its successor
/// ticks at most: the bound the leader guide states.
const TAKEOVER_BOUND_MS: u64 = 250;
/// How long after a resignation the next term ticks at most.
const RESIGN_BOUND_MS: u64 = 1000;
/// The hand-over bound of the two-process test.
const HANDOVER_BOUND_MS: u64 = 500;
/// A term's ticks: one every `TICK_MS` after `WORK_MS` of synchronous work.
const TICK_MS: u64 = 20;
const WORK_MS: u64 = 20;
/// Long enough for any step on a busy machine; reached only on a failure.
const LIMIT: Duration = Duration::from_secs(20);

/// One test at a time: their timings are measured.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn unix_ms() -> u64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH);
    u64::try_from(now.expect("after 1970").as_millis()).expect("ms")
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).map_or(default, |v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name}={v:?}: a number"))
    })
}

/// SplitMix64: the schedule's numbers, from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `range`.
    fn within(&mut self, range: std::ops::Range<u64>) -> u64 {
        range.start + self.next() % (range.end - range.start)
    }
}

/// One accepted tick: its process, its term's token, and when it was taken.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Tick {
    pid: u32,
    token: u64,
    ms: u64,
}

fn parse_tick(line: &str) -> Tick {
    let mut parts = line.split(' ').map(|p| p.parse::<u64>().expect("a number"));
    let mut next = || parts.next().unwrap_or_else(|| panic!("tick {line:?}"));
    Tick {
        pid: u32::try_from(next()).expect("pid"),
        token: next(),
        ms: next(),
    }
}

/// What the harness reads of the key in one script: the last tick, the
/// lock's value, and its expiry by the server's clock (unix ms).
struct Seen {
    last: Option<Tick>,
    /// The lock's fence and state (`h`, `w`, `f`), if it has a value.
    lock: Option<(u64, String)>,
    expiry_ms: Option<u64>,
}

impl Seen {
    /// The leader: the last tick's process, if its term still holds.
    fn leader(&self) -> Option<Tick> {
        let (fence, state) = self.lock.as_ref()?;
        self.last
            .filter(|tick| tick.token == *fence && state.as_str() != "f")
    }
}

fn look(con: &mut redis::Connection, key: &str) -> Seen {
    const LOOK: &str = "local last = redis.call('lindex', 'ticks', -1) \
         local value = redis.call('get', KEYS[1]) \
         local p = redis.call('pttl', KEYS[1]) \
         local t = redis.call('time') \
         local at = -1 \
         if p >= 0 then at = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + p end \
         return {last or '', value or '', at}";
    let (last, value, at): (String, String, i64) = redis::Script::new(LOOK)
        .key(key)
        .invoke(con)
        .expect("the look script");
    Seen {
        last: (!last.is_empty()).then(|| parse_tick(&last)),
        lock: support::parse_lock(&value).map(|(fence, state, _)| (fence, state)),
        expiry_ms: u64::try_from(at).ok(),
    }
}

/// The ticks the resource accepted, in its order.
fn ticks(con: &mut redis::Connection) -> Vec<Tick> {
    let lines: Vec<String> = redis::cmd("LRANGE")
        .arg("ticks")
        .arg(0)
        .arg(-1)
        .query(con)
        .expect("LRANGE");
    lines.iter().map(|line| parse_tick(line)).collect()
}

/// The workers' stdout lines, as `(pid, line)`.
type Lines = Arc<Mutex<Vec<(u32, String)>>>;

struct Worker {
    pid: u32,
    child: Child,
    stdin: ChildStdin,
}

/// The worker processes of one test, on one key.
struct Fleet {
    args: Vec<String>,
    workers: Vec<Worker>,
    lines: Lines,
    readers: Vec<JoinHandle<()>>,
}

impl Fleet {
    fn new(url: &str, key: &str, rest_ms: u64) -> Fleet {
        let args = [LEASE_MS, TICK_MS, WORK_MS, rest_ms].map(|ms| ms.to_string());
        Fleet {
            args: [url.to_owned(), key.to_owned()]
                .into_iter()
                .chain(args)
                .collect(),
            workers: Vec::new(),
            lines: Lines::default(),
            readers: Vec::new(),
        }
    }

    /// Starts a worker; its pid.
    fn start(&mut self) -> u32 {
        let mut child = Command::new(WORKER)
            .args(&self.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start a worker");
        let pid = child.id().expect("pid");
        let stdout = child.stdout.take().expect("stdout");
        let stdin = child.stdin.take().expect("stdin");
        let lines = self.lines.clone();
        self.readers.push(tokio::spawn(async move {
            let mut stdout = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = stdout.next_line().await {
                let mut lines = lines.lock().unwrap_or_else(PoisonError::into_inner);
                lines.push((pid, line));
            }
        }));
        self.workers.push(Worker { pid, child, stdin });
        pid
    }

    fn pids(&self) -> Vec<u32> {
        self.workers.iter().map(|w| w.pid).collect()
    }

    /// The lines starting with `word`, as `(pid, the numbers after it)`.
    fn said(&self, word: &str) -> Vec<(u32, Vec<u64>)> {
        let lines = self.lines.lock().unwrap_or_else(PoisonError::into_inner);
        lines
            .iter()
            .filter_map(|(pid, line)| {
                let rest = line.strip_prefix(word)?.strip_prefix(' ')?;
                let numbers = rest.split(' ').map_while(|n| n.parse().ok()).collect();
                Some((*pid, numbers))
            })
            .collect()
    }

    /// When the term `token` resigned, once its worker said so.
    async fn resigned_at(&self, token: u64) -> u64 {
        let deadline = Instant::now() + LIMIT;
        loop {
            let said = self.said("resign");
            if let Some((_, numbers)) = said.iter().find(|(_, n)| n.first() == Some(&token)) {
                return numbers[1];
            }
            assert!(
                Instant::now() < deadline,
                "term {token} never said it resigned"
            );
            sleep(Duration::from_millis(5)).await;
        }
    }

    /// Asks the worker `pid` to resign (if it leads).
    async fn resign(&mut self, pid: u32) {
        let worker = self
            .workers
            .iter_mut()
            .find(|w| w.pid == pid)
            .expect("a worker");
        worker
            .stdin
            .write_all(b"resign\n")
            .await
            .expect("write stdin");
        worker.stdin.flush().await.expect("flush stdin");
    }

    /// Kills the worker `pid` (SIGKILL) and waits for its end.
    async fn kill(&mut self, pid: u32) {
        let at = self
            .workers
            .iter()
            .position(|w| w.pid == pid)
            .expect("a worker");
        let mut worker = self.workers.remove(at);
        support::signal(pid, "-KILL");
        timeout(LIMIT, worker.child.wait())
            .await
            .expect("killed in time")
            .expect("wait");
    }

    /// Kills every worker; the lines they printed.
    async fn stop(mut self) -> Vec<(u32, String)> {
        for pid in self.pids() {
            self.kill(pid).await;
        }
        for reader in self.readers.drain(..) {
            timeout(LIMIT, reader)
                .await
                .expect("stdout closed")
                .expect("reader");
        }
        let lines = self.lines.lock().unwrap_or_else(PoisonError::into_inner);
        lines.clone()
    }
}

/// Waits until a worker leads; the first tick of its term.
async fn a_leader(con: &mut redis::Connection, key: &str, fleet: &Fleet) -> Tick {
    let deadline = Instant::now() + LIMIT;
    loop {
        let leader = look(con, key).leader();
        if let Some(tick) = leader.filter(|t| fleet.pids().contains(&t.pid)) {
            return tick;
        }
        assert!(Instant::now() < deadline, "no leader in {LIMIT:?}");
        sleep(Duration::from_millis(5)).await;
    }
}

/// Waits until a term newer than `token` ticked; meanwhile keeps the
/// latest expiry seen of the term `token`'s lock (`expiry`).
async fn next_term(
    con: &mut redis::Connection,
    key: &str,
    token: u64,
    expiry: &mut Option<u64>,
) -> Tick {
    let deadline = Instant::now() + Duration::from_millis(LEASE_MS) + LIMIT;
    loop {
        let seen = look(con, key);
        if seen.lock.as_ref().is_some_and(|(fence, _)| *fence == token) {
            *expiry = seen.expiry_ms.max(*expiry);
        }
        if let Some(tick) = seen.last.filter(|t| t.token > token) {
            return tick;
        }
        assert!(Instant::now() < deadline, "no term after {token} in time");
        sleep(Duration::from_millis(5)).await;
    }
}

/// A fault the schedule makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// SIGKILL the leader, then start a new process.
    Kill,
    /// SIGSTOP the leader until another term ticked, then SIGCONT.
    Pause,
    /// The leader's term returns `Ok`; it campaigns again at once.
    Resign,
}

/// One fault made to the term `token` of process `pid` at `start_ms`
/// (SIGSTOP sent, or the resignation), its lock due to expire at
/// `expiry_ms` (a kill or a pause: the last expiry seen by the server).
#[derive(Debug)]
struct Fault {
    kind: Kind,
    pid: u32,
    token: u64,
    start_ms: u64,
    expiry_ms: Option<u64>,
}

/// Stops (SIGSTOP) the leader; its last tick and when it was stopped. A
/// leader whose term ended meanwhile is resumed and another one sought.
async fn stop_leader(con: &mut redis::Connection, key: &str, fleet: &Fleet) -> (Tick, u64) {
    for _ in 0..100 {
        let leader = a_leader(con, key, fleet).await;
        let start = unix_ms();
        support::signal(leader.pid, "-STOP");
        let still = look(con, key).leader().map(|t| (t.pid, t.token));
        if still == Some((leader.pid, leader.token)) {
            return (leader, start);
        }
        support::signal(leader.pid, "-CONT");
    }
    panic!("no leader stopped while it led in 100 tries");
}

/// Makes one fault of `kind` and waits until a newer term ticked.
async fn make(
    kind: Kind,
    (con, key): (&mut redis::Connection, &str),
    fleet: &mut Fleet,
    rng: &mut Rng,
) -> Fault {
    let (leader, start_ms) = match kind {
        Kind::Kill | Kind::Pause => stop_leader(con, key, fleet).await,
        Kind::Resign => (a_leader(con, key, fleet).await, 0),
    };
    let mut expiry_ms = None;
    let start_ms = match kind {
        Kind::Kill => {
            expiry_ms = look(con, key).expiry_ms;
            fleet.kill(leader.pid).await;
            fleet.start();
            next_term(con, key, leader.token, &mut expiry_ms).await;
            start_ms
        }
        Kind::Pause => {
            expiry_ms = look(con, key).expiry_ms;
            next_term(con, key, leader.token, &mut expiry_ms).await;
            // Resumed a little after the next term's first ticks.
            sleep(Duration::from_millis(rng.within(0..300))).await;
            support::signal(leader.pid, "-CONT");
            start_ms
        }
        Kind::Resign => {
            fleet.resign(leader.pid).await;
            next_term(con, key, leader.token, &mut None).await;
            fleet.resigned_at(leader.token).await
        }
    };
    Fault {
        kind,
        pid: leader.pid,
        token: leader.token,
        start_ms,
        expiry_ms,
    }
}

/// The faults of a run of `run` long: rounds of a kill, a pause and two
/// resignations in a seeded order, each after 200 to 800 ms of quiet.
async fn schedule(
    (con, key): (&mut redis::Connection, &str),
    fleet: &mut Fleet,
    rng: &mut Rng,
    run: Duration,
) -> Vec<Fault> {
    let started = Instant::now();
    let mut faults = Vec::new();
    let mut round = [Kind::Kill, Kind::Pause, Kind::Resign, Kind::Resign];
    // Whole rounds, as many as fit (bounded: a round takes over 1 s).
    for _ in 0..run.as_secs().max(1) {
        if !faults.is_empty() && started.elapsed() >= run {
            break;
        }
        for i in (1..round.len()).rev() {
            let j = usize::try_from(rng.within(0..i as u64 + 1)).expect("index");
            round.swap(i, j);
        }
        for kind in round {
            sleep(Duration::from_millis(rng.within(200..800))).await;
            faults.push(make(kind, (con, key), fleet, rng).await);
        }
    }
    faults
}

/// The terms in the order of the ticks (a run of one token each), as
/// their first ticks; asserts that a term ticks from one process.
fn terms(ticks: &[Tick]) -> Vec<Tick> {
    let mut terms: Vec<Tick> = Vec::new();
    for tick in ticks {
        match terms.last() {
            Some(term) if term.token == tick.token => {
                assert_eq!(
                    term.pid, tick.pid,
                    "term {} ticked in two processes",
                    tick.token
                );
            }
            _ => terms.push(*tick),
        }
    }
    terms
}

/// The value at quantile `q` (nearest rank) of `values`, sorted here.
fn quantile(values: &mut [u64], q: f64) -> u64 {
    values.sort_unstable();
    if values.is_empty() {
        return 0;
    }
    let rank = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
    values[rank - 1]
}

/// "median / p99 / max" of `values`.
fn spread(values: &[u64]) -> String {
    let mut values = values.to_vec();
    let (median, p99) = (quantile(&mut values, 0.5), quantile(&mut values, 0.99));
    let max = values.last().copied().unwrap_or(0);
    format!(
        "median {median} ms, p99 {p99} ms, max {max} ms (n = {})",
        values.len()
    )
}

/// Asserts that the accepted ticks' tokens never go down, in the
/// resource's order and in the order of the ticks' times, and that each
/// term's token is above the last; the terms.
fn tokens_never_go_down(ticks: &[Tick]) -> Vec<Tick> {
    let down: Vec<_> = ticks
        .windows(2)
        .filter(|w| w[1].token < w[0].token)
        .collect();
    assert!(down.is_empty(), "tokens went down in the list: {down:?}");
    let mut by_time = ticks.to_vec();
    by_time.sort_by_key(|tick| tick.ms);
    let down: Vec<_> = by_time
        .windows(2)
        .filter(|w| w[1].token < w[0].token)
        .collect();
    assert!(
        down.is_empty(),
        "an older term ticked after a newer one: {down:?}"
    );
    let terms = terms(ticks);
    for pair in terms.windows(2) {
        assert!(
            pair[1].token > pair[0].token,
            "term {} came after term {}",
            pair[1].token,
            pair[0].token
        );
    }
    terms
}

/// How long after each fault of `kind` the next term ticked, and after the
/// faulted lock's expiry: asserts the bounds.
fn takeovers(ticks: &[Tick], faults: &[Fault], kind: Kind) -> (Vec<u64>, Vec<u64>) {
    let (mut after_fault, mut after_expiry) = (Vec::new(), Vec::new());
    for fault in faults.iter().filter(|f| f.kind == kind) {
        let next = ticks
            .iter()
            .find(|tick| tick.token > fault.token)
            .unwrap_or_else(|| panic!("no term after {fault:?}"));
        let took = next.ms.saturating_sub(fault.start_ms);
        let bound = match kind {
            Kind::Resign => RESIGN_BOUND_MS,
            Kind::Kill | Kind::Pause => LEASE_MS + TAKEOVER_BOUND_MS,
        };
        assert!(
            took <= bound,
            "after {fault:?} the next term ticked {took} ms later, more than {bound} ms: {next:?}"
        );
        after_fault.push(took);
        if let Some(expiry) = fault.expiry_ms {
            let late = next.ms.saturating_sub(expiry);
            assert!(
                late <= TAKEOVER_BOUND_MS,
                "after {fault:?} the next term ticked {late} ms after the lease's end"
            );
            after_expiry.push(late);
        }
    }
    (after_fault, after_expiry)
}

/// The longest time between two accepted ticks that no fault's window
/// (from the fault to the next term's first tick) overlaps.
fn longest_quiet_gap(ticks: &[Tick], faults: &[Fault]) -> u64 {
    let windows: Vec<(u64, u64)> = faults
        .iter()
        .map(|fault| {
            let next = ticks
                .iter()
                .find(|t| t.token > fault.token)
                .map_or(u64::MAX, |t| t.ms);
            (fault.start_ms, next)
        })
        .collect();
    ticks
        .windows(2)
        .filter(|w| {
            !windows
                .iter()
                .any(|(from, to)| *from < w[1].ms && *to > w[0].ms)
        })
        .map(|w| w[1].ms.saturating_sub(w[0].ms))
        .max()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_elect_one_leader_through_kills_pauses_and_resignations() {
    let _serial = SERIAL.lock().await;
    let seed = env_or("LOCK_ELECTION_SEED", 30);
    let run = Duration::from_secs(env_or("LOCK_ELECTION_SECS", 30));
    println!("election run: seed {seed} (LOCK_ELECTION_SEED), {run:?} (LOCK_ELECTION_SECS)");
    let server = RedisServer::start();
    let mut con = server.connection();
    let key = "lock:election";
    let mut fleet = Fleet::new(&server.url(), "election", 0);
    for _ in 0..3 {
        fleet.start();
    }
    a_leader(&mut con, key, &fleet).await;
    let mut rng = Rng(seed);
    let faults = schedule((&mut con, key), &mut fleet, &mut rng, run).await;
    let paused: Vec<(u32, u64)> = faults
        .iter()
        .filter(|f| f.kind == Kind::Pause)
        .map(|f| (f.pid, f.token))
        .collect();
    let lines = fleet.stop().await;
    let ticks = ticks(&mut con);

    let terms = tokens_never_go_down(&ticks);
    let count = |kind| faults.iter().filter(|f| f.kind == kind).count();
    assert!(
        terms.len() > faults.len(),
        "{} terms for {} faults: each fault ends a term",
        terms.len(),
        faults.len()
    );
    let (resigns, _) = takeovers(&ticks, &faults, Kind::Resign);
    let (kills, kills_late) = takeovers(&ticks, &faults, Kind::Kill);
    let (pauses, pauses_late) = takeovers(&ticks, &faults, Kind::Pause);
    let refused: Vec<(u32, Vec<u64>)> = lines
        .iter()
        .filter_map(|(pid, line)| {
            let rest = line.strip_prefix("refused ")?;
            Some((
                *pid,
                rest.split(' ')
                    .map(|n| n.parse().expect("a number"))
                    .collect(),
            ))
        })
        .collect();
    for (pid, numbers) in &refused {
        let (token, stored) = (numbers[0], numbers[2]);
        assert!(
            paused.contains(&(*pid, token)),
            "{pid} refused with {token}, not a paused term"
        );
        assert!(
            token < stored,
            "{pid} refused with {token}, the resource had {stored}"
        );
    }
    let elected = lines
        .iter()
        .filter(|(_, l)| l.starts_with("elected "))
        .count();
    let errors: Vec<_> = lines
        .iter()
        .filter(|(_, l)| l.starts_with("error "))
        .collect();
    assert!(errors.is_empty(), "lead returned errors: {errors:?}");
    println!(
        "election run: {} terms ({elected} elections, {} ticks); faults: {} kills, {} pauses, \
         {} resignations; terms not made by a fault: {}; tokens that went down: 0; refused \
         stale ticks: {}; longest gap between ticks outside a fault: {} ms",
        terms.len(),
        ticks.len(),
        count(Kind::Kill),
        count(Kind::Pause),
        count(Kind::Resign),
        terms.len() - 1 - faults.len(),
        refused.len(),
        longest_quiet_gap(&ticks, &faults),
    );
    println!(
        "resignation -> next term's first tick: {}",
        spread(&resigns)
    );
    println!("kill -> next term's first tick: {}", spread(&kills));
    println!("  beyond the lease's end: {}", spread(&kills_late));
    println!("pause -> next term's first tick: {}", spread(&pauses));
    println!("  beyond the lease's end: {}", spread(&pauses_late));
}

/// Waits until a campaigner waits for the lock `key` held by the term
/// `token`: the lock is marked waited-for (a campaigner asked since it was
/// taken), and somebody listens on its release channel.
async fn a_campaigner_waits(server: &RedisServer, key: &str, token: u64) {
    let waits = support::eventually(LIMIT, || {
        let marked = server
            .lock_value(key)
            .is_some_and(|(fence, state, _)| fence == token && state == "w");
        marked && support::release_subscribers(server, key) > 0
    })
    .await;
    assert!(waits, "nobody campaigned against term {token}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaigner_leads_within_500_ms_of_each_resignation() {
    let _serial = SERIAL.lock().await;
    let rounds = env_or("LOCK_HANDOVER_ROUNDS", 30);
    let server = RedisServer::start();
    let mut con = server.connection();
    let key = "lock:handover";
    // A resigning leader campaigns again only after the bound: by then the
    // other process leads, or the test has failed.
    let mut fleet = Fleet::new(&server.url(), "handover", HANDOVER_BOUND_MS);
    let pids = [fleet.start(), fleet.start()];
    let mut leader = a_leader(&mut con, key, &fleet).await;
    let mut handovers = Vec::new();
    for round in 0..rounds {
        a_campaigner_waits(&server, key, leader.token).await;
        fleet.resign(leader.pid).await;
        next_term(&mut con, key, leader.token, &mut None).await;
        let resigned = fleet.resigned_at(leader.token).await;
        let first = ticks(&mut con)
            .into_iter()
            .find(|tick| tick.token > leader.token)
            .expect("the next term's first tick");
        let other = pids.iter().find(|pid| **pid != leader.pid).copied();
        assert_eq!(
            Some(first.pid),
            other,
            "round {round}: the resigning leader led again, not the campaigner"
        );
        let took = first.ms.saturating_sub(resigned);
        assert!(
            took <= HANDOVER_BOUND_MS,
            "round {round}: the campaigner led {took} ms after the resignation"
        );
        handovers.push(took);
        leader = first;
    }
    fleet.stop().await;
    println!(
        "hand-over (resignation -> the other process's first tick): {}",
        spread(&handovers)
    );
}
