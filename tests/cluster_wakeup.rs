//! Redis Cluster: a release wakes a waiter of another client, round after
//! round on the same node, as a user's build runs it (any `redis` 1.8.x).
//!
//! The library never sends `SUNSUBSCRIBE` on its subscription connections
//! (redis-rs 1.8.2 does not take its confirmation as the command's reply,
//! which left every later command there one reply behind): a channel
//! nobody waits on lapses on its connection, which is remade once too many
//! have. These tests have waits end and begin on one node (a key's channel
//! lapsing and wanted again, more lapsed channels than a connection keeps)
//! and check that each release still wakes the waiter at once. 3 masters
//! with a replica each, started by each test on loopback ports; one test at
//! a time (they share the machine's two cores).
mod support;

use std::time::Duration;

use lock_runtime::{LockClient, LockError, LockOptions};
use lock_testkit::cluster::RedisCluster;
use support::Holder;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// One cluster test at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How long after a release its waiter may take the key: far below the
/// waits (20 s and more), with room for a loaded 2-core machine.
const WOKEN_WITHIN: Duration = Duration::from_secs(5);

/// How long a waiter may take to be subscribed.
const SUBSCRIBED_WITHIN: Duration = Duration::from_secs(10);

/// The cluster's masters (`true`) or replicas (`false`), as seeds.
fn seeds(cluster: &RedisCluster, masters: bool) -> Vec<String> {
    let seeds: Vec<String> = (0..cluster.nodes.len())
        .filter(|&i| cluster.is_master(i) == masters)
        .map(|i| cluster.url(i))
        .collect();
    assert_eq!(seeds.len(), 3, "three of each");
    seeds
}

async fn client(seeds: &[String]) -> LockClient {
    let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
    LockClient::builder()
        .connect_timeout(Duration::from_secs(5))
        .cluster(&seeds)
        .await
        .expect("cluster connect")
}

fn options(wait: Duration, lease: Duration) -> LockOptions {
    LockOptions::new().wait(wait).lease(lease)
}

/// `client` waiting for `key` (up to `wait`): the moment its body ran.
fn wait_for(client: &LockClient, key: &str, wait: Duration) -> JoinHandle<Instant> {
    let (client, key) = (client.clone(), key.to_owned());
    tokio::spawn(async move {
        let opts = options(wait, Duration::from_secs(20));
        client
            .run_locked(&key, opts, async { Ok::<_, LockError>(Instant::now()) })
            .await
            .unwrap_or_else(|error| panic!("the waiter on {key} took it: {error:?}"))
    })
}

/// The subscribers of each of `lock_keys`' release channels on node `i`:
/// sharded ones (`PUBSUB SHARDNUMSUB`), or, on a node without sharded
/// pub/sub (Redis 6.2), plain ones (`PUBSUB NUMSUB`).
fn subscribers(cluster: &RedisCluster, i: usize, lock_keys: &[String]) -> Vec<i64> {
    let mut con = cluster.connection(i);
    let mut numsub = |subcommand: &str| {
        redis::cmd("PUBSUB")
            .arg(subcommand)
            .arg(lock_keys)
            .query::<Vec<redis::Value>>(&mut con)
    };
    let counts = match numsub("SHARDNUMSUB") {
        Ok(counts) => counts,
        Err(unknown) if unknown.to_string().contains("SHARDNUMSUB") => {
            numsub("NUMSUB").expect("PUBSUB NUMSUB")
        }
        Err(e) => panic!("PUBSUB SHARDNUMSUB: {e}"),
    };
    // Channel, count, channel, count...
    counts
        .chunks(2)
        .map(|pair| match pair.get(1) {
            Some(redis::Value::Int(n)) => *n,
            other => panic!("PUBSUB (SHARD)NUMSUB answered {other:?}"),
        })
        .collect()
}

