//! A money-transfer service on Redis Cluster under a planned failover and a
//! master killed (`kill -9`): every answer a call gives is acted on as the
//! operations guide's table says, and the money adds up.
//!
//! 20 accounts, 2 processes × 16 tasks (the processes are this test
//! binary started again to run [`transfer_worker`]; each prints its
//! transfers and their answers, one line each, when told to stop). A transfer is one `run_locked_all_outcome` over
//! `account:<from>` and `account:<to>`, whose body makes two fenced writes,
//! the debit and the credit: each adds to the account's balance and
//! records the transfer's id with the amount in the account's own slot, in
//! the same script (`{account:<n>}:balance`, `{account:<n>}:transfers`).
//! Balances start at 0, so the total is 0 when the books are right. The
//! answers, by the guide's table:
//! - `Held(Ok)` and `RanButLost { body: Ok, .. }`: both writes ran;
//! - `NotRun`: nothing ran (checked: neither account records the id);
//! - `Held(Err)`, `RanButLost { body: Err, .. }` and `Stopped`: a write
//!   may have run, or run unreplicated: settled after the faults by reading
//!   the records back, and a transfer found half done is completed.
//!
//! During the load a replica of one master is promoted (`CLUSTER
//! FAILOVER`), then another master is killed and, once its replica took
//! over, restarted (it rejoins as a replica). Asserted, for every account:
//! its balance is the sum of the amounts it records (a fenced write is
//! whole or absent, on the promoted replica too). With `sync_replicas(1,
//! 200 ms)`: every transfer answered as done has both records, and once the
//! unknown ones are settled the total is 0. Without: a done transfer's
//! write may be erased by the kill (asynchronous replication); the total,
//! once every half-done transfer is completed, is 0, and the erased writes
//! are counted from the records.
//!
//! `LOCK_TEST_TRANSFER_RUNS` runs each test that many times (default 1),
//! each with its own seed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use lock_runtime::{LockClient, LockError, LockOptions, Outcome};
use lock_testkit::cluster::RedisCluster;
use redis::AsyncCommands;
use tokio::time::Instant;

/// One cluster test at a time: they share the machine's two cores.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const ACCOUNTS: u64 = 20;
const CLIENTS: usize = 2;
const TASKS: usize = 16;
/// Each transfer's wait for its two locks.
const WAIT: Duration = Duration::from_secs(3);
/// The load before the first fault, between the faults, and after them.
const PHASE: Duration = Duration::from_millis(1500);
/// Every wait on the cluster's state.
const LIMIT: Duration = Duration::from_secs(30);

/// How a transfer's call ended, by the guide's table; the errors by their
/// kind (see [`kind_of`]).
#[derive(Debug)]
enum Verdict {
    /// The body ran to its end and both writes ran.
    Done,
    /// The body never began: nothing ran.
    NotRun(String),
    /// A write may have run: settled from the records.
    Unknown(String),
}

/// One transfer as a task made it.
#[derive(Debug)]
struct Transfer {
    id: String,
    from: u64,
    to: u64,
    amount: i64,
    verdict: Verdict,
}

fn account(n: u64) -> String {
    format!("account:{n}")
}

fn balance_key(n: u64) -> String {
    format!("{{account:{n}}}:balance")
}

fn records_key(n: u64) -> String {
    format!("{{account:{n}}}:transfers")
}

/// A small, seeded generator (xorshift64*): the run's choices are
/// reproducible from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One side of a transfer: `delta` to account `n`'s balance and the id
/// recorded with it, in one fenced write under the account's lock.
async fn write(client: &LockClient, n: u64, id: &str, delta: i64) -> Result<(), LockError> {
    let resource = account(n);
    client
        .fenced_write(&resource)
        .lock(&resource)
        .cmd("INCRBY", [balance_key(n)], delta)
        .cmd("HSET", [records_key(n)], (id, delta))
        .run()
        .await
        .map(drop)
}

