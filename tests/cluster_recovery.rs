//! Redis Cluster after a master dies (`kill -9`): a client under load
//! serves every key again soon after the slot map names the replica that
//! took over, with and without `sync_replicas`, and a release that the
//! cluster refused while it was down does not leave its key taken until
//! the lease ends, nor does sending again the releases of a dead master's
//! slots stop the client. A call follows the failover within its wait; one
//! whose wait ends first says that the slot's master is changing (never a
//! redirect's raw text), and a call over two keys names the node that
//! failed.
//!
//! The load is the transfer service: 16 tasks on 48 keys
//! (`account:<n>`), each looping short locked calls with a bounded wait,
//! one key (`run_locked`) or two (`run_locked_all`, as a transfer takes
//! `account:<from>` and `account:<to>`). The clusters are lock-testkit's:
//! 3 masters with a replica each, `cluster-node-timeout` 1 s
//! ([`lock_testkit::cluster::NODE_TIMEOUT_MS`]). One test at a time: they
//! share the machine's two cores.
//!
//! The bound, measured from the moment a surviving master's `CLUSTER
//! SLOTS` names the new master (the killed node is restarted then, and
//! rejoins as a replica): every key taken again within [`PLAIN_BOUND`]
//! without `sync_replicas`, within [`SYNCED_BOUND`] with
//! `sync_replicas(1, 200 ms)`, whose new master has no replica to
//! acknowledge a write until the restarted node has synced from it.
mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use lock_runtime::{LockClient, LockError, LockOptions, LossReason};
use lock_testkit::cluster::{info, RedisCluster};
use support::Holder;
use tokio::sync::Notify;
use tokio::time::Instant;

/// One cluster test at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The keys of the load: `account:0` .. `account:47`.
const KEYS: usize = 48;

/// The tasks of the load.
const TASKS: usize = 16;

/// Each locked call's wait.
const WAIT: Duration = Duration::from_secs(3);

/// Each locked body's length.
const BODY: Duration = Duration::from_millis(2);

/// The most any task of the load runs, and the most calls it makes.
const LOAD_LIMIT: (Duration, usize) = (Duration::from_secs(50), 20_000);

/// Every key served again within this of the slot map naming the new
/// master, without `sync_replicas` (measured: under 1 s on an idle
/// machine; the room is for a loaded one).
const PLAIN_BOUND: Duration = Duration::from_secs(8);

/// The same with `sync_replicas(1, 200 ms)`: the restarted node must rejoin
/// and sync before the new master's keys can be taken (measured: 5-6 s on
/// an idle machine).
const SYNCED_BOUND: Duration = Duration::from_secs(16);

/// The most the promotion of the killed master's replica may take.
const PROMOTION_LIMIT: Duration = Duration::from_secs(30);

fn key(i: usize) -> String {
    format!("account:{i}")
}

async fn client(cluster: &RedisCluster, builder: lock_runtime::LockClientBuilder) -> LockClient {
    let urls = cluster.urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    builder
        .connect_timeout(Duration::from_secs(5))
        .cluster(&urls)
        .await
        .expect("cluster connect")
}

/// What the load's tasks share: when each key was last taken, the errors
/// with when they came, and the signal to stop.
struct Load {
    served: Vec<Mutex<Option<Instant>>>,
    /// Told at each call that took keys.
    progress: Notify,
    errors: Mutex<Vec<(Instant, LockError)>>,
    stop: AtomicBool,
}

impl Load {
    fn new() -> Arc<Load> {
        Arc::new(Load {
            served: (0..KEYS).map(|_| Mutex::new(None)).collect(),
            progress: Notify::new(),
            errors: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
        })
    }

    /// Whether every key was taken after `since`.
    fn all_served_since(&self, since: Instant) -> bool {
        self.served.iter().all(|at| {
            at.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .is_some_and(|at| at > since)
        })
    }

    /// The keys not taken since `since`.
    fn unserved_since(&self, since: Instant) -> Vec<usize> {
        (0..KEYS)
            .filter(|&i| {
                !self.served[i]
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .is_some_and(|at| at > since)
            })
            .collect()
    }

    fn took(&self, keys: &[usize]) {
        let now = Instant::now();
        for &k in keys {
            *self.served[k]
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(now);
        }
        self.progress.notify_waiters();
    }

    fn failed(&self, error: LockError) {
        let mut errors = self.errors.lock().unwrap_or_else(PoisonError::into_inner);
        errors.push((Instant::now(), error));
    }

