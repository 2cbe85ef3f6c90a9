//! The lock kinds across separate OS processes (the `stock-worker` binary):
//! a reader killed with SIGKILL frees its share at its own lease, permits
//! never exceed their count across processes even when a holder is killed,
//! and a fair line keeps arrival order across processes and is not held up
//! by a waiter that was killed or gave up.
//!
//! The workers print wall-clock milliseconds since the UNIX epoch
//! (`SystemTime`), one clock for every process on the machine, so that
//! their times compare with each other and with this process's.
mod support;

use std::collections::{BTreeMap, HashMap};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lock_runtime::{LockClient, LockError, LockMode, LockOptions};
use redis::aio::MultiplexedConnection;
use support::{Holder, RedisServer};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};
use tokio::time::Instant;

const WORKER: &str = env!("CARGO_BIN_EXE_stock-worker");

/// How long any one line from a worker may take to come.
const LINE_LIMIT: Duration = Duration::from_secs(30);

/// Wall-clock milliseconds since the UNIX epoch, as the workers print them.
fn now_ms() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970");
    u64::try_from(since.as_millis()).expect("ms fit in u64")
}

fn ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).expect("ms fit in u64")
}

/// A worker process, its stdout read line by line; killed by its pid on
/// drop.
struct Worker {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Worker {
    fn start(args: &[&str]) -> Worker {
        let mut child = Command::new(WORKER)
            .args(args)
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start worker");
        let lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        Worker { child, lines }
    }

    /// The next line; panics at the end of the output or after
    /// [`LINE_LIMIT`].
    async fn line(&mut self) -> String {
        tokio::time::timeout(LINE_LIMIT, self.lines.next_line())
            .await
            .expect("a line from the worker in time")
            .expect("read the worker's stdout")
            .expect("the worker printed a line before it ended")
    }

    /// The next line, which starts with `word` and a number: the number.
    async fn stamp(&mut self, word: &str) -> u64 {
        let line = self.line().await;
        line.strip_prefix(word)
            .and_then(|rest| rest.strip_prefix(' '))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("expected `{word} <ms>`, got {line:?}"))
    }

    async fn kill(&mut self) {
        kill(&mut self.child).await;
    }

    async fn succeeds(mut self) {
        succeeds(&mut self.child).await;
    }
}

/// SIGKILL by pid, and reaped: the process is gone when this returns.
async fn kill(child: &mut Child) {
    child.start_kill().expect("SIGKILL by pid");
    child.wait().await.expect("reaped");
}

/// Waits for the worker to end and checks that it succeeded.
async fn succeeds(child: &mut Child) {
    let status = tokio::time::timeout(LINE_LIMIT, child.wait())
        .await
        .expect("the worker ended in time")
        .expect("reaped");
    assert!(status.success(), "the worker failed: {status}");
}

/// A connection to look at the lock's hash in Redis.
async fn connection(server: &RedisServer) -> MultiplexedConnection {
    redis::Client::open(server.url())
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect")
}

/// The fields of the lock `key`'s hash (docs/redis-layout.md): `h:<owner>`
/// holders, `ww` a waiting writer, `q:<n>` fair waiters, and so on. Entries
/// past their expiry stay until the next script reads the hash.
async fn lock_fields(con: &mut MultiplexedConnection, key: &str) -> BTreeMap<String, String> {
    redis::cmd("HGETALL")
        .arg(format!("lock:{key}"))
        .query_async(con)
        .await
        .unwrap_or_default()
}