/// One transfer, its answer read as the guide's table says.
async fn transfer(client: &LockClient, id: String, from: u64, to: u64, amount: i64) -> Transfer {
    let keys = [account(from), account(to)];
    let options = LockOptions::new().wait(WAIT);
    let outcome = client
        .run_locked_all_outcome(&keys, options, async {
            write(client, from, &id, -amount).await?;
            write(client, to, &id, amount).await
        })
        .await;
    let verdict = match outcome {
        Outcome::Held(Ok(())) | Outcome::RanButLost { body: Ok(()), .. } => Verdict::Done,
        Outcome::NotRun(error) => Verdict::NotRun(kind_of(&error)),
        Outcome::Held(Err(error)) => Verdict::Unknown(format!("Held/{}", kind_of(&error))),
        Outcome::RanButLost {
            body: Err(body),
            error,
        } => Verdict::Unknown(format!("RanButLost/{}/{}", kind_of(&error), kind_of(&body))),
        Outcome::Stopped(error) => Verdict::Unknown(format!("Stopped/{}", kind_of(&error))),
        other => Verdict::Unknown(format!("{other:?}")),
    };
    Transfer {
        id,
        from,
        to,
        amount,
        verdict,
    }
}

/// A task's transfers until `stop`.
async fn task(
    client: LockClient,
    name: String,
    seed: u64,
    stop: Arc<AtomicBool>,
    made: Arc<Mutex<Vec<Transfer>>>,
) {
    let mut rng = Rng(seed | 1);
    let deadline = Instant::now() + Duration::from_secs(120);
    for n in 0..100_000u64 {
        if stop.load(Ordering::Relaxed) || Instant::now() > deadline {
            break;
        }
        let from = rng.below(ACCOUNTS);
        let to = (from + 1 + rng.below(ACCOUNTS - 1)) % ACCOUNTS;
        let amount = 1 + rng.below(50) as i64;
        let done = transfer(&client, format!("{name}-{n}"), from, to, amount).await;
        made.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(done);
    }
}

/// Waits until node `i` is a master.
fn wait_master(cluster: &RedisCluster, i: usize) {
    let deadline = std::time::Instant::now() + LIMIT;
    while !cluster.is_master(i) {
        assert!(
            std::time::Instant::now() < deadline,
            "node {i} not promoted within {LIMIT:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Each account's balance and records, read after the run.
struct Books {
    balances: Vec<i64>,
    records: Vec<HashMap<String, i64>>,
}

async fn read_books(con: &mut redis::cluster_async::ClusterConnection) -> Books {
    let mut books = Books {
        balances: Vec::new(),
        records: Vec::new(),
    };
    for n in 0..ACCOUNTS {
        let balance: Option<i64> = con.get(balance_key(n)).await.expect("GET balance");
        let records: HashMap<String, i64> =
            con.hgetall(records_key(n)).await.expect("HGETALL records");
        books.balances.push(balance.unwrap_or(0));
        books.records.push(records);
    }
    books
}

impl Books {
    fn recorded(&self, n: u64, id: &str) -> bool {
        self.records[n as usize].contains_key(id)
    }

    fn total(&self) -> i64 {
        self.balances.iter().sum()
    }
}

/// What a run found.
#[derive(Debug, Default)]
struct Report {
    done: usize,
    not_run: usize,
    unknown: usize,
    /// Done transfers with a side missing: erased by the kill.
    erased: usize,
    /// Transfers found half done and completed.
    completed: usize,
    /// `NotRun` and unknown answers by their kind.
    errors: HashMap<String, usize>,
}

/// An error's kind, to count errors by: its variant, with a loss's reason
/// and a failed write's `ran`.
fn kind_of(error: &LockError) -> String {
    let debug = format!("{error:?}");
    let variant = debug
        .split([' ', '{', '('])
        .next()
        .unwrap_or_default()
        .to_owned();
    match error {
        LockError::Lost { reason, .. } => format!("{variant}({reason:?})"),
        LockError::WriteFailed { ran, .. } => format!("{variant}({ran:?})"),
        _ => variant,
    }
}

/// The prefix of a worker's own lines (libtest prints its own).
const SAYS: &str = "transfer-worker ";

impl Transfer {
    /// One line of a worker's output.
    fn line(&self) -> String {
        let (verdict, kind) = match &self.verdict {
            Verdict::Done => ("done", "-"),
            Verdict::NotRun(kind) => ("not_run", kind.as_str()),
            Verdict::Unknown(kind) => ("unknown", kind.as_str()),
        };
        let Transfer {
            id,
            from,
            to,
            amount,
            ..
        } = self;
        format!("{SAYS}transfer {id} {from} {to} {amount} {verdict} {kind}")
    }

    fn parse(line: &str) -> Option<Transfer> {
        let rest = line.strip_prefix(SAYS)?.strip_prefix("transfer ")?;
        let words: Vec<&str> = rest.splitn(6, ' ').collect();
        let [id, from, to, amount, verdict, kind] = words.as_slice() else {
            return None;
        };
        let verdict = match *verdict {
            "done" => Verdict::Done,
            "not_run" => Verdict::NotRun((*kind).to_owned()),
            _ => Verdict::Unknown((*kind).to_owned()),
        };
        Some(Transfer {
            id: (*id).to_owned(),
            from: from.parse().ok()?,
            to: to.parse().ok()?,
            amount: amount.parse().ok()?,
            verdict,
        })
    }
}

/// The worker process, when started by a test below (`TRANSFER_WORKER` is
/// its name); nothing otherwise. It runs [`TASKS`] tasks of transfers on
/// the cluster at `TRANSFER_URLS` until a line comes on its stdin (or it
/// closes), then prints every transfer and its answer.
#[test]
#[ignore = "a transfer service's process, started by the tests of this file"]
fn transfer_worker() {
    let Ok(name) = std::env::var("TRANSFER_WORKER") else {
        return;
    };
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is set"));
    let urls = var("TRANSFER_URLS");
    let seeds: Vec<&str> = urls.split(',').collect();
    let synced = var("TRANSFER_SYNCED") == "1";
    let seed: u64 = var("TRANSFER_SEED").parse().expect("a seed");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let mut builder = LockClient::builder().connect_timeout(Duration::from_secs(5));
        if synced {
            builder = builder.sync_replicas(1, Duration::from_millis(200));
        }
        let client = builder.cluster(&seeds).await.expect("cluster connect");
        let stop = Arc::new(AtomicBool::new(false));
        let made = Arc::new(Mutex::new(Vec::new()));
        let tasks: Vec<_> = (0..TASKS)
            .map(|t| {
                let seed = seed ^ (t as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                let name = format!("{name}t{t}");
                tokio::spawn(task(client.clone(), name, seed, stop.clone(), made.clone()))
            })
            .collect();
        println!("{SAYS}ready");
        // Any line, or the end of stdin, stops the transfers.
        let _ = tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            std::io::stdin().read_line(&mut line)
        })
        .await;
        stop.store(true, Ordering::Relaxed);
        for task in tasks {
            task.await.expect("transfer task");
        }
        for transfer in made.lock().unwrap_or_else(PoisonError::into_inner).iter() {
            println!("{}", transfer.line());
        }
        println!("{SAYS}end");
    });
}