/// Waits until `lock_key`'s release channel has a subscriber on its
/// master (where both a sharded and a plain release reach it).
async fn subscribed(cluster: &RedisCluster, lock_key: &str) {
    let master = cluster.master_of(lock_key);
    let keys = [lock_key.to_owned()];
    let deadline = Instant::now() + SUBSCRIBED_WITHIN;
    while subscribers(cluster, master, &keys)[0] == 0 {
        assert!(
            Instant::now() < deadline,
            "no subscriber on {lock_key} at its master (node {master}) within {SUBSCRIBED_WITHIN:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The waiter's body ran after `released`, within [`WOKEN_WITHIN`].
async fn woken(waiter: JoinHandle<Instant>, released: Instant, what: &str) {
    let limit = released + WOKEN_WITHIN + Duration::from_secs(1);
    let got = tokio::time::timeout_at(limit, waiter)
        .await
        .unwrap_or_else(|_| panic!("{what}: not woken within {WOKEN_WITHIN:?} of the release"))
        .expect("waiter task");
    let after = got
        .checked_duration_since(released)
        .unwrap_or_else(|| panic!("{what}: the waiter took the key before its release"));
    assert!(
        after < WOKEN_WITHIN,
        "{what}: woken {after:?} after the release"
    );
}

/// Issue 37's case, round after round: client A (seeded with the
/// masters) holds a key with a 30 s lease, client B (seeded with the
/// replicas) waits with a 20 s wait, A releases 300 ms later; B takes the
/// key at once. Three rounds on keys of one slot, while B waits on one
/// more key of the slot through them all: on B's connection to the slot's
/// master, channels lapse and are wanted again (the first round's key is
/// the third's) beside one that stays wanted, whose release comes last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_a_waiter_seeded_with_replicas_while_its_other_waits_end() {
    let _serial = SERIAL.lock().await;
    let cluster = RedisCluster::start();
    let a = client(&seeds(&cluster, true)).await;
    let b = client(&seeds(&cluster, false)).await;
    let (lease, wait) = (Duration::from_secs(30), Duration::from_secs(20));
    let pause = Duration::from_millis(300);
    let kept = "{wakeup}:kept";
    let kept_holder = Holder::start(&a, kept, options(Duration::ZERO, lease)).await;
    let kept_waiter = wait_for(&b, kept, wait);
    for (round, key) in ["{wakeup}:1", "{wakeup}:2", "{wakeup}:1"]
        .iter()
        .enumerate()
    {
        let holder = Holder::start(&a, key, options(Duration::ZERO, lease)).await;
        let waiter = wait_for(&b, key, wait);
        tokio::time::sleep(pause).await;
        let released = Instant::now();
        holder.release().await.expect("holder");
        woken(waiter, released, &format!("round {round}, {key}")).await;
    }
    tokio::time::sleep(pause).await;
    let released = Instant::now();
    kept_holder.release().await.expect("kept holder");
    woken(kept_waiter, released, kept).await;
}

/// Many waits on keys of one slot: their channels lapse on B's connection
/// to its master, which is remade without them once too many have, while
/// B keeps waiting on one more key of the slot through it all. Each
/// release wakes its waiter at once (keys wanted again included), the
/// lapsed channels left subscribed stay bounded, and the long waiter's
/// channel survives the remaking: A's release of its key wakes it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channels_that_lapse_on_one_node_stay_bounded_and_wake_waiters_again() {
    let _serial = SERIAL.lock().await;
    let cluster = RedisCluster::start();
    let a = client(&cluster.urls()).await;
    let b = client(&cluster.urls()).await;
    let long_key = "{lapse}:long";
    let long_holder = Holder::start(
        &a,
        long_key,
        options(Duration::ZERO, Duration::from_secs(60)),
    )
    .await;
    let long_waiter = wait_for(&b, long_key, Duration::from_secs(60));
    subscribed(&cluster, &format!("lock:{long_key}")).await;
    // 80 distinct keys (a connection keeps at most 64 lapsed channels
    // beside one wanted), every third round a key of two rounds before (its
    // channel lapsed, wanted again).
    let rounds = 120;
    let mut seen = Vec::new();
    for round in 0..rounds {
        let key = match round % 3 {
            2 => format!("{{lapse}}:{}", round - 2),
            _ => format!("{{lapse}}:{round}"),
        };
        let holder =
            Holder::start(&a, &key, options(Duration::ZERO, Duration::from_secs(30))).await;
        let waiter = wait_for(&b, &key, Duration::from_secs(20));
        subscribed(&cluster, &format!("lock:{key}")).await;
        // The long waiter's channel is subscribed too (again, after its
        // connection was remade).
        subscribed(&cluster, &format!("lock:{long_key}")).await;
        let released = Instant::now();
        holder.release().await.expect("holder");
        woken(waiter, released, &format!("round {round}, {key}")).await;
        if !seen.contains(&key) {
            seen.push(key);
        }
    }
    let lock_keys: Vec<String> = seen.iter().map(|key| format!("lock:{key}")).collect();
    let master = cluster.master_of(&lock_keys[0]);
    let left = subscribers(&cluster, master, &lock_keys);
    let still = left.iter().filter(|&&n| n > 0).count();
    assert!(
        still <= 64,
        "{still} of {} channels nobody waits on are still subscribed",
        lock_keys.len()
    );
    let released = Instant::now();
    long_holder.release().await.expect("long holder");
    woken(long_waiter, released, "the long waiter").await;
}
