//! The lock kinds on every deployment: Redis Cluster (3 masters with a
//! replica each, on keys that fall on every master), Sentinel (a master, a
//! replica and three sentinels) and Redlock (5 nodes, 2 of them killed).
//! Readers overlap and a writer excludes them; a waiting writer holds new
//! readers back and is woken by the last reader's release; permits admit
//! their count and no more; a fair line enters in arrival order; a synced
//! reader waits for the replica. On Redlock, permits and fair locks are
//! refused, and a writer behind a reader gets in after it (the prompt
//! wake-up there is an ignored test: the runtime drops the writer's claim
//! when a node is down).
//!
//! The checks wait for signals, not for time: a barrier that every reader
//! reaches inside its body, and what the servers show (a waiting writer's
//! claim, a fair waiter's ticket, a subscriber on the release channel).
//! Leases and waiter leases are long, so that a waiter let in promptly was
//! let in by a release notice, not by an expiry or its heartbeat.
//!
//! One test at a time: each starts its own deployment, and they share the
//! machine's two cores.
mod support;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_runtime::{LockClient, LockError, LockMode, LockOptions};
use lock_testkit::cluster::RedisCluster;
use lock_testkit::replication::{Sentinels, MASTER_NAME};
use support::{Holder, RedisServer};
use tokio::sync::{watch, Barrier};
use tokio::time::{timeout, Instant};

/// The tests of this binary run one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The lease of every hold here: a waiter that missed a release notice
/// would wait this long for the holder's expiry.
const LEASE: Duration = Duration::from_secs(20);
/// The waiter lease of every waiter here: a waiter asks again at a third of
/// it (10 s), far later than a notice wakes it.
const WAITER_LEASE: Duration = Duration::from_secs(30);
/// How long a waiter may wait at most.
const WAIT: Duration = Duration::from_secs(20);
/// How soon after a release a waiter woken by its notice is in: far under
/// the lease and the heartbeat, generous for two shared cores.
const WOKEN_WITHIN: Duration = Duration::from_secs(3);
/// How long a signal (a barrier, a state on the servers) may take.
const SIGNAL_LIMIT: Duration = Duration::from_secs(10);
/// The readers' lease where a check does not time the writer after them:
/// renewed while they are inside, and short once they are gone.
const SHORT_LEASE: Duration = Duration::from_secs(3);
/// How many readers are inside at once.
const READERS: usize = 4;

fn read(wait: Duration) -> LockOptions {
    LockOptions::new()
        .mode(LockMode::Read)
        .lease(LEASE)
        .waiter_lease(WAITER_LEASE)
        .wait(wait)
}

fn write(wait: Duration) -> LockOptions {
    LockOptions::new()
        .mode(LockMode::Write)
        .lease(LEASE)
        .waiter_lease(WAITER_LEASE)
        .wait(wait)
}

fn permits(wait: Duration) -> LockOptions {
    LockOptions::new().permits(2).lease(LEASE).wait(wait)
}

fn fair(wait: Duration) -> LockOptions {
    LockOptions::new()
        .fair(true)
        .lease(LEASE)
        .waiter_lease(WAITER_LEASE)
        .wait(wait)
}

/// What a deployment keeps for a lock, read on the nodes that serve it (the
/// key's master; every live Redlock node): the checks' signals.
trait Servers {
    /// The hash at `lock_key` (the full key) on each serving node; empty
    /// where the key is absent or no hash.
    fn hashes(&self, lock_key: &str) -> Vec<HashMap<String, String>>;

    /// How many subscribers the release channel of `lock_key` has on each
    /// serving node.
    fn subscribers(&self, lock_key: &str) -> Vec<i64>;

    /// Whether `f` holds for the hash on every serving node.
    fn every_hash(&self, lock_key: &str, f: impl Fn(&HashMap<String, String>) -> bool) -> bool {
        let hashes = self.hashes(lock_key);
        !hashes.is_empty() && hashes.iter().all(f)
    }
}