/// A worker process, killed by pid on drop (a failing test leaves none).
struct Worker {
    child: tokio::process::Child,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

impl Worker {
    fn start(name: &str, urls: &[String], synced: bool, seed: u64) -> Worker {
        let mut command =
            tokio::process::Command::new(std::env::current_exe().expect("this test binary"));
        command
            .args([
                "transfer_worker",
                "--exact",
                "--include-ignored",
                "--nocapture",
            ])
            .args(["--test-threads", "1"])
            .env("TRANSFER_WORKER", name)
            .env("TRANSFER_URLS", urls.join(","))
            .env("TRANSFER_SYNCED", if synced { "1" } else { "0" })
            .env("TRANSFER_SEED", seed.to_string())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().expect("start a worker");
        let stdout = child.stdout.take().expect("piped");
        let lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
        Worker { child, lines }
    }

    /// The worker's next line of its own; panics at its end or after
    /// [`LIMIT`].
    async fn next(&mut self) -> String {
        let deadline = Instant::now() + LIMIT;
        loop {
            let line = tokio::time::timeout_at(deadline, self.lines.next_line())
                .await
                .unwrap_or_else(|_| panic!("no line from a worker within {LIMIT:?}"))
                .expect("read a worker's output")
                .expect("a worker ended early");
            // libtest's own `test transfer_worker ... ` may come first.
            if let Some(at) = line.find(SAYS) {
                return line[at..].to_owned();
            }
        }
    }