    /// Waits (at most until `deadline`) until every key was taken after
    /// `since`: when, if it was.
    async fn every_key_after(&self, since: Instant, deadline: Instant) -> Option<Instant> {
        loop {
            let progress = self.progress.notified();
            tokio::pin!(progress);
            progress.as_mut().enable();
            if self.all_served_since(since) {
                return Some(Instant::now());
            }
            if tokio::time::timeout_at(deadline, progress).await.is_err() {
                return None;
            }
        }
    }
}

/// One task of the load: task `t` takes key `(3t + n) % 48` at its call
/// `n` (so each task goes over every key), alone at even calls and with
/// another key at odd ones.
async fn worker(client: LockClient, load: Arc<Load>, t: usize) {
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64 ^ (t as u64 + 1);
    let started = Instant::now();
    for n in 0..LOAD_LIMIT.1 {
        if load.stop.load(Ordering::Relaxed) || started.elapsed() > LOAD_LIMIT.0 {
            return;
        }
        // xorshift: the other key of a transfer.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let a = (t * 3 + n) % KEYS;
        let b = match (seed % KEYS as u64) as usize {
            b if b == a => (a + 1) % KEYS,
            b => b,
        };
        let options = LockOptions::new().wait(WAIT);
        let body = async {
            tokio::time::sleep(BODY).await;
            Ok::<_, LockError>(())
        };
        let taken = if n % 2 == 0 {
            client
                .run_locked(&key(a), options, body)
                .await
                .map(|()| vec![a])
        } else {
            let keys = [key(a), key(b)];
            let taken = client.run_locked_all(keys, options, body).await;
            taken.map(|()| vec![a, b])
        };
        match taken {
            Ok(keys) => load.took(&keys),
            Err(error) => {
                load.failed(error);
                // As a service would before its next request.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// The port of the master that node `i` names for `slot` in its
/// `CLUSTER SLOTS`, if it answers.
fn master_port_seen_by(cluster: &RedisCluster, i: usize, slot: u16) -> Option<u16> {
    let answer: redis::Value = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query(&mut cluster.connection(i))
        .ok()?;
    let redis::Value::Array(ranges) = answer else {
        return None;
    };
    ranges.into_iter().find_map(|range| {
        let redis::Value::Array(parts) = range else {
            return None;
        };
        let (Some(redis::Value::Int(first)), Some(redis::Value::Int(last))) =
            (parts.first(), parts.get(1))
        else {
            return None;
        };
        if !(*first..=*last).contains(&i64::from(slot)) {
            return None;
        }
        match parts.get(2) {
            Some(redis::Value::Array(master)) => match master.get(1) {
                Some(redis::Value::Int(port)) => u16::try_from(*port).ok(),
                _ => None,
            },
            _ => None,
        }
    })
}

/// The hash slot of `lock_key`.
fn slot_of(cluster: &RedisCluster, lock_key: &str) -> u16 {
    redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(lock_key)
        .query(&mut cluster.connection(cluster.master_of(lock_key)))
        .expect("CLUSTER KEYSLOT")
}

/// Waits (bounded) until node `witness` names node `replica` the master
/// of `slot`: when.
async fn map_names(
    cluster: &RedisCluster,
    (witness, replica): (usize, usize),
    slot: u16,
) -> Instant {
    let port = cluster.nodes[replica].port();
    let deadline = Instant::now() + PROMOTION_LIMIT;
    while master_port_seen_by(cluster, witness, slot) != Some(port) {
        assert!(
            Instant::now() < deadline,
            "the slot map did not name the new master within {PROMOTION_LIMIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Instant::now()
}

/// Runs the load on a client of `builder`, kills (`kill -9`) the master of
/// `account:0` once every key was taken, and restarts it as soon as a
/// surviving master's slot map names its replica: how long after that
/// every key was taken again (if within `limit`), and the errors the
/// calls met from the kill on.
async fn recovery(
    builder: lock_runtime::LockClientBuilder,
    limit: Duration,
) -> (Option<Duration>, Vec<LockError>) {
    let mut cluster = RedisCluster::start();
    let client = client(&cluster, builder).await;
    let load = Load::new();
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| tokio::spawn(worker(client.clone(), load.clone(), t)))
        .collect();
    let start = Instant::now();
    let warm = load.every_key_after(start, start + Duration::from_secs(20));
    assert!(warm.await.is_some(), "the load did not take every key");

    let lock_key = format!("lock:{}", key(0));
    let slot = slot_of(&cluster, &lock_key);
    let master = cluster.master_of(&lock_key);
    let replica = cluster.replica_of(master);
    let witness = (0..cluster.nodes.len())
        .find(|&i| i != master && i != replica && cluster.is_master(i))
        .expect("another master");
    let killed = Instant::now();
    cluster.kill(master);
    let named = map_names(&cluster, (witness, replica), slot).await;
    cluster.nodes[master].restart(true).expect("restart");
    let served = load.every_key_after(named, named + limit).await;
    eprintln!(
        "new master named {:?} after the kill; every key served again {:?} after that",
        named - killed,
        served.map(|at| at - named)
    );
    load.stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.expect("load task");
    }
    let unserved = load.unserved_since(named);
    if !unserved.is_empty() {
        eprintln!("keys not taken since: {unserved:?}");
    }
    let errors = std::mem::take(&mut *load.errors.lock().unwrap_or_else(PoisonError::into_inner));
    let errors = errors
        .into_iter()
        .filter(|(at, _)| *at >= killed)
        .map(|(_, error)| error)
        .collect();
    (served.map(|at| at - named), errors)
}

/// The raw text of a cluster's redirect or refusal, which no error's
/// message shows.
const RAW: [&str; 4] = ["MOVED ", "ASK ", "CLUSTERDOWN", "TRYAGAIN"];

/// Fails with the errors the load met when `recovered` is not within
/// `bound`, or when an error shows a cluster's raw answer.
fn assert_recovered(recovered: Option<Duration>, bound: Duration, errors: &[LockError]) {
    let raw: Vec<String> = errors
        .iter()
        .map(ToString::to_string)
        .filter(|text| RAW.iter().any(|raw| text.contains(raw)))
        .collect();
    assert!(
        raw.is_empty(),
        "{} errors show the cluster's raw answer, the first: {:?}",
        raw.len(),
        raw.first()
    );
    if recovered.is_some_and(|took| took <= bound) {
        return;
    }
    let mut shown: Vec<String> = errors
        .iter()
        .rev()
        .take(12)
        .map(|e| e.to_string())
        .collect();
    shown.reverse();
    panic!(
        "every key was not served again within {bound:?} of the slot map naming the new \
         master (took {recovered:?}); {} errors, the last: {shown:#?}",
        errors.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_key_is_served_again_soon_after_a_master_is_replaced() {
    let _serial = SERIAL.lock().await;
    let (recovered, errors) = recovery(LockClient::builder(), PLAIN_BOUND * 3).await;
    assert_recovered(recovered, PLAIN_BOUND, &errors);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_key_is_served_again_soon_after_a_master_is_replaced_with_sync_replicas() {
    let _serial = SERIAL.lock().await;
    let builder = LockClient::builder().sync_replicas(1, Duration::from_millis(200));
    let (recovered, errors) = recovery(builder, SYNCED_BOUND * 2).await;
    assert_recovered(recovered, SYNCED_BOUND, &errors);
}

/// Waits (bounded) until node `i` says `cluster_state:<state>`.
async fn cluster_state(cluster: &RedisCluster, i: usize, state: &str) {
    let wanted = format!("cluster_state:{state}");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let said: String = redis::cmd("CLUSTER")
            .arg("INFO")
            .query(&mut cluster.connection(i))
            .unwrap_or_default();
        if said.contains(&wanted) {
            return;
        }
        assert!(Instant::now() < deadline, "node {i} not {wanted} in 20 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_refused_while_the_cluster_is_down_frees_its_key_after_the_failover() {
    let _serial = SERIAL.lock().await;
    let mut cluster = RedisCluster::start();
    let holder_client = client(&cluster, LockClient::builder()).await;
    let other = client(&cluster, LockClient::builder()).await;
    // A key on one master; another master dies, and its replica may not
    // take over, so that the cluster stays down (`CLUSTERDOWN` on every
    // slot) while the key is released.
    let key = "held:1";
    let kept_on = cluster.master_of(&format!("lock:{key}"));
    let dying = (0..cluster.nodes.len())
        .find(|&i| i != kept_on && cluster.is_master(i))
        .expect("another master");
    let holder = Holder::start(&holder_client, key, LockOptions::new()).await;
    let replica = kill_without_failover(&mut cluster, dying);
    cluster_state(&cluster, kept_on, "fail").await;
    match holder.release().await {
        Err(LockError::Lost {
            reason: LossReason::Unconfirmed,
            ..
        }) => {}
        other => panic!("the release reached a cluster that is down: {other:?}"),
    }

    // The replica takes over: the cluster serves every slot.
    allow_failover(&cluster, replica);
    cluster_state(&cluster, kept_on, "ok").await;
    let up = Instant::now();
    // The holder's client sends its release again: the key is free far
    // before its 30 s lease ends.
    let options = LockOptions::new().wait(Duration::ZERO);
    let mut last = None;
    let taken = loop {
        match other
            .run_locked(key, options, async { Ok::<_, LockError>(()) })
            .await
        {
            Ok(()) => break Some(up.elapsed()),
            Err(error) if up.elapsed() < Duration::from_secs(10) => {
                last = Some(error);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(error) => {
                last = Some(error);
                break None;
            }
        }
    };
    eprintln!("the key was taken {taken:?} after the cluster was up again");
    let state = info(&mut cluster.connection(kept_on), "cluster");
    assert!(
        taken.is_some_and(|after| after < Duration::from_secs(5)),
        "the key released while the cluster was down was still taken 10 s after it was up \
         again: {last:?} ({state})"
    );
}

/// `n` keys (`<prefix><i>`) whose locks fall on master `i` of `cluster`.
fn keys_on(cluster: &RedisCluster, master: usize, prefix: &str, n: usize) -> Vec<String> {
    let keys: Vec<String> = (0..n * 20)
        .map(|i| format!("{prefix}{i}"))
        .filter(|k| cluster.master_of(&format!("lock:{k}")) == master)
        .take(n)
        .collect();
    assert_eq!(keys.len(), n, "keys on master {master}");
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sending_again_many_releases_after_a_failover_leaves_the_client_working() {
    let _serial = SERIAL.lock().await;
    let mut cluster = RedisCluster::start();
    let client = client(&cluster, LockClient::builder()).await;
    let dying = cluster.master_of(&format!("lock:{}", key(0)));
    let replica = cluster.replica_of(dying);
    let witness = (0..cluster.nodes.len())
        .find(|&i| i != dying && i != replica && cluster.is_master(i))
        .expect("another master");
    let replayed = keys_on(&cluster, dying, "replayed:", 60);
    let elsewhere = keys_on(&cluster, witness, "elsewhere:", 1).remove(0);
    // 3,000 releases of the dying master's slots within their lease: the
    // client sends them all again once the slot map names a new master.
    for _ in 0..50 {
        let calls: Vec<_> = replayed
            .iter()
            .map(|key| {
                let (client, key) = (client.clone(), key.clone());
                tokio::spawn(async move {
                    let body = async { Ok::<_, LockError>(()) };
                    client.run_locked(&key, LockOptions::new(), body).await
                })
            })
            .collect();
        for call in calls {
            call.await.expect("task").expect("locked on a live cluster");
        }
    }
    let slot = slot_of(&cluster, &format!("lock:{}", replayed[0]));
    cluster.kill(dying);
    let named = map_names(&cluster, (witness, replica), slot).await;

    // Calls on a live master's key, every 100 ms for 6 s: from 2 s after
    // the new master was named on, every one succeeds.
    let options = LockOptions::new().wait(Duration::from_secs(1));
    let mut failed_late = Vec::new();
    for _ in 0..60 {
        if named.elapsed() > Duration::from_secs(6) {
            break;
        }
        let body = async { Ok::<_, LockError>(()) };
        let called = Instant::now();
        if let Err(error) = client.run_locked(&elsewhere, options, body).await {
            if called > named + Duration::from_secs(2) {
                failed_late.push(error.to_string());
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        failed_late.is_empty(),
        "calls on a live master's key failed after the failover: {failed_late:#?}"
    );
    // And the dead master's keys are served by the new one.
    let options = LockOptions::new().wait(Duration::from_secs(3));
    let body = async { Ok::<_, LockError>(()) };
    client
        .run_locked(&replayed[0], options, body)
        .await
        .expect("a key of the new master");
}

/// Sets `name` to `value` on node `i` (`CONFIG SET`).
fn config_set(cluster: &RedisCluster, i: usize, (name, value): (&str, &str)) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(name)
        .arg(value)
        .query(&mut cluster.connection(i))
        .expect("CONFIG SET");
}

/// Kills master `dying` while its replica may not take over (it is told
/// `cluster-replica-no-failover`): the replica's index, for
/// [`allow_failover`].
fn kill_without_failover(cluster: &mut RedisCluster, dying: usize) -> usize {
    let replica = cluster.replica_of(dying);
    config_set(cluster, replica, ("cluster-replica-no-failover", "yes"));
    cluster.kill(dying);
    replica
}

/// Lets `replica` take over its dead master.
fn allow_failover(cluster: &RedisCluster, replica: usize) {
    config_set(cluster, replica, ("cluster-replica-no-failover", "no"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_follows_a_failover_within_its_wait_and_says_when_it_ends_first() {
    let _serial = SERIAL.lock().await;
    let mut cluster = RedisCluster::start();
    let client = client(&cluster, LockClient::builder()).await;
    let dying = cluster.master_of(&format!("lock:{}", key(0)));
    let live = (0..cluster.nodes.len())
        .find(|&i| i != dying && cluster.is_master(i))
        .expect("another master");
    let key = keys_on(&cluster, live, "through:", 1).remove(0);
    let replica = kill_without_failover(&mut cluster, dying);
    cluster_state(&cluster, live, "fail").await;

    // A wait that ends while the cluster is down: a retryable error that
    // says the slot's master is changing.
    let started = Instant::now();
    let options = LockOptions::new().wait(Duration::from_secs(1));
    let body = async { Ok::<_, LockError>(()) };
    let error = client
        .run_locked(&key, options, body)
        .await
        .expect_err("the cluster is down");
    let text = error.to_string();
    assert!(
        matches!(error, LockError::Backend { .. }) && error.is_retryable(),
        "{error:?}"
    );
    assert!(
        text.contains("master") && text.contains("is changing"),
        "{text}"
    );
    assert!(!RAW.iter().any(|raw| text.contains(raw)), "{text}");
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "it did not wait: {:?}",
        started.elapsed()
    );

    // A longer wait outlasts the failover: the call takes the key.
    let call = {
        let (client, key) = (client.clone(), key.clone());
        tokio::spawn(async move {
            let options = LockOptions::new().wait(Duration::from_secs(20));
            let body = async { Ok::<_, LockError>(Instant::now()) };
            client.run_locked(&key, options, body).await
        })
    };
    // Still waiting well after redis-rs's own retries gave up.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(!call.is_finished(), "{:?}", call.await);
    let allowed = Instant::now();
    allow_failover(&cluster, replica);
    let taken = call
        .await
        .expect("call task")
        .expect("taken after the failover");
    eprintln!(
        "the key was taken {:?} after the replica could take over",
        taken - allowed
    );
}

/// A key on master `on` whose hash slot is below `slot`.
fn key_below(cluster: &RedisCluster, on: usize, slot: u16) -> String {
    (0..2000)
        .map(|i| format!("below:{i}"))
        .find(|k| {
            let lock_key = format!("lock:{k}");
            cluster.master_of(&lock_key) == on && slot_of(cluster, &lock_key) < slot
        })
        .expect("a key below the slot")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_over_two_keys_names_the_node_that_failed() {
    let _serial = SERIAL.lock().await;
    let mut cluster = RedisCluster::start();
    // The live masters go on serving their slots while one is dead.
    for i in 0..cluster.nodes.len() {
        config_set(&cluster, i, ("cluster-require-full-coverage", "no"));
    }
    let client = client(&cluster, LockClient::builder()).await;
    // A transfer from a live master's key to a key of the master that
    // dies, the live one first in slot order (as the call takes them).
    let to = key(0);
    let dying = cluster.master_of(&format!("lock:{to}"));
    let live = (0..cluster.nodes.len())
        .find(|&i| i != dying && cluster.is_master(i))
        .expect("another master");
    let from = key_below(&cluster, live, slot_of(&cluster, &format!("lock:{to}")));
    let dead = format!("127.0.0.1:{}", cluster.nodes[dying].port());
    let healthy = format!("127.0.0.1:{}", cluster.nodes[live].port());
    kill_without_failover(&mut cluster, dying);
    for _ in 0..3 {
        let options = LockOptions::new().wait(Duration::ZERO);
        let body = async { Ok::<_, LockError>(()) };
        let error = client
            .run_locked_all([&from, &to], options, body)
            .await
            .expect_err("a key's master is dead");
        let shown = error.to_string();
        eprintln!("{shown}");
        match &error {
            LockError::Backend { node, .. } => assert!(
                node.starts_with(&dead),
                "the error names {node}, not the dead master {dead}: {shown}"
            ),
            other => panic!("not a backend error: {other:?}"),
        }
        assert!(!shown.contains(&healthy), "{shown}");
        let failed = format!("lock:{to}");
        assert_eq!(error.key(), Some(failed.as_str()), "{shown}");
        assert!(!RAW.iter().any(|raw| shown.contains(raw)), "{shown}");
    }
}
