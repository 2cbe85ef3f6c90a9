//! A holder paused past its lease cannot write after a newer holder did:
//! the resource refuses it, not the client. For a resource in Redis
//! (`LockClient::fenced_write`) and a row in PostgreSQL (`UPDATE … WHERE
//! fence <= $token`).
//!
//! Each loop: a worker process A takes the lock (lease 1 s) and, inside its
//! body, reads its token and stops itself (`raise(SIGSTOP)`): after that
//! poll's lease check, so the lock cannot stop what follows. The parent
//! sees A stopped, takes the lock itself once A's lease has run out (B),
//! writes the resource with B's token, then resumes A (SIGCONT). A, in the
//! poll that resumes, sends its stale write with its old token (the
//! explicit-token form: nothing on the client checks the hold) and reports
//! what the resource answered. Over all loops: tried = loops, accepted = 0,
//! and the resource holds B's last write.
//!
//! The worker is this test binary itself, started again to run only
//! [`stale_holder`] with `FENCE_WORKER` set (its dependencies,
//! `tokio-postgres` and `libc`, are dev-dependencies: a `src/bin` worker
//! could not use them). `LOCK_TEST_FENCE_LOOPS` sets the loops (default 5,
//! about 1 s each).

use std::future::Future;
use std::process::Stdio;
use std::task::Poll;
use std::time::{Duration, Instant};

use lock_runtime::{fencing_token, LockClient, LockError, LockOptions};
use lock_testkit::{Postgres, Server, ServerOptions};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};
use tokio_postgres::NoTls;

/// A's lease: no renewal happens while A is stopped, so it ends this long
/// after A's last renewal.
const LEASE: Duration = Duration::from_secs(1);
/// The lock both holders take.
const KEY: &str = "fenced:proc";
/// The resource in Redis (its fence key is `{fenced:acct}:fence`).
const RESOURCE: &str = "fenced:acct";
/// The prefix of the worker's own lines (libtest prints its own).
const SAYS: &str = "fence-worker ";
/// How long one step of a loop may take (a start, a line, an exit).
const STEP: Duration = Duration::from_secs(30);

/// The PostgreSQL write, fenced: `$1` the holder's mark, `$2` its token.
const UPDATE: &str = "UPDATE account SET holder = $1, fence = $2 WHERE id = 1 AND fence <= $2";

// ---------------------------------------------------------------- worker

/// What the resource answered A's stale write.
#[derive(Debug, PartialEq)]
enum Stale {
    Accepted,
    /// Refused: the resource, the token it holds (0: not said), A's token.
    Refused(String, u64, u64),
    Failed(String),
}

impl Stale {
    fn line(&self) -> String {
        match self {
            Stale::Accepted => "stale accepted".to_owned(),
            Stale::Refused(resource, stored, given) => {
                format!("stale refused {resource} {stored} {given}")
            }
            Stale::Failed(e) => format!("stale failed {e}"),
        }
    }

    fn parse(line: &str) -> Stale {
        let words: Vec<&str> = line.split(' ').collect();
        match words.as_slice() {
            ["stale", "accepted"] => Stale::Accepted,
            ["stale", "refused", resource, stored, given] => Stale::Refused(
                (*resource).to_owned(),
                stored.parse().expect("stored token"),
                given.parse().expect("given token"),
            ),
            _ => Stale::Failed(line.to_owned()),
        }
    }
}

fn say(line: &str) {
    // println! flushes at the newline: the parent reads it before the stop.
    println!("{SAYS}{line}");
}