    /// Tells the worker to stop, and its transfers.
    async fn transfers(mut self) -> Vec<Transfer> {
        drop(self.child.stdin.take());
        let mut made = Vec::new();
        loop {
            let line = self.next().await;
            if line == format!("{SAYS}end") {
                break;
            }
            made.push(Transfer::parse(&line).unwrap_or_else(|| panic!("a worker said {line}")));
        }
        let _ = self.child.wait().await;
        made
    }
}

async fn run(synced: bool, seed: u64) -> Report {
    let mut cluster = RedisCluster::start();
    let urls = cluster.urls();
    let mut workers: Vec<Worker> = (0..CLIENTS)
        .map(|c| Worker::start(&format!("p{c}"), &urls, synced, seed ^ c as u64))
        .collect();
    for worker in &mut workers {
        assert_eq!(worker.next().await, format!("{SAYS}ready"));
    }
    tokio::time::sleep(PHASE).await;
    // A planned failover of the first master.
    let planned = cluster.master_of(&account(0));
    let promoted = cluster.replica_of(planned);
    cluster.manual_failover(promoted);
    tokio::time::sleep(PHASE).await;
    // Another master killed, and restarted once its replica took over.
    let killed = (0..cluster.nodes.len())
        .find(|&i| i != planned && i != promoted && cluster.is_master(i))
        .expect("another master");
    let successor = cluster.replica_of(killed);
    cluster.kill(killed);
    wait_master(&cluster, successor);
    cluster.nodes[killed].restart(true).expect("restart");
    tokio::time::sleep(PHASE).await;
    let mut made = Vec::new();
    for worker in workers {
        made.extend(worker.transfers().await);
    }
    cluster.wait_ok();
    let seeds: Vec<&str> = urls.iter().map(String::as_str).collect();
    let client = LockClient::builder()
        .connect_timeout(Duration::from_secs(5))
        .cluster(&seeds)
        .await
        .expect("cluster connect");
    let mut con = redis::cluster::ClusterClient::new(urls.clone())
        .expect("cluster client")
        .get_async_connection()
        .await
        .expect("cluster connection");
    let books = read_books(&mut con).await;
    settle(&client, synced, &made, &books).await
}

/// Checks the books against the answers, completes every transfer found
/// half done, and checks the total.
async fn settle(client: &LockClient, synced: bool, made: &[Transfer], books: &Books) -> Report {
    for n in 0..ACCOUNTS {
        let recorded: i64 = books.records[n as usize].values().sum();
        assert_eq!(
            books.balances[n as usize], recorded,
            "account {n}: its balance is not the sum of the amounts it records"
        );
    }
    let mut report = Report::default();
    let mut total = books.total();
    for t in made {
        let (debited, credited) = (books.recorded(t.from, &t.id), books.recorded(t.to, &t.id));
        match &t.verdict {
            Verdict::Done => {
                report.done += 1;
                if !(debited && credited) {
                    assert!(
                        !synced,
                        "{}: answered done, but a side is missing with sync_replicas \
                         (debited {debited}, credited {credited})",
                        t.id
                    );
                    report.erased += usize::from(!debited) + usize::from(!credited);
                }
            }
            Verdict::NotRun(error) => {
                report.not_run += 1;
                *report.errors.entry(format!("NotRun/{error}")).or_default() += 1;
                assert!(
                    !debited && !credited,
                    "{}: answered not run ({error}), but a write ran",
                    t.id
                );
            }
            Verdict::Unknown(text) => {
                report.unknown += 1;
                *report.errors.entry(text.clone()).or_default() += 1;
            }
        }
        // Half done: complete it, as the guide says a caller settles.
        if debited != credited {
            let (n, delta) = if debited {
                (t.to, t.amount)
            } else {
                (t.from, -t.amount)
            };
            let keys = [account(n)];
            let options = LockOptions::new().wait(LIMIT);
            client
                .run_locked_all(&keys, options, write(client, n, &t.id, delta))
                .await
                .expect("the settling write");
            total += delta;
            report.completed += 1;
        }
    }
    assert_eq!(total, 0, "the total of the balances changed: {report:?}");
    report
}

fn runs() -> u64 {
    std::env::var("LOCK_TEST_TRANSFER_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

fn seed(run: u64) -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64);
    now ^ run.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfers_add_up_through_a_failover_and_a_kill_with_sync_replicas() {
    let _serial = SERIAL.lock().await;
    for r in 0..runs() {
        let seed = seed(r);
        let report = run(true, seed).await;
        eprintln!("sync_replicas, seed {seed}: {report:?}");
        assert!(report.done > 0, "no transfer went through: {report:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfers_add_up_through_a_failover_and_a_kill_without_sync_replicas() {
    let _serial = SERIAL.lock().await;
    for r in 0..runs() {
        let seed = seed(r);
        let report = run(false, seed).await;
        eprintln!("no sync_replicas, seed {seed}: {report:?}");
        assert!(report.done > 0, "no transfer went through: {report:?}");
    }
}