/// Polls the lock `key`'s hash until `ready` holds of it (up to `limit`);
/// the hash then.
async fn until_fields(
    con: &mut MultiplexedConnection,
    key: &str,
    limit: Duration,
    what: &str,
    ready: impl Fn(&BTreeMap<String, String>) -> bool,
) -> BTreeMap<String, String> {
    let deadline = Instant::now() + limit;
    loop {
        let fields = lock_fields(con, key).await;
        if ready(&fields) {
            return fields;
        }
        assert!(
            Instant::now() < deadline,
            "{what} within {limit:?}; the lock's hash: {fields:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The fair waiters' places (`q:<n>` fields) in a hash.
fn places(fields: &BTreeMap<String, String>) -> Vec<String> {
    fields
        .keys()
        .filter(|field| field.starts_with("q:"))
        .cloned()
        .collect()
}

/// The holders (`h:<owner>` fields) in a hash.
fn holders(fields: &BTreeMap<String, String>) -> usize {
    fields
        .keys()
        .filter(|field| field.starts_with("h:"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_killed_with_sigkill_frees_its_share_at_its_own_lease() {
    let server = RedisServer::start();
    let url = server.url();
    let mut con = connection(&server).await;
    // A's lease is short; the reader here keeps the default 30 s lease,
    // renewed by its watchdog.
    let lease = Duration::from_millis(1500);
    let mut a = Worker::start(&["read-hold", &url, "doc", &ms(lease).to_string()]);
    assert_eq!(a.line().await, "held");
    let ours = LockClient::connect(&url).await.expect("connect");
    let read = LockOptions::new().mode(LockMode::Read).wait(Duration::ZERO);
    let reader = Holder::start(&ours, "doc", read).await;
    // Both shares are live: A's and ours.
    let fields = lock_fields(&mut con, "doc").await;
    assert_eq!(holders(&fields), 2, "two readers hold: {fields:?}");

    a.kill().await;
    let killed = Instant::now();

    // A writer waits while our reader holds.
    let writers = LockClient::connect(&url).await.expect("connect");
    let ours_left = Arc::new(AtomicBool::new(false));
    let writer = tokio::spawn({
        let ours_left = ours_left.clone();
        async move {
            let write = LockOptions::new()
                .mode(LockMode::Write)
                .wait(Duration::from_secs(20));
            writers
                .run_locked("doc", write, async {
                    Ok::<_, LockError>((Instant::now(), ours_left.load(Ordering::SeqCst)))
                })
                .await
        }
    });
    // Its claim ahead of new readers shows that it waits.
    until_fields(
        &mut con,
        "doc",
        Duration::from_secs(10),
        "the writer waits",
        |fields| fields.contains_key("ww"),
    )
    .await;

    // Our reader leaves at a known time after A's lease has ended (A's
    // last renewal was before the kill, so its share ends by kill + lease).
    // If A's share lived as long as the last reader's (ours: 30 s,
    // renewed), the writer would still wait after we leave.
    let leave_at = killed + lease + Duration::from_millis(300);
    tokio::time::sleep_until(leave_at).await;
    assert!(
        !writer.is_finished(),
        "the writer ended while our reader held: {:?}",
        writer.await
    );
    ours_left.store(true, Ordering::SeqCst);
    let left = Instant::now();
    reader.release().await.expect("our reader held to the end");

    let (entered, after_we_left) = writer
        .await
        .expect("writer task")
        .expect("the writer got in once both shares had ended");
    assert!(after_we_left, "the writer got in while our reader held");
    let since_kill = entered - killed;
    let since_left = entered - left;
    println!(
        "writer in {since_kill:?} after A's kill (A's lease {lease:?}), \
         {since_left:?} after our reader left"
    );
    assert!(
        since_left <= Duration::from_millis(700),
        "the writer got in {since_left:?} after the last live reader left"
    );
    assert!(
        since_kill <= lease + Duration::from_secs(1),
        "the writer got in {since_kill:?} after A's kill (lease {lease:?})"
    );
}

/// One hold of a permit as a worker printed it: enter and exit in wall
/// clock ms (no exit: the process was killed while it held).
#[derive(Debug, Default)]
struct Hold {
    worker: usize,
    enter: Option<u64>,
    exit: Option<u64>,
}

/// The most intervals that overlap at once, and the first instant they do;
/// and the most from `from` on. An interval counts from `enter + margin`
/// to its end (half-open: at equal times, ends come before starts).
fn most_overlapping(intervals: &[(u64, u64)], margin: u64, from: u64) -> (usize, u64, usize) {
    let mut events: Vec<(u64, i32)> = Vec::new();
    for &(enter, end) in intervals {
        let start = enter + margin;
        if start < end {
            events.push((start, 1));
            events.push((end, -1));
        }
    }
    // (time, -1) sorts before (time, 1): exits first.
    events.sort_unstable();
    let (mut now, mut most, mut most_at, mut most_from) = (0i32, 0i32, 0u64, 0i32);
    for (time, delta) in events {
        now += delta;
        if now > most {
            (most, most_at) = (now, time);
        }
        if time >= from {
            most_from = most_from.max(now);
        }
    }
    let count = |n: i32| usize::try_from(n).expect("never negative");
    (count(most), most_at, count(most_from))
}

#[test]
fn the_overlap_sweep_counts_ends_before_starts_and_forgives_the_margin() {
    // Touching intervals do not overlap; three nested ones do.
    let touching = [(0, 10), (10, 20), (20, 30)];
    assert_eq!(most_overlapping(&touching, 0, 0), (1, 0, 1));
    let nested = [(0, 100), (10, 90), (20, 80), (95, 120)];
    assert_eq!(most_overlapping(&nested, 0, 85), (3, 20, 2));
    // An overlap shorter than the margin is forgiven; a longer one is not.
    assert_eq!(most_overlapping(&[(0, 13), (10, 30)], 5, 0), (1, 5, 1));
    assert_eq!(most_overlapping(&[(0, 16), (10, 30)], 5, 0), (2, 15, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_across_three_processes_never_exceed_their_count_even_when_a_holder_is_killed() {
    let server = RedisServer::start();
    let url = server.url();
    const PERMITS: usize = 3;
    let lease = Duration::from_millis(1000);
    let lease_ms = ms(lease).to_string();
    // Worker 0 is killed at its first hold; its holds are long (400 ms) so
    // that it is still inside when the kill lands. The others hold 50 ms.
    let holds = ["400", "50", "50"];
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut children = Vec::new();
    for (i, hold) in holds.iter().enumerate() {
        let args = ["permits", &url, "api", "3", "8", "6", &lease_ms, hold];
        let Worker { child, mut lines } = Worker::start(&args);
        children.push(child);
        let tx = tx.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let _ = tx.send((i, line));
            }
        });
    }
    drop(tx);

    let mut holds: HashMap<String, Hold> = HashMap::new();
    let mut done = [false; 3];
    let mut killed_at: Option<u64> = None;
    let limit = Instant::now() + Duration::from_secs(60);
    while let Some((i, line)) = tokio::time::timeout_at(limit, rx.recv())
        .await
        .expect("the workers finished in time")
    {
        let mut words = line.split(' ');
        match (words.next(), words.next(), words.next()) {
            (Some(what @ ("enter" | "exit")), Some(at), Some(id)) => {
                let at: u64 = at.parse().expect("a time in ms");
                let hold = holds.entry(id.to_owned()).or_default();
                hold.worker = i;
                if what == "enter" {
                    hold.enter = Some(at);
                } else {
                    hold.exit = Some(at);
                }
                if i == 0 && what == "enter" && killed_at.is_none() {
                    kill(&mut children[0]).await;
                    // Reaped: the process is dead by now, so its last
                    // renewal came before this moment.
                    killed_at = Some(now_ms());
                }
            }
            (Some("done"), None, None) => done[i] = true,
            _ => panic!("unexpected line from worker {i}: {line:?}"),
        }
    }
    let killed_at = killed_at.expect("worker 0 held a permit");
    assert_eq!(done, [false, true, true], "the survivors finished");
    for child in &mut children[1..] {
        succeeds(child).await;
    }

    // A killed holder's interval ends when its lease ran out: its grant (a
    // moment before its `enter`; see the margin below) plus the lease. A
    // renewal could only have made the real hold longer, so the interval
    // stays inside it and an overlap found is real. It is also the real
    // end: worker 0 is killed at its first `enter` line, a few ms after its
    // holds began, and the watchdog renews at a third of the lease
    // (batching the renewals due within a quarter of that), never before a
    // quarter of the lease.
    let mut intervals = Vec::new();
    let mut labels = Vec::new();
    let mut open_at_kill = 0;
    let mut killed_holds_end = killed_at;
    let mut kill_after_enter = 0;
    for (id, hold) in &holds {
        let enter = hold
            .enter
            .unwrap_or_else(|| panic!("{id} exited without entering"));
        let end = match hold.exit {
            Some(exit) => exit,
            None => {
                assert_eq!(hold.worker, 0, "{id} of a survivor never exited");
                open_at_kill += 1;
                kill_after_enter = kill_after_enter.max(killed_at.saturating_sub(enter));
                killed_holds_end = killed_holds_end.max(enter + ms(lease));
                enter + ms(lease)
            }
        };
        assert!(enter <= end, "{id}: {hold:?}");
        intervals.push((enter, end));
        labels.push((id, hold));
    }
    assert!(
        open_at_kill >= 1,
        "worker 0 held no permit when it was killed: {:?}",
        holds
            .values()
            .filter(|hold| hold.worker == 0)
            .collect::<Vec<_>>()
    );
    // The margin: an overlap of up to 5 ms is not counted. The printed
    // intervals of the holds that ended lie inside the real holds (`enter`
    // is read after the grant, `exit` before the release), but each time is
    // truncated to the ms, and a killed holder's lease began at its grant,
    // a moment (its answer's way back, a few ms at most) before its
    // `enter`.
    let margin = 5;
    let back_at = killed_holds_end + margin;
    let (most, most_at, most_after) = most_overlapping(&intervals, margin, back_at);
    println!(
        "{} holds, {open_at_kill} open at the kill (killed {kill_after_enter} ms after \
         the first of them entered); at most {most} at once; {most_after} at once after \
         the killed holds' leases ran out",
        holds.len()
    );
    // On failure: the holds inside at that instant, in ms from the kill.
    let from_kill = |at: u64| i128::from(at) - i128::from(killed_at);
    let inside: Vec<String> = intervals
        .iter()
        .zip(&labels)
        .filter(|((enter, end), _)| enter + margin <= most_at && most_at < *end)
        .map(|((enter, end), (id, hold))| {
            format!(
                "worker {} hold {id}: {}..{} ms (exit printed: {})",
                hold.worker,
                from_kill(*enter),
                from_kill(*end),
                hold.exit.is_some()
            )
        })
        .collect();
    assert!(
        most <= PERMITS,
        "{most} holders at once on {PERMITS} permits, {} ms after the kill: {inside:#?}",
        from_kill(most_at)
    );
    assert_eq!(most, PERMITS, "the permits were never all in use");
    assert_eq!(
        most_after, PERMITS,
        "the killed holder's permits never came back"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_line_across_three_processes_keeps_arrival_order() {
    let server = RedisServer::start();
    let url = server.url();
    let mut con = connection(&server).await;
    let client = LockClient::connect(&url).await.expect("connect");
    let fair = LockOptions::new().fair(true).wait(Duration::from_secs(20));
    let holder = Holder::start(&client, "line", fair).await;

    let mut waiters = Vec::new();
    for i in 0..3 {
        let mut waiter = Worker::start(&["fair-wait", &url, "line", "30000"]);
        waiter.stamp("waiting").await;
        let printed = Instant::now();
        // In line: its place is in Redis.
        until_fields(
            &mut con,
            "line",
            Duration::from_secs(10),
            "in line",
            |fields| places(fields).len() == i + 1,
        )
        .await;
        tokio::time::sleep_until(printed + Duration::from_millis(200)).await;
        waiters.push(waiter);
    }
    let released = now_ms();
    holder.release().await.expect("the holder held to the end");

    let mut entered = Vec::new();
    for mut waiter in waiters {
        entered.push(waiter.stamp("entered").await);
        waiter.succeeds().await;
    }
    println!(
        "entered {:?} ms after the release",
        entered
            .iter()
            .map(|at| at.saturating_sub(released))
            .collect::<Vec<_>>()
    );
    let mut order: Vec<usize> = (0..3).collect();
    order.sort_by_key(|&i| entered[i]);
    assert_eq!(order, vec![0, 1, 2], "entry times {entered:?}");
    // Each holds 50 ms: one after the other.
    for pair in entered.windows(2) {
        assert!(pair[1] >= pair[0] + 50, "overlapping holds: {entered:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_waiter_that_times_out_or_is_killed_does_not_hold_up_the_line() {
    let server = RedisServer::start();
    let url = server.url();
    let mut con = connection(&server).await;
    let client = LockClient::connect(&url).await.expect("connect");
    let fair = LockOptions::new().fair(true).wait(Duration::from_secs(20));
    let holder = Holder::start(&client, "line", fair).await;

    // W1, in a process, keeps its place for 1 s without a heartbeat.
    let waiter_lease = Duration::from_secs(1);
    let mut w1 = Worker::start(&[
        "fair-wait",
        &url,
        "line",
        "30000",
        &ms(waiter_lease).to_string(),
    ]);
    w1.stamp("waiting").await;
    let fields = until_fields(
        &mut con,
        "line",
        Duration::from_secs(10),
        "W1 in line",
        |f| places(f).len() == 1,
    )
    .await;
    let w1_place = places(&fields).remove(0);
    w1.kill().await;
    let killed = Instant::now();

    // W2, here, waits 300 ms behind W1 and gives up (its place, of the
    // default 5 s waiter lease, is withdrawn at once).
    let w2_client = LockClient::connect(&url).await.expect("connect");
    let w2 = tokio::spawn(async move {
        let started = Instant::now();
        let outcome = w2_client
            .run_locked("line", fair.wait(Duration::from_millis(300)), async {
                Ok::<_, LockError>(())
            })
            .await;
        (outcome, started.elapsed())
    });
    let fields = until_fields(
        &mut con,
        "line",
        Duration::from_secs(10),
        "W2 in line",
        |f| places(f).len() == 2,
    )
    .await;
    let w2_place = places(&fields)
        .into_iter()
        .find(|place| *place != w1_place)
        .expect("W2's place");
    // W1's place as its last heartbeat left it: `<owner>:<expiry ms>`.
    let w1_expiry: u64 = fields[&w1_place]
        .rsplit(':')
        .next()
        .and_then(|ms| ms.parse().ok())
        .expect("W1's place's expiry");

    // W3, here, queues behind W2 while W2 still waits.
    let w3_client = LockClient::connect(&url).await.expect("connect");
    let w3 = tokio::spawn(async move {
        w3_client
            .run_locked("line", fair, async {
                Ok::<_, LockError>((Instant::now(), now_ms()))
            })
            .await
    });
    until_fields(
        &mut con,
        "line",
        Duration::from_secs(10),
        "W3 in line behind W2",
        |f| places(f).len() == 3,
    )
    .await;

    let (outcome, waited) = w2.await.expect("W2 task");
    let error = outcome.expect_err("W2 got in while the holder held");
    assert!(error.is_timeout(), "W2: {error}");
    let gave_up = Instant::now();
    until_fields(
        &mut con,
        "line",
        Duration::from_secs(1),
        "W2's place withdrawn",
        |f| !f.contains_key(&w2_place),
    )
    .await;
    let withdrawn = gave_up.elapsed();

    let released = Instant::now();
    holder.release().await.expect("the holder held to the end");
    let (entered, entered_ms) = w3
        .await
        .expect("W3 task")
        .expect("W3 got in past the dead and the withdrawn waiter");
    let since_release = entered - released;
    println!(
        "W2 gave up after {waited:?}, its place gone {withdrawn:?} later; the holder left \
         {:?} after W1's kill; W3 in {since_release:?} after the release, {:?} after W1's kill, \
         {} ms after W1's place expired (W1's waiter lease {waiter_lease:?})",
        released - killed,
        entered - killed,
        i128::from(entered_ms) - i128::from(w1_expiry),
    );
    assert!(
        since_release <= waiter_lease + Duration::from_secs(1),
        "W3 got in {since_release:?} after the release (W1's waiter lease {waiter_lease:?})"
    );
}