/// The stale holder, when started by a test below (`FENCE_WORKER` is
/// `redis` or `postgres`); nothing otherwise.
#[test]
#[ignore = "the stale holder's process, started by the tests of this file"]
fn stale_holder() {
    let Ok(resource) = std::env::var("FENCE_WORKER") else {
        return;
    };
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is set"));
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let client = LockClient::connect(&var("FENCE_REDIS_URL"))
            .await
            .expect("connect to Redis");
        match resource.as_str() {
            "redis" => {
                let lock = client.clone();
                let write = move |token: u64| async move {
                    let sent = lock
                        .fenced_write(RESOURCE)
                        .token(token)
                        .cmd("SET", [RESOURCE], format!("A:{token}"))
                        .run()
                        .await;
                    match sent {
                        Ok(_) => Stale::Accepted,
                        Err(LockError::Fenced {
                            resource,
                            stored,
                            given,
                            ..
                        }) => Stale::Refused(resource, stored, given),
                        Err(e) => Stale::Failed(e.to_string()),
                    }
                };
                hold_and_stop(&client, write).await;
            }
            "postgres" => {
                let (pg, connection) = tokio_postgres::connect(&var("FENCE_POSTGRES"), NoTls)
                    .await
                    .expect("connect to PostgreSQL");
                tokio::spawn(connection);
                // Prepared before the lock: the stale write is one message.
                let update = pg.prepare(UPDATE).await.expect("prepare");
                let write = move |token: u64| async move {
                    let fence = i64::try_from(token).expect("a token below 2^63");
                    match pg.execute(&update, &[&format!("A:{token}"), &fence]).await {
                        Ok(0) => Stale::Refused("account:1".to_owned(), 0, token),
                        Ok(_) => Stale::Accepted,
                        Err(e) => Stale::Failed(e.to_string()),
                    }
                };
                hold_and_stop(&client, write).await;
            }
            other => panic!("FENCE_WORKER={other}: redis or postgres"),
        }
    });
}

/// Takes the lock, stops inside its body, and on resume sends `write` with
/// the body's token in that same poll; says what the resource answered,
/// then how the locked call ended.
async fn hold_and_stop<W, F>(client: &LockClient, write: W)
where
    W: FnOnce(u64) -> F,
    F: Future<Output = Stale> + Send + 'static,
{
    let (sent, stale) = tokio::sync::oneshot::channel();
    let options = LockOptions::new().lease(LEASE);
    let ended = client
        .run_locked(KEY, options, async {
            let token = fencing_token().expect("inside the body");
            say(&format!("token {token}"));
            // SAFETY: raise(3) with a signal number; the parent resumes us.
            unsafe { libc::raise(libc::SIGSTOP) };
            // Resumed, in the poll that checked the lease before the stop.
            let _ = sent.send(start_here(write(token)).await);
            Ok::<_, LockError>(())
        })
        .await;
    let answer = match stale.await {
        Ok(task) => task.await.expect("the stale write's task"),
        Err(_) => Stale::Failed("the body never ran on".to_owned()),
    };
    say(&answer.line());
    say(&format!("ended {ended:?}"));
}

/// Polls `write` once inside the caller's poll (the write starts there,
/// with no lease check between the resume and the write), then hands it to
/// a task of its own: the lock drops a body whose lease ran out at its next
/// poll, but not this write, whose answer is awaited outside the lock.
async fn start_here<F>(write: F) -> tokio::task::JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let mut write = Box::pin(write);
    let first = std::future::poll_fn(|cx| Poll::Ready(write.as_mut().poll(cx))).await;
    match first {
        Poll::Ready(answer) => tokio::spawn(async move { answer }),
        Poll::Pending => tokio::spawn(write),
    }
}

// ---------------------------------------------------------------- parent

/// A worker process, resumed and killed by pid on drop (a failing test
/// leaves none stopped).
struct Worker {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Worker {
    fn start(resource: &str, redis: &str, postgres: Option<&str>) -> Worker {
        let mut command = Command::new(std::env::current_exe().expect("this test binary"));
        command
            .args([
                "stale_holder",
                "--exact",
                "--include-ignored",
                "--nocapture",
            ])
            .args(["--test-threads", "1"])
            .env("FENCE_WORKER", resource)
            .env("FENCE_REDIS_URL", redis)
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        if let Some(postgres) = postgres {
            command.env("FENCE_POSTGRES", postgres);
        }
        let mut child = command.spawn().expect("start the worker");
        let stdout = child.stdout.take().expect("piped");
        Worker {
            child,
            lines: BufReader::new(stdout).lines(),
        }
    }