/// The holders (`h:<owner>` fields) of a shared kind's hash.
fn holders(hash: &HashMap<String, String>) -> usize {
    hash.keys().filter(|field| field.starts_with("h:")).count()
}

/// The fair waiters' tickets (`q:<n>` fields) of a fair lock's hash.
fn tickets(hash: &HashMap<String, String>) -> usize {
    hash.keys().filter(|field| field.starts_with("q:")).count()
}

/// Polls `f` every 20 ms until it holds for `lock_key` on `servers`; fails
/// the test naming `what` and showing the servers' state after
/// [`SIGNAL_LIMIT`].
async fn until<S: Servers>(servers: &S, lock_key: &str, what: &str, f: impl Fn(&S) -> bool) {
    let deadline = Instant::now() + SIGNAL_LIMIT;
    while !f(servers) {
        assert!(
            Instant::now() < deadline,
            "not within {SIGNAL_LIMIT:?}: {what}; {lock_key} is {:?}, its subscribers {:?}",
            servers.hashes(lock_key),
            servers.subscribers(lock_key)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A call that must be refused at once: `Timeout` with a zero wait.
async fn refused(client: &LockClient, key: &str, options: LockOptions) -> bool {
    let ran = AtomicBool::new(false);
    let answer = client
        .run_locked(key, options.wait(Duration::ZERO), async {
            ran.store(true, Ordering::SeqCst);
            Ok::<_, LockError>(())
        })
        .await;
    match answer {
        Err(LockError::Timeout { .. }) => {
            assert!(!ran.load(Ordering::SeqCst), "a refused call ran its body");
            true
        }
        Ok(()) => false,
        Err(other) => panic!("expected a refusal (Timeout) on {key}, got {other:?}"),
    }
}

/// Who is inside a key's critical section now.
#[derive(Default)]
struct Inside {
    readers: AtomicUsize,
    writers: AtomicUsize,
    overlaps: AtomicUsize,
}

impl Inside {
    fn enter(&self, writer: bool) {
        if writer {
            let writers = self.writers.fetch_add(1, Ordering::SeqCst);
            if writers > 0 || self.readers.load(Ordering::SeqCst) > 0 {
                self.overlaps.fetch_add(1, Ordering::SeqCst);
            }
        } else {
            self.readers.fetch_add(1, Ordering::SeqCst);
            if self.writers.load(Ordering::SeqCst) > 0 {
                self.overlaps.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    fn leave(&self, writer: bool) {
        let count = if writer { &self.writers } else { &self.readers };
        count.fetch_sub(1, Ordering::SeqCst);
    }
}

/// [`READERS`] readers on two clients are inside `key` at once (each waits
/// inside for the others); meanwhile a writer is refused, and its give-up
/// leaves nothing that keeps a further reader out. A writer that waits (its
/// client listening for the key's releases on every serving node) gets in
/// once the readers leave, never beside them, and excludes readers while
/// inside. How soon it gets in is [`a_waiting_writer_holds_back_readers_and_is_woken_by_the_release`]'s
/// check: here the readers' lease is short, so a writer that missed the
/// notice still gets in within it.
async fn readers_share_and_a_writer_excludes_them(
    clients: &[LockClient; 2],
    servers: &impl Servers,
    key: &str,
) {
    let lock_key = format!("lock:{key}");
    let inside = Arc::new(Inside::default());
    let all_in = Arc::new(Barrier::new(READERS + 1));
    let (leave, leave_rx) = watch::channel(false);
    let readers: Vec<_> = (0..READERS)
        .map(|i| {
            let client = clients[i % 2].clone();
            let (inside, all_in, mut leave_rx) = (inside.clone(), all_in.clone(), leave_rx.clone());
            let key = key.to_owned();
            tokio::spawn(async move {
                let options = read(WAIT).lease(SHORT_LEASE);
                client
                    .run_locked(&key, options, async {
                        inside.enter(false);
                        timeout(SIGNAL_LIMIT, all_in.wait())
                            .await
                            .expect("every reader inside at once");
                        let _ = leave_rx.wait_for(|leave| *leave).await;
                        inside.leave(false);
                        Ok::<_, LockError>(())
                    })
                    .await
            })
        })
        .collect();
    timeout(SIGNAL_LIMIT, all_in.wait())
        .await
        .unwrap_or_else(|_| panic!("the {READERS} readers of {key} were not inside at once"));
    assert_eq!(inside.readers.load(Ordering::SeqCst), READERS);
    assert!(
        servers.every_hash(&lock_key, |hash| holders(hash) == READERS),
        "{READERS} readers held on every serving node: {:?}",
        servers.hashes(&lock_key)
    );

    // A writer is refused while they are inside.
    assert!(
        refused(&clients[1], key, write(Duration::ZERO)).await,
        "a writer got in among readers on {key}"
    );
    // The refused writer's claim is withdrawn: one more reader gets in
    // promptly (a claim left behind would keep it out for the writer's
    // waiter lease).
    let started = Instant::now();
    clients[0]
        .run_locked(key, read(WAIT), async { Ok::<_, LockError>(()) })
        .await
        .expect("a reader after a refused writer");
    assert!(
        started.elapsed() < WOKEN_WITHIN,
        "a reader after a refused writer waited {:?}",
        started.elapsed()
    );

    // A writer that waits.
    let writer = {
        let (client, inside, clients) = (clients[1].clone(), inside.clone(), clients.clone());
        let key = key.to_owned();
        tokio::spawn(async move {
            client
                .run_locked(&key, write(WAIT), async {
                    let entered = Instant::now();
                    inside.enter(true);
                    // Readers are refused while it is inside.
                    let probe = {
                        let (client, key) = (clients[0].clone(), key.clone());
                        tokio::spawn(
                            async move { refused(&client, &key, read(Duration::ZERO)).await },
                        )
                    };
                    let reader_refused = probe.await.expect("probe task");
                    inside.leave(true);
                    Ok::<_, LockError>((entered, reader_refused))
                })
                .await
        })
    };
    until(servers, &lock_key, "the writer waits", |servers| {
        servers.subscribers(&lock_key).iter().all(|&n| n > 0)
    })
    .await;
    assert!(!writer.is_finished(), "the writer got in among readers");
    let released = Instant::now();
    leave.send_replace(true);
    for reader in readers {
        reader.await.expect("reader task").expect("reader");
    }
    let (entered, reader_refused) = timeout(WAIT + SIGNAL_LIMIT, writer)
        .await
        .expect("the writer's call ended")
        .expect("writer task")
        .expect("the writer got in");
    assert!(
        reader_refused,
        "a reader got in while the writer was inside"
    );
    assert_eq!(
        inside.overlaps.load(Ordering::SeqCst),
        0,
        "the writer overlapped readers"
    );
    assert!(
        entered >= released,
        "the writer got in before the readers left"
    );
}

/// A reader holds `key`; a writer on the other client waits behind it: its
/// claim is on every serving node, its client listens for the key's
/// releases there, and a new reader is refused (a waiting writer holds new
/// readers back). Once the reader leaves, the writer gets in well under the
/// reader's lease and its own heartbeat: the release's notice woke it.
async fn a_waiting_writer_holds_back_readers_and_is_woken_by_the_release(
    clients: &[LockClient; 2],
    servers: &impl Servers,
    key: &str,
) {
    let lock_key = format!("lock:{key}");
    let reader = Holder::start(&clients[0], key, read(Duration::ZERO)).await;
    let writer = {
        let (client, key) = (clients[1].clone(), key.to_owned());
        tokio::spawn(async move {
            client
                .run_locked(&key, write(WAIT), async {
                    Ok::<_, LockError>(Instant::now())
                })
                .await
        })
    };
    let what = "the writer's claim, and its client listening";
    until(servers, &lock_key, what, |servers| {
        servers.every_hash(&lock_key, |hash| hash.contains_key("ww"))
            && servers.subscribers(&lock_key).iter().all(|&n| n > 0)
    })
    .await;
    assert!(
        refused(&clients[0], key, read(Duration::ZERO)).await,
        "a new reader got in ahead of a waiting writer on {key}"
    );
    assert!(!writer.is_finished(), "the writer got in beside a reader");
    let released = Instant::now();
    reader.release().await.expect("the reader kept its hold");
    let got = timeout(WAIT + SIGNAL_LIMIT, writer)
        .await
        .expect("the writer's call ended")
        .expect("writer task")
        .expect("the writer got in");
    let after = got.saturating_duration_since(released);
    assert!(
        after < WOKEN_WITHIN,
        "the writer on {key} got in {after:?} after the release (the reader's lease was \
         {LEASE:?}, the writer's heartbeat every {:?})",
        WAITER_LEASE / 3
    );
}

/// `permits = 2` on `key`: two holders on two clients, a third refused;
/// a third that waits is let in as soon as the holder on the other client
/// leaves (woken by its release's notice); then 5 tasks on two clients, each holding
/// until a second holder is inside (or 500 ms): never more than 2 inside,
/// and 2 reached.
async fn permits_admit_two_at_most(clients: &[LockClient; 2], servers: &impl Servers, key: &str) {
    let lock_key = format!("lock:{key}");
    let first = Holder::start(&clients[0], key, permits(Duration::ZERO)).await;
    let second = Holder::start(&clients[1], key, permits(Duration::ZERO)).await;
    assert!(
        servers.every_hash(&lock_key, |hash| holders(hash) == 2
            && hash.get("k").map(String::as_str) == Some("p:2")),
        "two permit holders on every serving node: {:?}",
        servers.hashes(&lock_key)
    );
    assert!(
        refused(&clients[0], key, permits(Duration::ZERO)).await,
        "a third holder got in on {key}"
    );
    let third = {
        let (client, key) = (clients[1].clone(), key.to_owned());
        tokio::spawn(async move {
            client
                .run_locked(&key, permits(WAIT), async {
                    Ok::<_, LockError>(Instant::now())
                })
                .await
        })
    };
    until(servers, &lock_key, "the third holder waits", |servers| {
        servers.subscribers(&lock_key).iter().all(|&n| n > 0)
    })
    .await;
    assert!(!third.is_finished(), "a third holder got in on {key}");
    let released = Instant::now();
    first
        .release()
        .await
        .expect("the first holder kept its permit");
    let got = timeout(WAIT + SIGNAL_LIMIT, third)
        .await
        .expect("the third call ended")
        .expect("third task")
        .expect("the third got a permit");
    let after = got.saturating_duration_since(released);
    assert!(
        after < WOKEN_WITHIN,
        "the third holder got in {after:?} after a permit was freed"
    );
    second
        .release()
        .await
        .expect("the second holder kept its permit");

    let (count, _) = watch::channel(0usize);
    let count = Arc::new(count);
    let most = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..5)
        .map(|i| {
            let client = clients[i % 2].clone();
            let (count, most, key) = (count.clone(), most.clone(), key.to_owned());
            tokio::spawn(async move {
                for _ in 0..3 {
                    client
                        .run_locked(&key, permits(WAIT), async {
                            let mut now = 0;
                            count.send_modify(|n| {
                                *n += 1;
                                now = *n;
                            });
                            most.fetch_max(now, Ordering::SeqCst);
                            let mut seen = count.subscribe();
                            let pair = seen.wait_for(|n| *n >= 2);
                            let _ = timeout(Duration::from_millis(500), pair).await;
                            count.send_modify(|n| *n -= 1);
                            Ok::<_, LockError>(())
                        })
                        .await
                        .expect("a permit");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("permit task");
    }
    assert_eq!(
        most.load(Ordering::SeqCst),
        2,
        "the most holders inside {key} at once"
    );
}

/// A fair lock on `key`: a holder, then 3 waiters on two clients, each
/// started once the one before has its ticket on the servers; they enter
/// in that order, each woken by the notice that names it.
async fn a_fair_line_enters_in_arrival_order(
    clients: &[LockClient; 2],
    servers: &impl Servers,
    key: &str,
) {
    let lock_key = format!("lock:{key}");
    let holder = Holder::start(&clients[0], key, fair(Duration::ZERO)).await;
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..3 {
        let client = clients[(i + 1) % 2].clone();
        let (order, owned) = (order.clone(), key.to_owned());
        waiters.push(tokio::spawn(async move {
            client
                .run_locked(&owned, fair(WAIT), async {
                    order.lock().unwrap().push(i);
                    Ok::<_, LockError>(Instant::now())
                })
                .await
        }));
        let next = (i + 2).to_string();
        until(
            servers,
            &lock_key,
            &format!("waiter {i} in line"),
            |servers| {
                servers.every_hash(&lock_key, |hash| {
                    tickets(hash) == i + 1 && hash.get("qt") == Some(&next)
                })
            },
        )
        .await;
    }
    assert!(
        order.lock().unwrap().is_empty(),
        "a waiter got in beside the holder"
    );
    let released = Instant::now();
    holder.release().await.expect("the holder kept the lock");
    let mut last = released;
    for (i, waiter) in waiters.into_iter().enumerate() {
        let entered = timeout(WAIT + SIGNAL_LIMIT, waiter)
            .await
            .expect("the waiter's call ended")
            .expect("waiter task")
            .unwrap_or_else(|e| panic!("waiter {i} got in: {e}"));
        last = last.max(entered);
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2], "the order of entry");
    let drained = last.saturating_duration_since(released);
    assert!(
        drained < WOKEN_WITHIN * 2,
        "the line of 3 took {drained:?} to get in (heartbeat every {:?})",
        WAITER_LEASE / 3
    );
    assert!(
        servers.every_hash(&lock_key, |hash| tickets(hash) == 0 && holders(hash) == 0),
        "the line left tickets or holders: {:?}",
        servers.hashes(&lock_key)
    );
}

// ---- Cluster ----

impl Servers for RedisCluster {
    fn hashes(&self, lock_key: &str) -> Vec<HashMap<String, String>> {
        let master = self.master_of(lock_key);
        let hash = redis::cmd("HGETALL")
            .arg(lock_key)
            .query(&mut self.connection(master))
            .unwrap_or_default();
        vec![hash]
    }

    fn subscribers(&self, lock_key: &str) -> Vec<i64> {
        vec![cluster_release_subscribers(
            self,
            self.master_of(lock_key),
            lock_key,
        )]
    }
}

/// How many subscribers node `i` has on `lock_key`'s release channel: its
/// sharded subscribers (`PUBSUB SHARDNUMSUB`), or, on a node without
/// sharded pub/sub (Redis 6.2: releases `PUBLISH`, waiters `SUBSCRIBE`), the
/// plain channel's (`PUBSUB NUMSUB`).
fn cluster_release_subscribers(cluster: &RedisCluster, i: usize, lock_key: &str) -> i64 {
    let mut con = cluster.connection(i);
    let numsub = |subcommand: &str, con: &mut redis::Connection| {
        redis::cmd("PUBSUB")
            .arg(subcommand)
            .arg(lock_key)
            .query::<Vec<redis::Value>>(con)
    };
    let counts = match numsub("SHARDNUMSUB", &mut con) {
        Ok(counts) => counts,
        Err(unknown) if unknown.to_string().contains("SHARDNUMSUB") => {
            numsub("NUMSUB", &mut con).expect("PUBSUB NUMSUB")
        }
        Err(e) => panic!("PUBSUB SHARDNUMSUB: {e}"),
    };
    match counts.get(1) {
        Some(redis::Value::Int(n)) => *n,
        other => panic!("PUBSUB (SHARD)NUMSUB answered {other:?}"),
    }
}

async fn cluster_clients(cluster: &RedisCluster) -> [LockClient; 2] {
    let urls = cluster.urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let connect = || async {
        LockClient::builder()
            .connect_timeout(Duration::from_secs(5))
            .cluster(&urls)
            .await
            .expect("cluster connect")
    };
    [connect().await, connect().await]
}

/// One key per master, `<stem>:<n>`: the first whose lock (`lock:` and the
/// key, the default prefix) each master serves.
fn key_per_master(cluster: &RedisCluster, stem: &str) -> Vec<String> {
    let mut masters = HashSet::new();
    let mut keys = Vec::new();
    for n in 0..200 {
        let key = format!("{stem}:{n}");
        if masters.insert(cluster.master_of(&format!("lock:{key}"))) {
            keys.push(key);
        }
        if masters.len() == 3 {
            return keys;
        }
    }
    panic!("no key of stem {stem} on every master: {masters:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_readers_share_and_a_writer_excludes_them_on_every_master() {
    let _serial = SERIAL.lock().await;
    let cluster = RedisCluster::start();
    let clients = cluster_clients(&cluster).await;
    for key in key_per_master(&cluster, "doc") {
        readers_share_and_a_writer_excludes_them(&clients, &cluster, &key).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_a_waiting_writer_holds_back_readers_and_is_woken_by_the_release_on_every_master() {
    let _serial = SERIAL.lock().await;
    let cluster = RedisCluster::start();
    let clients = cluster_clients(&cluster).await;
    for key in key_per_master(&cluster, "handoff") {
        a_waiting_writer_holds_back_readers_and_is_woken_by_the_release(&clients, &cluster, &key)
            .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_permits_admit_two_at_most_on_every_master() {
    let _serial = SERIAL.lock().await;
    let cluster = RedisCluster::start();
    let clients = cluster_clients(&cluster).await;
    for key in key_per_master(&cluster, "api") {
        permits_admit_two_at_most(&clients, &cluster, &key).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_a_fair_line_enters_in_arrival_order_on_every_master() {
    let _serial = SERIAL.lock().await;
    let cluster = RedisCluster::start();
    let clients = cluster_clients(&cluster).await;
    for key in key_per_master(&cluster, "line") {
        a_fair_line_enters_in_arrival_order(&clients, &cluster, &key).await;
    }
}

// ---- Sentinel ----

impl Servers for Sentinels {
    fn hashes(&self, lock_key: &str) -> Vec<HashMap<String, String>> {
        let hash = self
            .master
            .query(redis::cmd("HGETALL").arg(lock_key))
            .unwrap_or_default();
        vec![hash]
    }

    fn subscribers(&self, lock_key: &str) -> Vec<i64> {
        let counts: Option<(String, i64)> = self
            .master
            .query(redis::cmd("PUBSUB").arg("NUMSUB").arg(lock_key));
        vec![counts.map_or(0, |(_, n)| n)]
    }
}

async fn sentinel_client(
    sentinels: &Sentinels,
    builder: lock_runtime::LockClientBuilder,
) -> LockClient {
    let urls = sentinels.urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    builder
        .command_timeout(Duration::from_secs(2))
        .sentinel(&urls, MASTER_NAME)
        .await
        .expect("connect through the sentinels")
}

async fn sentinel_clients(sentinels: &Sentinels) -> [LockClient; 2] {
    [
        sentinel_client(sentinels, LockClient::builder()).await,
        sentinel_client(sentinels, LockClient::builder()).await,
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_readers_share_a_writer_excludes_them_and_is_woken_by_the_release() {
    let _serial = SERIAL.lock().await;
    let sentinels = Sentinels::start();
    let clients = sentinel_clients(&sentinels).await;
    readers_share_and_a_writer_excludes_them(&clients, &sentinels, "doc").await;
    a_waiting_writer_holds_back_readers_and_is_woken_by_the_release(
        &clients, &sentinels, "handoff",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_permits_admit_two_at_most() {
    let _serial = SERIAL.lock().await;
    let sentinels = Sentinels::start();
    let clients = sentinel_clients(&sentinels).await;
    permits_admit_two_at_most(&clients, &sentinels, "api").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_a_fair_line_enters_in_arrival_order() {
    let _serial = SERIAL.lock().await;
    let sentinels = Sentinels::start();
    let clients = sentinel_clients(&sentinels).await;
    a_fair_line_enters_in_arrival_order(&clients, &sentinels, "line").await;
}

/// With `sync_replicas(1, ..)` a reader is granted once the replica has its
/// hold; with the replica frozen it is refused with `NotReplicated`, its
/// body never runs, and its hold is given back (a writer gets in at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_a_synced_reader_is_on_the_replica_and_refused_without_it() {
    let _serial = SERIAL.lock().await;
    let sentinels = Sentinels::start();
    let synced = sentinel_client(
        &sentinels,
        LockClient::builder().sync_replicas(1, Duration::from_secs(1)),
    )
    .await;
    let plain = sentinel_client(&sentinels, LockClient::builder()).await;
    let key = "synced";
    let on_replica = synced
        .run_locked(key, read(Duration::ZERO), async {
            let hash: HashMap<String, String> = sentinels
                .replica
                .query(redis::cmd("HGETALL").arg("lock:synced"))
                .unwrap_or_default();
            Ok::<_, LockError>(hash)
        })
        .await
        .expect("a replica acknowledged the reader");
    assert_eq!(
        (
            holders(&on_replica),
            on_replica.get("k").map(String::as_str)
        ),
        (1, Some("r")),
        "the reader's hold on the replica: {on_replica:?}"
    );

    let paused = sentinels.replica.pause();
    let ran = AtomicBool::new(false);
    let started = Instant::now();
    let answer = synced
        .run_locked(key, read(Duration::ZERO), async {
            ran.store(true, Ordering::SeqCst);
            Ok::<_, LockError>(())
        })
        .await;
    let took = started.elapsed();
    match answer {
        Err(LockError::NotReplicated {
            acked: 0,
            needed: 1,
            ..
        }) => {}
        other => panic!("expected NotReplicated, got {other:?}"),
    }
    assert!(!ran.load(Ordering::SeqCst), "the unreplicated reader ran");
    assert!(took < Duration::from_secs(6), "refused after {took:?}");
    plain
        .run_locked(key, write(Duration::ZERO), async { Ok::<_, LockError>(()) })
        .await
        .expect("the unreplicated reader's hold was given back");
    drop(paused);
}

// ---- Redlock ----

/// Five Redlock nodes, two of them killed: the other three are a bare
/// quorum.
struct Redlock {
    nodes: Vec<RedisServer>,
    down: [usize; 2],
}

impl Redlock {
    fn start_with_two_down() -> Redlock {
        let mut redlock = Redlock {
            nodes: (0..5).map(|_| RedisServer::start()).collect(),
            down: [1, 3],
        };
        for i in redlock.down {
            redlock.nodes[i].stop();
        }
        redlock
    }

    fn live(&self) -> impl Iterator<Item = &RedisServer> {
        self.nodes
            .iter()
            .enumerate()
            .filter(|(i, _)| !self.down.contains(i))
            .map(|(_, node)| node)
    }

    async fn clients(&self) -> [LockClient; 2] {
        let urls: Vec<String> = self.nodes.iter().map(|node| node.url()).collect();
        let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
        let connect = || async {
            LockClient::builder()
                // Generous: three answers of three are needed, on a loaded
                // machine.
                .node_timeout(Duration::from_secs(1))
                .connect_timeout(Duration::from_secs(2))
                .redlock(&urls)
                .await
                .expect("redlock connect")
        };
        [connect().await, connect().await]
    }
}

impl Servers for Redlock {
    fn hashes(&self, lock_key: &str) -> Vec<HashMap<String, String>> {
        self.live()
            .map(|node| {
                redis::cmd("HGETALL")
                    .arg(lock_key)
                    .query(&mut node.connection())
                    .unwrap_or_default()
            })
            .collect()
    }

    fn subscribers(&self, lock_key: &str) -> Vec<i64> {
        self.live()
            .map(|node| {
                let counts: Vec<(String, i64)> = redis::cmd("PUBSUB")
                    .arg("NUMSUB")
                    .arg(lock_key)
                    .query(&mut node.connection())
                    .expect("PUBSUB NUMSUB");
                counts.first().map_or(0, |(_, n)| *n)
            })
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_with_two_of_five_down_readers_share_and_a_writer_excludes_them() {
    let _serial = SERIAL.lock().await;
    let redlock = Redlock::start_with_two_down();
    let clients = redlock.clients().await;
    readers_share_and_a_writer_excludes_them(&clients, &redlock, "doc").await;
}

/// A writer behind a reader gets in once the reader leaves, and not before.
/// The reader's lease is short: how soon the writer is woken is the next
/// test's check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_with_two_of_five_down_a_writer_behind_a_reader_gets_in_after_it_leaves() {
    let _serial = SERIAL.lock().await;
    let redlock = Redlock::start_with_two_down();
    let clients = redlock.clients().await;
    let (key, lock_key) = ("handoff", "lock:handoff");
    let options = read(Duration::ZERO).lease(SHORT_LEASE);
    let reader = Holder::start(&clients[0], key, options).await;
    let writer = {
        let client = clients[1].clone();
        tokio::spawn(async move {
            client
                .run_locked(key, write(WAIT), async {
                    Ok::<_, LockError>(Instant::now())
                })
                .await
        })
    };
    until(&redlock, lock_key, "the writer waits", |redlock| {
        redlock.subscribers(lock_key).iter().all(|&n| n > 0)
    })
    .await;
    assert!(!writer.is_finished(), "the writer got in beside a reader");
    let released = Instant::now();
    reader.release().await.expect("the reader kept its hold");
    let got = timeout(WAIT + SIGNAL_LIMIT, writer)
        .await
        .expect("the writer's call ended")
        .expect("writer task")
        .expect("the writer got in");
    assert!(got >= released, "the writer got in before the reader left");
    let after = got - released;
    assert!(
        after < SHORT_LEASE + WOKEN_WITHIN,
        "the writer got in {after:?} after the release"
    );
}

/// Fails today: with nodes down, each refused attempt of the writer is
/// followed by a give-back on every node (quorum.rs gives back whenever an
/// answer is an error, the refusals that kept a claim included), which
/// removes its claim and the mark that makes the last reader's release
/// publish. New readers then pass the waiting writer, and it gets in only
/// when the reader's lease runs out (about 19 s after the release here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_with_two_of_five_down_a_waiting_writer_holds_back_readers_and_is_woken_by_the_release(
) {
    let _serial = SERIAL.lock().await;
    let redlock = Redlock::start_with_two_down();
    let clients = redlock.clients().await;
    a_waiting_writer_holds_back_readers_and_is_woken_by_the_release(&clients, &redlock, "handoff")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_refuses_permits_and_fair_locks_as_invalid() {
    let _serial = SERIAL.lock().await;
    let redlock = Redlock::start_with_two_down();
    let [client, _] = redlock.clients().await;
    for (what, options) in [
        ("permits", permits(WAIT)),
        ("fair", fair(WAIT)),
        ("permits", permits(Duration::ZERO)),
        ("fair", fair(Duration::ZERO)),
    ] {
        let ran = AtomicBool::new(false);
        let started = Instant::now();
        let error = client
            .run_locked("kinds-on-redlock", options, async {
                ran.store(true, Ordering::SeqCst);
                Ok::<_, LockError>(())
            })
            .await
            .expect_err("refused on Redlock");
        assert!(!ran.load(Ordering::SeqCst), "the refused {what} body ran");
        assert!(
            matches!(error, LockError::Invalid { .. }),
            "{what}: expected Invalid, got {error:?}"
        );
        let message = error.to_string();
        assert!(message.contains("Redlock"), "{what}: {message}");
        assert!(
            message.contains("kinds-on-redlock"),
            "{what}: names the key: {message}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{what} refused after {:?}",
            started.elapsed()
        );
    }
    for node in redlock.live() {
        let exists: i64 = redis::cmd("EXISTS")
            .arg("lock:kinds-on-redlock")
            .query(&mut node.connection())
            .expect("EXISTS");
        assert_eq!(exists, 0, "a refused call wrote to a node");
    }
}