    fn pid(&self) -> u32 {
        self.child.id().expect("running")
    }

    /// The rest of the worker's next line of its own that starts with
    /// `word`; panics at its end or after [`STEP`].
    async fn next(&mut self, word: &str) -> String {
        let deadline = tokio::time::Instant::now() + STEP;
        loop {
            let line = tokio::time::timeout_at(deadline, self.lines.next_line())
                .await
                .unwrap_or_else(|_| panic!("no `{word}` line from the worker within {STEP:?}"))
                .expect("read the worker's output")
                .unwrap_or_else(|| panic!("the worker ended without a `{word}` line"));
            // libtest's `test stale_holder ... ` may open the line.
            let said = line.find(SAYS).map(|at| &line[at + SAYS.len()..]);
            if let Some(said) = said.filter(|said| said.starts_with(word)) {
                return said.to_owned();
            }
        }
    }

    /// Waits until the process is stopped (`T` in `/proc/<pid>/stat`).
    async fn stopped(&self) {
        let deadline = Instant::now() + STEP;
        while state(self.pid()) != Some('T') {
            assert!(Instant::now() < deadline, "the worker did not stop itself");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    fn resume(&self) {
        signal(self.pid(), libc::SIGCONT);
    }

    async fn exited(mut self) {
        let status = tokio::time::timeout(STEP, self.child.wait())
            .await
            .expect("the worker exits")
            .expect("its status");
        assert!(status.success(), "the worker failed: {status}");
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Some(pid) = self.child.id() {
            signal(pid, libc::SIGCONT);
        }
    }
}

fn signal(pid: u32, signal: libc::c_int) {
    let pid = libc::pid_t::try_from(pid).expect("a pid");
    // SAFETY: kill(2) with the pid of our own child.
    unsafe { libc::kill(pid, signal) };
}

/// The state letter of `pid` in `/proc/<pid>/stat`.
fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

fn loops() -> usize {
    match std::env::var("LOCK_TEST_FENCE_LOOPS") {
        Ok(n) => n.parse().expect("LOCK_TEST_FENCE_LOOPS is a count"),
        Err(_) => 5,
    }
}

/// The tallies of a run.
#[derive(Debug, Default)]
struct Tally {
    tried: usize,
    refused: usize,
    accepted: usize,
}

/// One loop: A holds and stops; the parent, as B, takes the lock once A's
/// lease ran out and writes with `b_write` (given B's token); A resumes and
/// writes stale. A's token, B's token and what the resource told A.
async fn one_loop<W, F>(worker: &mut Worker, client: &LockClient, b_write: W) -> (u64, u64, Stale)
where
    W: FnOnce(u64) -> F,
    F: Future<Output = ()>,
{
    let a: u64 = worker.next("token").await[6..].parse().expect("A's token");
    worker.stopped().await;
    let options = LockOptions::new().wait(STEP);
    let b = client
        .run_locked(KEY, options, async {
            let b = fencing_token().expect("inside the body");
            b_write(b).await;
            Ok::<_, LockError>(b)
        })
        .await
        .expect("B takes the lock once A's lease ran out");
    assert!(b > a, "B's token {b} is above A's {a}");
    worker.resume();
    let stale = Stale::parse(&worker.next("stale").await);
    let ended = worker.next("ended").await;
    assert!(ended.contains("Err("), "A's locked call ended with {ended}");
    (a, b, stale)
}

/// Counts a loop's stale write.
fn count(tally: &mut Tally, stale: &Stale) {
    match stale {
        Stale::Accepted => {
            tally.tried += 1;
            tally.accepted += 1;
        }
        Stale::Refused(..) => {
            tally.tried += 1;
            tally.refused += 1;
        }
        Stale::Failed(_) => {}
    }
}

#[test]
fn a_paused_holder_cannot_write_a_redis_resource_after_a_newer_holder() {
    let redis = ServerOptions::unix()
        .start()
        .unwrap_or_else(|e| panic!("{e}"));
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let (n, tally, took) = runtime.block_on(async {
        let client = LockClient::connect(&redis.url()).await.expect("connect");
        let (n, mut tally, start) = (loops(), Tally::default(), Instant::now());
        for _ in 0..n {
            let mut worker = Worker::start("redis", &redis.url(), None);
            let b_write = |b: u64| {
                let write = client
                    .fenced_write(RESOURCE)
                    .cmd("SET", [RESOURCE], format!("B:{b}"));
                async move { write.run().await.map(drop).expect("B's fenced write") }
            };
            let (a, b, stale) = one_loop(&mut worker, &client, b_write).await;
            assert_eq!(stale, Stale::Refused(RESOURCE.to_owned(), b, a));
            count(&mut tally, &stale);
            assert_eq!(get(&redis, RESOURCE), format!("B:{b}"), "B's write stands");
            worker.exited().await;
        }
        (n, tally, start.elapsed())
    });
    report("Redis", n, &tally, took);
    assert_eq!((tally.tried, tally.accepted), (n, 0), "{tally:?}");
    // The refusals were the server's: its script answered LOCKFENCED.
    let errors = redis.info("errorstats").expect("INFO errorstats");
    assert!(
        errors.contains(&format!("errorstat_LOCKFENCED:count={n}\r")),
        "{errors}"
    );
}

fn get(redis: &Server, key: &str) -> String {
    redis
        .query(redis::cmd("GET").arg(key))
        .expect("GET the resource")
}

fn report(what: &str, n: usize, tally: &Tally, took: Duration) {
    let per_loop = took.as_secs_f64() / n.max(1) as f64;
    eprintln!(
        "{what}: {n} loops, stale writes tried {}, refused {}, accepted {}; {per_loop:.2} s a loop",
        tally.tried, tally.refused, tally.accepted
    );
}

#[test]
fn a_paused_holder_cannot_update_a_postgres_row_after_a_newer_holder() {
    // Both servers from this thread, which lives as long as the test: the
    // PostgreSQL server dies with the thread that started it.
    let redis = ServerOptions::unix()
        .start()
        .unwrap_or_else(|e| panic!("{e}"));
    let postgres = Postgres::start();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let (n, tally, took) = runtime.block_on(async {
        let client = LockClient::connect(&redis.url()).await.expect("connect");
        let (pg, connection) = tokio_postgres::connect(&postgres.conninfo(), NoTls)
            .await
            .expect("connect to PostgreSQL");
        tokio::spawn(connection);
        pg.batch_execute(
            "CREATE TABLE account (id int PRIMARY KEY, holder text NOT NULL, \
             fence bigint NOT NULL DEFAULT 0); \
             INSERT INTO account (id, holder) VALUES (1, 'nobody')",
        )
        .await
        .expect("the table");
        let (n, mut tally, start) = (loops(), Tally::default(), Instant::now());
        for _ in 0..n {
            let mut worker = Worker::start("postgres", &redis.url(), Some(&postgres.conninfo()));
            let pg = &pg;
            let b_write = |b: u64| async move {
                let fence = i64::try_from(b).expect("a token below 2^63");
                let rows = pg.execute(UPDATE, &[&format!("B:{b}"), &fence]).await;
                assert_eq!(rows.expect("B's update"), 1, "B's update wrote the row");
            };
            let (a, b, stale) = one_loop(&mut worker, &client, b_write).await;
            assert_eq!(stale, Stale::Refused("account:1".to_owned(), 0, a));
            count(&mut tally, &stale);
            let row = pg
                .query_one("SELECT holder, fence FROM account WHERE id = 1", &[])
                .await
                .expect("the row");
            let (holder, fence): (String, i64) = (row.get(0), row.get(1));
            assert_eq!(
                (holder, fence),
                (format!("B:{b}"), b as i64),
                "B's row stands"
            );
            worker.exited().await;
        }
        (n, tally, start.elapsed())
    });
    report("PostgreSQL", n, &tally, took);
    assert_eq!((tally.tried, tally.accepted), (n, 0), "{tally:?}");
    drop(postgres);
}
