//! Redis Cluster: 3 masters with a replica each, started by each test on
//! loopback ports: exclusion on keys over every master, wake-ups across
//! clients, renewal split by slot, a waiter across a slot migration, a
//! manual failover and a killed master during holds, sync_replicas, a
//! client seeded with replicas only, a clear error on a node that is not a
//! cluster, releases and withdrawals that a promoted replica missed sent
//! to it again (waking the releasing client's own waiters; after a failed
//! try, and with another master frozen), errors that name the dead
//! master, and `hold_at_least` on every master, with and without
//! `sync_replicas`. One test at a time: they share the machine's two cores.
mod support;

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lock_runtime::{LockClient, LockError, LockMode, LockOptions};
use lock_testkit::cluster::{info, RedisCluster};
use support::{Holder, RedisServer};
use tokio::time::Instant;

/// One cluster test at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn client(cluster: &RedisCluster, builder: lock_runtime::LockClientBuilder) -> LockClient {
    let urls = cluster.urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    builder
        .connect_timeout(Duration::from_secs(5))
        .cluster(&urls)
        .await
        .expect("cluster connect")
}

/// `n` keys whose locks (`lock:` + key) fall on every master.
fn spread_keys(cluster: &RedisCluster, n: usize) -> Vec<String> {
    let keys: Vec<String> = (0..n).map(|i| format!("spread:{i}")).collect();
    let masters: HashSet<usize> = keys
        .iter()
        .map(|k| cluster.master_of(&format!("lock:{k}")))
        .collect();
    assert_eq!(masters.len(), 3, "the keys fall on every master");
    keys
}

fn options(wait: Duration, lease: Duration) -> LockOptions {
    LockOptions::new().wait(wait).lease(lease)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_on_every_master_exclude_each_other_across_clients() {
    let _serial = SERIAL.lock().await;
    let cluster = RedisCluster::start();
    let clients = [
        client(&cluster, LockClient::builder()).await,
        client(&cluster, LockClient::builder()).await,
    ];
    let keys = spread_keys(&cluster, 24);
    let counters: Vec<Arc<AtomicU64>> = keys.iter().map(|_| Arc::default()).collect();
    let mut tasks = Vec::new();
    for (key, counter) in keys.iter().zip(&counters) {
        for client in &clients {
            for _ in 0..2 {
                let (client, key, counter) = (client.clone(), key.clone(), counter.clone());
                tasks.push(tokio::spawn(async move {
                    for _ in 0..4 {
                        let opts = options(Duration::from_secs(60), Duration::from_secs(10));
                        client
                            .run_locked(&key, opts, async {
                                // Not atomic: only the lock keeps updates apart.
                                let v = counter.load(Ordering::SeqCst);
                                tokio::time::sleep(Duration::from_millis(1)).await;
                                counter.store(v + 1, Ordering::SeqCst);
                                Ok::<_, LockError>(())
                            })
                            .await
                            .expect("locked increment");
                    }
                }));
            }
        }
    }
    for task in tasks {
        task.await.expect("task");
    }
    for counter in &counters {
        assert_eq!(counter.load(Ordering::SeqCst), 2 * 2 * 4, "no lost update");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_a_waiter_of_another_client_far_before_the_lease() {
    let _serial = SERIAL.lock().await;
    let cluster = RedisCluster::start();
    let a = client(&cluster, LockClient::builder()).await;
    let b = client(&cluster, LockClient::builder()).await;
    for key in spread_keys(&cluster, 6) {
        let holder =
            Holder::start(&a, &key, options(Duration::ZERO, Duration::from_secs(20))).await;
        let waiter = {
            let (b, key) = (b.clone(), key.clone());
            tokio::spawn(async move {
                let opts = options(Duration::from_secs(30), Duration::from_secs(20));
                b.run_locked(&key, opts, async { Ok::<_, LockError>(Instant::now()) })
                    .await
            })
        };
        // Long enough for the waiter to queue and subscribe.
        wait_for_subscriber(&cluster, &format!("lock:{key}"), Duration::from_secs(10)).await;
        let released = Instant::now();
        holder.release().await.expect("holder");
        let got = waiter.await.expect("waiter").expect("waiter got the lock");
        let after = got.saturating_duration_since(released);
        assert!(
            after < Duration::from_secs(3),
            "woken {after:?} after the release"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_seeded_with_replicas_subscribes_on_the_master_and_wakes_at_the_release() {
    let _serial = SERIAL.lock().await;
    let cluster = RedisCluster::start();
    let key = "seeded:1";
    let lock_key = format!("lock:{key}");
    let master = cluster.master_of(&lock_key);
    let replica = cluster.replica_of(master);
    // Replicas only, the key's own first: it serves the key's slot too (a
    // replica accepts `SSUBSCRIBE` for its master's slots).
    let mut seeds = vec![cluster.url(replica)];
    seeds.extend(
        (0..cluster.nodes.len())
            .filter(|&i| i != replica && !cluster.is_master(i))
            .map(|i| cluster.url(i)),
    );
    assert_eq!(seeds.len(), 3, "three replicas");
    let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
    let holding = client(&cluster, LockClient::builder()).await;
    let waiting = LockClient::builder()
        .connect_timeout(Duration::from_secs(5))
        .cluster(&seeds)
        .await
        .expect("cluster connect through replicas");
    let lease = Duration::from_secs(20);
    let holder = Holder::start(&holding, key, options(Duration::ZERO, lease)).await;
    let waiter = tokio::spawn(async move {
        let opts = options(Duration::from_secs(30), lease);
        waiting
            .run_locked(key, opts, async { Ok::<_, LockError>(Instant::now()) })
            .await
    });
    // The waiter's one subscription, wherever it is.
    let deadline = Instant::now() + Duration::from_secs(10);
    let counts = loop {
        let counts: Vec<i64> = (0..cluster.nodes.len())
            .map(|i| release_subscribers(&cluster, i, &lock_key))
            .collect();
        if counts.iter().sum::<i64>() > 0 {
            break counts;
        }
        assert!(Instant::now() < deadline, "the waiter did not subscribe");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(
        (counts[master], counts[replica]),
        (1, 0),
        "subscribed on the key's master (node {master}), not its replica \
         (node {replica}); subscribers by node: {counts:?}"
    );
    // The holder keeps the lock a moment longer, then releases it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    holder.release().await.expect("holder");
    let got = waiter.await.expect("waiter").expect("waiter got the lock");
    let after = got.saturating_duration_since(released);
    assert!(
        after < Duration::from_secs(3),
        "woken {after:?} after the release (the lease was {lease:?})"
    );
}

/// How many subscribers node `i` has on `lock_key`'s release channel: its
/// sharded subscribers (`PUBSUB SHARDNUMSUB`), or, on a node without
/// sharded pub/sub (Redis 6.2, where releases fall back to `PUBLISH` and
/// `SUBSCRIBE`), its subscribers of the plain channel (`PUBSUB NUMSUB`,
/// which counts this node's own). Which one is found by asking the node.
fn release_subscribers(cluster: &RedisCluster, i: usize, lock_key: &str) -> i64 {
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

/// Whether the cluster's servers have sharded pub/sub (not Redis 6.2),
/// asked of a running node.
fn sharded_pubsub(cluster: &RedisCluster) -> bool {
    let node = (0..cluster.nodes.len())
        .find(|&i| cluster.nodes[i].is_running())
        .expect("a running node");
    redis::cmd("PUBSUB")
        .arg("SHARDNUMSUB")
        .query::<redis::Value>(&mut cluster.connection(node))
        .is_ok()
}

/// Waits until `lock_key`'s release channel has a subscriber where a
/// release reaches it (see [`has_subscriber`]).
async fn wait_for_subscriber(cluster: &RedisCluster, lock_key: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    while !has_subscriber(cluster, lock_key) {
        assert!(Instant::now() < deadline, "no subscriber on {lock_key}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether `lock_key`'s release channel has a subscriber where a release
/// reaches it: on the key's master with sharded pub/sub; on any running
/// node without it (Redis 6.2: a release's `PUBLISH` reaches every node,
/// and a channel whose node was lost may be subscribed again on another
/// node while the slot map still names the lost one).
fn has_subscriber(cluster: &RedisCluster, lock_key: &str) -> bool {
    if sharded_pubsub(cluster) {
        return release_subscribers(cluster, cluster.master_of(lock_key), lock_key) > 0;
    }
    (0..cluster.nodes.len())
        .filter(|&i| cluster.nodes[i].is_running())
        .any(|i| release_subscribers(cluster, i, lock_key) > 0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_split_by_slot_keep_locks_on_every_master() {
    let _serial = SERIAL.lock().await;
    let cluster = RedisCluster::start();
    let a = client(&cluster, LockClient::builder()).await;
    let keys = spread_keys(&cluster, 30);
    let mut holders = Vec::new();
    for key in &keys {
        holders.push(
            Holder::start(&a, key, options(Duration::ZERO, Duration::from_millis(600))).await,
        );
    }
    // Four leases: only renewals keep them.
    tokio::time::sleep(Duration::from_millis(2400)).await;
    for holder in holders {
        holder.release().await.expect("kept to the end");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_follows_its_key_across_a_slot_migration() {
    let _serial = SERIAL.lock().await;
    let cluster = RedisCluster::start();
    let a = client(&cluster, LockClient::builder()).await;
    let b = client(&cluster, LockClient::builder()).await;
    let key = "migrating:1";
    let lock_key = format!("lock:{key}");
    let holder = Holder::start(&a, key, options(Duration::ZERO, Duration::from_secs(20))).await;
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move {
            let opts = options(Duration::from_secs(30), Duration::from_secs(20));
            b.run_locked(key, opts, async { Ok::<_, LockError>(Instant::now()) })
                .await
        })
    };
    wait_for_subscriber(&cluster, &lock_key, Duration::from_secs(10)).await;

    let from = cluster.master_of(&lock_key);
    let to = (0..cluster.nodes.len())
        .find(|&i| i != from && cluster.is_master(i))
        .expect("another master");
    migrate_slot_of(&cluster, &lock_key, from, to);
    assert_eq!(cluster.master_of(&lock_key), to);
    if sharded_pubsub(&cluster) {
        // The server dropped the waiter's channel; it subscribes on the
        // new master by itself.
        wait_for_subscriber(&cluster, &lock_key, Duration::from_secs(10)).await;
    } else {
        // Plain pub/sub (Redis 6.2): the channel stays where it is, and the
        // release's PUBLISH reaches every node.
        assert_eq!(release_subscribers(&cluster, from, &lock_key), 1);
    }

    let released = Instant::now();
    holder
        .release()
        .await
        .expect("holder kept the lock across the move");
    let got = waiter.await.expect("waiter").expect("waiter got the lock");
    let after = got.saturating_duration_since(released);
    assert!(
        after < Duration::from_secs(3),
        "woken {after:?} after the release"
    );
}

/// Moves the slot of `key` (and its keys) from master `from` to master `to`.
fn migrate_slot_of(cluster: &RedisCluster, key: &str, from: usize, to: usize) {
    let slot: u16 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query(&mut cluster.connection(from))
        .expect("KEYSLOT");
    let (from_id, to_id) = (cluster.node_id(from), cluster.node_id(to));
    let setslot = |node: usize, args: &[&str]| {
        let _: () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg(args)
            .query(&mut cluster.connection(node))
            .expect("CLUSTER SETSLOT");
    };
    setslot(to, &["IMPORTING", &from_id]);
    setslot(from, &["MIGRATING", &to_id]);
    // Every key of the slot, as a resharding moves them (the lock's record
    // of waiting clients is there beside it).
    let keys: Vec<String> = redis::cmd("CLUSTER")
        .arg("GETKEYSINSLOT")
        .arg(slot)
        .arg(1000)
        .query(&mut cluster.connection(from))
        .expect("CLUSTER GETKEYSINSLOT");
    assert!(
        keys.iter().any(|k| k == key),
        "{key} is not in its slot: {keys:?}"
    );
    let _: redis::Value = redis::cmd("MIGRATE")
        .arg("127.0.0.1")
        .arg(cluster.nodes[to].port())
        .arg("")
        .arg(0)
        .arg(5000)
        .arg("KEYS")
        .arg(&keys)
        .query(&mut cluster.connection(from))
        .expect("MIGRATE");
    setslot(to, &["NODE", &to_id]);
    setslot(from, &["NODE", &to_id]);
    for i in 0..cluster.nodes.len() {
        if i != from && i != to && cluster.is_master(i) {
            setslot(i, &["NODE", &to_id]);
        }
    }
}

/// Holds `keys` on `client` (lease `lease`) until released.
async fn hold_all(client: &LockClient, keys: &[String], lease: Duration) -> Vec<Holder> {
    let mut holders = Vec::new();
    for key in keys {
        holders.push(Holder::start(client, key, options(Duration::from_secs(5), lease)).await);
    }
    holders
}

/// After a failover: each held key is either still exclusive (another
/// client cannot take it) or its holder reports it lost; and new calls
/// work within `limit`.
async fn check_after_failover(
    cluster: &RedisCluster,
    keys: &[String],
    holders: Vec<Holder>,
    limit: Duration,
) {
    let other = client(cluster, LockClient::builder()).await;
    let deadline = Instant::now() + limit;
    // New calls work again.
    loop {
        let opts = options(Duration::from_secs(2), Duration::from_secs(5));
        let fresh = other
            .run_locked("after-failover", opts, async { Ok::<_, LockError>(()) })
            .await;
        match fresh {
            Ok(()) => break,
            Err(error) => assert!(Instant::now() < deadline, "calls still fail: {error}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut taken = Vec::new();
    for key in keys {
        let opts = options(Duration::ZERO, Duration::from_secs(30));
        let got = other
            .run_locked(key, opts, async { Ok::<_, LockError>(()) })
            .await;
        taken.push(got.is_ok());
    }
    let (mut kept, mut lost) = (0, 0);
    for (holder, taken) in holders.into_iter().zip(taken) {
        let outcome = tokio::time::timeout(Duration::from_secs(30), holder.release())
            .await
            .expect("the holder's call ends");
        match outcome {
            Ok(()) => {
                assert!(!taken, "another client took a lock its holder kept");
                kept += 1;
            }
            Err(LockError::Lost { .. }) => lost += 1,
            Err(other) => panic!("unexpected end of a hold: {other}"),
        }
    }
    eprintln!("after the failover: {kept} locks kept, {lost} reported lost");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manual_failover_during_holds_keeps_the_locks_or_reports_them_lost() {
    let _serial = SERIAL.lock().await;
    let cluster = RedisCluster::start();
    let a = client(&cluster, LockClient::builder()).await;
    let keys = spread_keys(&cluster, 9);
    let holders = hold_all(&a, &keys, Duration::from_secs(3)).await;
    let master = cluster.master_of(&format!("lock:{}", keys[0]));
    let replica = cluster.replica_of(master);
    {
        let cluster = &cluster;
        tokio::task::block_in_place(|| cluster.manual_failover(replica));
    }
    cluster.wait_ok();
    check_after_failover(&cluster, &keys, holders, Duration::from_secs(20)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_master_during_holds_keeps_the_locks_or_reports_them_lost() {
    let _serial = SERIAL.lock().await;
    let mut cluster = RedisCluster::start();
    let a = client(&cluster, LockClient::builder()).await;
    let keys = spread_keys(&cluster, 9);
    let holders = hold_all(&a, &keys, Duration::from_secs(3)).await;
    let master = cluster.master_of(&format!("lock:{}", keys[0]));
    let replica = cluster.replica_of(master);
    cluster.kill(master);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cluster.is_master(replica) {
        assert!(Instant::now() < deadline, "the replica was not promoted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    cluster.wait_ok();
    check_after_failover(&cluster, &keys, holders, Duration::from_secs(30)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_replicas_waits_for_a_replica_and_fails_without_one() {
    let _serial = SERIAL.lock().await;
    let cluster = RedisCluster::start();
    let key = "synced:1";
    let lock_key = format!("lock:{key}");
    let master = cluster.master_of(&lock_key);
    let replica = cluster.replica_of(master);

    // Off: no WAIT anywhere.
    let plain = client(&cluster, LockClient::builder()).await;
    let opts = options(Duration::from_secs(5), Duration::from_secs(5));
    plain
        .run_locked(key, opts, async { Ok::<_, LockError>(()) })
        .await
        .expect("plain lock");
    let waits =
        |i: usize| info(&mut cluster.connection(i), "commandstats").contains("cmdstat_wait:");
    assert!(
        (0..6).all(|i| !waits(i)),
        "a client without sync_replicas sends no WAIT"
    );

    let synced = client(
        &cluster,
        // Generous: the replica's acknowledgement crosses a loaded machine.
        LockClient::builder().sync_replicas(1, Duration::from_secs(2)),
    )
    .await;
    synced
        .run_locked(key, opts, async { Ok::<_, LockError>(()) })
        .await
        .expect("a replica acknowledged the lock");
    assert!(waits(master), "the WAIT reached the lock's master");

    let paused = cluster.pause(replica);
    let started = Instant::now();
    let answer = synced
        .run_locked(key, opts, async { Ok::<_, LockError>(()) })
        .await;
    match answer {
        Err(LockError::NotReplicated {
            acked: 0,
            needed: 1,
            ..
        }) => {}
        other => panic!("expected NotReplicated, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(6));
    // It was released: another client takes it at once.
    let opts0 = options(Duration::ZERO, Duration::from_secs(5));
    plain
        .run_locked(key, opts0, async { Ok::<_, LockError>(()) })
        .await
        .expect("the unreplicated lock was released");
    drop(paused);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_on_a_single_node_says_which_constructor_to_use() {
    let _serial = SERIAL.lock().await;
    let server = RedisServer::start();
    let error = LockClient::builder()
        .connect_timeout(Duration::from_secs(3))
        .cluster(&[&server.url()])
        .await
        .expect_err("not a cluster");
    let text = format!("{error}: {:?}", std::error::Error::source(&error));
    assert!(text.contains("not a Redis Cluster node"), "{text}");
    assert!(text.contains("LockClient::connect"), "{text}");

    let none = LockClient::cluster(&[] as &[&str])
        .await
        .expect_err("no node");
    let text = format!("{none}: {:?}", std::error::Error::source(&none));
    assert!(text.contains("no Redis Cluster node given"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_on_a_killed_masters_key_is_woken_through_the_new_master() {
    let _serial = SERIAL.lock().await;
    let mut cluster = RedisCluster::start();
    let a = client(&cluster, LockClient::builder()).await;
    let b = client(&cluster, LockClient::builder()).await;
    let key = "killed:1";
    let lock_key = format!("lock:{key}");
    // A long lease: a waiter that missed the release would sleep seconds.
    let lease = Duration::from_secs(12);
    let holder = Holder::start(&a, key, options(Duration::ZERO, lease)).await;
    // A waiter whose try meets the failover (the master gone, the cluster
    // down for a moment) fails with `Backend`, as any call then; it tries
    // again, as an application would.
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let opts = options(Duration::from_secs(40), lease);
                let got = b
                    .run_locked(key, opts, async { Ok::<_, LockError>(Instant::now()) })
                    .await;
                match got {
                    Err(LockError::Backend { .. }) if Instant::now() < deadline => {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    got => return got,
                }
            }
        })
    };
    wait_for_subscriber(&cluster, &lock_key, Duration::from_secs(10)).await;
    let master = cluster.master_of(&lock_key);
    let replica = cluster.replica_of(master);
    cluster.kill(master);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cluster.is_master(replica) {
        assert!(Instant::now() < deadline, "the replica was not promoted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    cluster.wait_ok();
    // The waiter waits on the new master (its channel moved there), or it
    // took the lock there: then the lock had not reached the replica, and
    // its holder must learn that it lost it. Well within its 40 s wait
    // (redis-rs's cluster connection is slow to drop a dead node on a busy
    // machine: more than 15 s was seen).
    let deadline = Instant::now() + Duration::from_secs(30);
    while !waiter.is_finished() && !has_subscriber(&cluster, &lock_key) {
        assert!(
            Instant::now() < deadline,
            "the waiter neither waits nor holds"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let released = Instant::now();
    let held_to_the_end = holder.release().await;
    let got = waiter.await.expect("waiter").expect("waiter got the lock");
    match held_to_the_end {
        Ok(()) => {
            assert!(got >= released, "two holders: the waiter took a kept lock");
            let after = got.saturating_duration_since(released);
            assert!(
                after < Duration::from_secs(3),
                "woken {after:?} after the release"
            );
        }
        Err(LockError::Lost { .. }) => {}
        Err(other) => panic!("unexpected end of the hold: {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_processes_never_oversell_on_a_cluster() {
    let _serial = SERIAL.lock().await;
    let cluster = RedisCluster::start();
    let store = RedisServer::start();
    let locks = format!("cluster:{}", cluster.urls().join(","));
    support::four_processes_never_oversell(&locks, &store.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_master_costs_the_other_masters_locks_nothing() {
    let _serial = SERIAL.lock().await;
    let cluster = RedisCluster::start();
    let a = client(&cluster, LockClient::builder()).await;
    let keys = spread_keys(&cluster, 12);
    // Renewed every 2 s; a renewal stuck on the frozen master takes at
    // most the command timeout (2 s), well inside the others' leases.
    let lease = Duration::from_secs(6);
    let holders = hold_all(&a, &keys, lease).await;
    let frozen = cluster.master_of(&format!("lock:{}", keys[0]));
    let elsewhere: Vec<bool> = keys
        .iter()
        .map(|k| cluster.master_of(&format!("lock:{k}")) != frozen)
        .collect();
    {
        let _paused = cluster.pause(frozen);
        // Two renewal periods with one master frozen (its replica may be
        // promoted meanwhile: the node timeout is 1 s).
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    for (holder, elsewhere) in holders.into_iter().zip(elsewhere) {
        let outcome = tokio::time::timeout(Duration::from_secs(30), holder.release())
            .await
            .expect("the holder's call ends");
        match outcome {
            Ok(()) => {}
            // Only a lock of the frozen master may be lost.
            Err(LockError::Lost { .. }) if !elsewhere => {}
            Err(other) => panic!("a lock on a healthy master ended with {other}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synced_renewals_wait_for_a_replica_and_do_not_extend_without_one() {
    let _serial = SERIAL.lock().await;
    let cluster = RedisCluster::start();
    let key = "synced:renewed";
    let master = cluster.master_of(&format!("lock:{key}"));
    let replica = cluster.replica_of(master);
    let synced = client(
        &cluster,
        LockClient::builder().sync_replicas(1, Duration::from_millis(300)),
    )
    .await;
    let waits = |i: usize| {
        let stats = info(&mut cluster.connection(i), "commandstats");
        let line = stats.lines().find(|l| l.starts_with("cmdstat_wait:"));
        line.and_then(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .unwrap_or(0)
    };
    // A lease of 1.5 s is renewed every 0.5 s; the body outlives 4 leases.
    let opts = options(Duration::from_secs(5), Duration::from_millis(1500));
    let paused = std::sync::Mutex::new(None);
    // The acquire waits 300 ms for the (running) replica; on a busy
    // machine it may not answer in time, and the call fails with the
    // retryable `NotReplicated` before its body runs: call again, as an
    // application would.
    let deadline = Instant::now() + Duration::from_secs(60);
    let answer = loop {
        let answer = synced
            .run_locked(key, opts, async {
                let before = waits(master);
                *paused.lock().unwrap() = Some(cluster.pause(replica));
                tokio::time::sleep(Duration::from_secs(6)).await;
                Ok::<_, LockError>(before)
            })
            .await;
        let body_ran = paused.lock().unwrap().is_some();
        match answer {
            Err(LockError::NotReplicated { .. }) if !body_ran && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            answer => break answer,
        }
    };
    drop(paused.into_inner().unwrap());
    match answer {
        Err(LockError::Lost { .. }) => {}
        other => {
            panic!("a hold whose renewals no replica acknowledged must be lost, got {other:?}")
        }
    }
    assert!(
        waits(master) >= 2,
        "the renewals sent WAIT to the lock's master"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_replica_delays_only_the_synced_calls_on_its_own_master() {
    let _serial = SERIAL.lock().await;
    let cluster = RedisCluster::start();
    let on = |key: &str| cluster.master_of(&format!("lock:{key}"));
    let slow_master = on("slow:0");
    let slow_keys: Vec<String> = (0..2000)
        .map(|i| format!("slow:{i}"))
        .filter(|k| on(k) == slow_master)
        .take(40)
        .collect();
    assert_eq!(slow_keys.len(), 40);
    let healthy = (0..200)
        .map(|i| format!("healthy:{i}"))
        .find(|k| on(k) != slow_master)
        .expect("a key on another master");
    let synced = client(
        &cluster,
        LockClient::builder().sync_replicas(1, Duration::from_secs(1)),
    )
    .await;
    let paused = cluster.pause(cluster.replica_of(slow_master));
    let opts = options(Duration::ZERO, Duration::from_secs(10));
    let slow: Vec<_> = slow_keys
        .into_iter()
        .map(|key| {
            let synced = synced.clone();
            tokio::spawn(async move {
                synced
                    .run_locked(&key, opts, async { Ok::<_, LockError>(()) })
                    .await
            })
        })
        .collect();
    // The slow calls are on the wire: their WAITs block on the slow master.
    let blocked = || {
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query(&mut cluster.connection(slow_master))
            .unwrap_or_default();
        list.lines().filter(|l| l.contains("cmd=wait")).count()
    };
    // One WAIT seen blocked is enough: the other slow calls are queued
    // behind it or in flight, which is what the healthy call must not wait
    // for. (Four at once, the pool's size, are not always in flight at one
    // moment on a busy machine, where the client is slow to send the next.)
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = blocked();
    while seen < 1 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        seen = blocked();
    }
    if seen < 1 {
        let mut outcomes = Vec::new();
        for call in slow {
            outcomes.push(format!("{:?}", call.await));
        }
        panic!("the slow calls' WAITs are not blocked: {outcomes:?}");
    }
    let started = Instant::now();
    synced
        .run_locked(&healthy, opts, async { Ok::<_, LockError>(()) })
        .await
        .expect("a call on a healthy master's key");
    let took = started.elapsed();
    drop(paused);
    for call in slow {
        let _ = call.await;
    }
    // The replicas' timeout is 1 s; before, the call queued behind the 40
    // slow calls, 4 at a time, past its 10 s lease. A frozen replica can
    // still hold up the client's cluster connection (not the synced pools)
    // while it reads the slot map again, up to about two command timeouts.
    assert!(
        took < Duration::from_secs(4),
        "the healthy master's call took {took:?}"
    );
}

/// The state (`h`, `w`, `f`) of `key`'s lock on node `i`, read as a
/// replica would serve it (`READONLY`).
fn lock_state(cluster: &RedisCluster, i: usize, key: &str) -> Option<String> {
    let mut con = cluster.connection(i);
    let _: redis::RedisResult<()> = redis::cmd("READONLY").query(&mut con);
    let value: Option<String> = redis::cmd("GET")
        .arg(format!("lock:{key}"))
        .query(&mut con)
        .ok()
        .flatten();
    value
        .and_then(|v| support::parse_lock(&v))
        .map(|(_, state, _)| state)
}

/// Takes `key` with `client` for `options`' lease, has the release reach
/// the master but not its replica, kills the master and waits for the
/// replica's promotion: the promoted replica keeps the hold that `client`
/// released. The replica's index.
async fn miss_a_release(
    cluster: &mut RedisCluster,
    client: &LockClient,
    key: &str,
    options: LockOptions,
) -> usize {
    let replica = lose_a_release(cluster, client, key, options).await;
    wait_promoted(cluster, replica).await;
    replica
}

/// [`miss_a_release`] up to the master's death: the replica, which kept
/// the hold, is not promoted yet. The replica's index.
async fn lose_a_release(
    cluster: &mut RedisCluster,
    client: &LockClient,
    key: &str,
    options: LockOptions,
) -> usize {
    let master = cluster.master_of(&format!("lock:{key}"));
    let replica = cluster.replica_of(master);

    // The lock is taken and reaches the replica. (A `WAIT` here would
    // prove nothing: it counts the replicas that have this connection's
    // writes, and a fresh connection has written nothing.)
    let holder = Holder::start(client, key, options).await;
    until("the hold on the replica", || {
        lock_state(cluster, replica, key).as_deref() == Some("h")
    })
    .await;

    // The replica's link is cut (frozen, then dropped by the master), so
    // the release lands on the master only; then the master dies and the
    // replica, which never heard of the release, is promoted.
    let paused = cluster.pause(replica);
    let dropped: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query(&mut cluster.connection(master))
        .expect("CLIENT KILL");
    assert_eq!(dropped, 1, "the master dropped its replica");
    holder.release().await.expect("released on the master");
    assert_eq!(lock_state(cluster, master, key).as_deref(), Some("f"));
    cluster.kill(master);
    paused.resume();
    assert_eq!(
        lock_state(cluster, replica, key).as_deref(),
        Some("h"),
        "the replica missed the release"
    );
    replica
}

/// Tries `key` on `client` with `options` (no wait) every 100 ms until it
/// is taken or `limit` has passed: how long that took, if it was, and the
/// last error.
async fn first_taken(
    client: &LockClient,
    key: &str,
    options: LockOptions,
    limit: Duration,
) -> (Option<Duration>, Option<LockError>) {
    let start = Instant::now();
    let mut last = None;
    while start.elapsed() < limit {
        let body = async { Ok::<_, LockError>(start.elapsed()) };
        match client.run_locked(key, options, body).await {
            Ok(at) => return (Some(at), last),
            Err(error) => {
                last = Some(error);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    (None, last)
}

/// Waits (bounded) until node `replica` is a master.
async fn wait_promoted(cluster: &RedisCluster, replica: usize) {
    until_within("the replica's promotion", Duration::from_secs(30), || {
        cluster.is_master(replica)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_the_replica_missed_is_sent_again_to_the_promoted_replica() {
    let _serial = SERIAL.lock().await;
    let mut cluster = RedisCluster::start();
    let first = client(&cluster, LockClient::builder()).await;
    let second = client(&cluster, LockClient::builder()).await;
    let key = "stale";
    // The default 30 s lease.
    let replica = miss_a_release(&mut cluster, &first, key, LockOptions::new()).await;

    // Another client takes the key without waiting, within a few seconds
    // of the promotion: the first client sent its release again there.
    let options = LockOptions::new().wait(Duration::ZERO);
    let (taken, last) = first_taken(&second, key, options, Duration::from_secs(10)).await;
    let state = lock_state(&cluster, replica, key);
    assert!(
        taken.is_some(),
        "the key was still held 10 s after the promotion (state {state:?}): {last:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_sent_again_wakes_a_waiter_of_the_releasing_client() {
    let _serial = SERIAL.lock().await;
    let mut cluster = RedisCluster::start();
    let client = client(&cluster, LockClient::builder()).await;
    let key = "stale-own";
    // A lease far beyond the waiter's wait: only the release sent again
    // can give the key to the waiter.
    let options = LockOptions::new().lease(Duration::from_secs(120));
    let replica = miss_a_release(&mut cluster, &client, key, options).await;
    let promoted = Instant::now();

    // The same client locks the key again at once, with a long wait. The
    // promoted replica still has the hold; the release sent again frees
    // it there, and its notice carries this client's id. A call that
    // fails while the client finds the new master is made again.
    let wait = Duration::from_secs(40);
    let mut outcome = None;
    for _ in 0..100 {
        let body = async { Ok::<_, LockError>(promoted.elapsed()) };
        match client
            .run_locked(key, LockOptions::new().wait(wait), body)
            .await
        {
            Err(LockError::Backend { .. }) if promoted.elapsed() < Duration::from_secs(10) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            done => {
                outcome = Some(done);
                break;
            }
        }
    }
    // The client reads the slot map every second, a read of a dead master
    // costs up to 2 s, and the releases go again within 5 s: the waiter has
    // the key well within 20 s of the promotion, not at the end of its
    // wait.
    let state = lock_state(&cluster, replica, key);
    match outcome {
        Some(Ok(at)) => assert!(
            at < Duration::from_secs(20),
            "the waiter got the key {at:?} after the promotion"
        ),
        other => panic!(
            "the waiter did not get the key released (state {state:?}, {:?} after the \
             promotion): {other:?}",
            promoted.elapsed()
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_is_sent_again_while_another_master_is_frozen() {
    let _serial = SERIAL.lock().await;
    let mut cluster = RedisCluster::start();
    // A master frozen with its replica leaves its own slots unserved; the
    // other masters go on serving theirs.
    for i in 0..cluster.nodes.len() {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("cluster-require-full-coverage")
            .arg("no")
            .query(&mut cluster.connection(i))
            .expect("CONFIG SET");
    }
    let client = client(&cluster, LockClient::builder()).await;
    let key = "stale-beside-frozen";
    let master = cluster.master_of(&format!("lock:{key}"));
    // A lease far beyond the check: only the release sent again frees the
    // key within it.
    let options = LockOptions::new().lease(Duration::from_secs(120));
    let replica = lose_a_release(&mut cluster, &client, key, options).await;

    // Another master and its replica freeze before the promotion and stay
    // frozen through the check: every request to them goes unanswered,
    // and they stay in the slot map (the frozen master keeps its slots).
    // With a master frozen there is no majority to promote the replica:
    // it takes over, as an operator would have it.
    let frozen = (0..cluster.nodes.len())
        .find(|&i| i != master && cluster.is_master(i))
        .expect("another master");
    let frozen_replica = cluster.replica_of(frozen);
    let _paused = (cluster.pause(frozen_replica), cluster.pause(frozen));
    let _: () = redis::cmd("CLUSTER")
        .arg("FAILOVER")
        .arg("TAKEOVER")
        .query(&mut cluster.connection(replica))
        .expect("CLUSTER FAILOVER TAKEOVER");
    wait_promoted(&cluster, replica).await;
    let promoted = Instant::now();

    // The client reads the slot map every second (a read of the frozen
    // master costs up to 2 s), sends the releases again within 5 s, and
    // again at the next read while they go unsent. What holds them up is
    // redis-rs's cluster connection: each refresh of its slot map checks
    // every node's connection, the frozen ones for their whole timeouts,
    // and holds the connection's other requests meanwhile (8 to 24 s
    // before the release got through on a busy machine, and more than 60 s
    // on one busier still). The key is free on the promoted replica before
    // its 120 s lease would have freed it.
    wait_released(&cluster, replica, key, promoted, Duration::from_secs(100)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_is_sent_again_after_a_replay_the_new_master_did_not_answer() {
    let _serial = SERIAL.lock().await;
    let mut cluster = RedisCluster::start();
    let client = client(&cluster, LockClient::builder()).await;
    let key = "stale-unanswered";
    // A lease far beyond the check: only the release sent again frees the
    // key within it.
    let options = LockOptions::new().lease(Duration::from_secs(120));
    let replica = miss_a_release(&mut cluster, &client, key, options).await;
    let promoted = Instant::now();

    // The promoted replica answers nothing for its first seconds as a
    // master: the replays the client tries meanwhile go unsent. The client
    // reads the slot map every second, from the other masters too: it
    // finds the new master within those seconds.
    {
        let _new_master_frozen = cluster.pause(replica);
        tokio::time::sleep(Duration::from_secs(6)).await;
    }

    // A replay that did not send the release is tried again at the next
    // read (a second later; one in flight takes up to 5 s), once the
    // cluster serves the new master's slots again (its other masters
    // flagged it failed meanwhile): the key is free on the promoted replica
    // well within 30 s of the promotion, not at the end of its lease.
    wait_released(&cluster, replica, key, promoted, Duration::from_secs(30)).await;
}

/// Waits until node `i` has the release of `key`, which its master ran:
/// at most `limit` after `since`.
async fn wait_released(
    cluster: &RedisCluster,
    i: usize,
    key: &str,
    since: Instant,
    limit: Duration,
) {
    let mut state = lock_state(cluster, i, key);
    while state.as_deref() != Some("f") && since.elapsed() < limit {
        tokio::time::sleep(Duration::from_millis(50)).await;
        state = lock_state(cluster, i, key);
    }
    assert_eq!(
        state.as_deref(),
        Some("f"),
        "the promoted replica did not have the release {:?} after the promotion",
        since.elapsed()
    );
}

/// Whether `key`'s lock on node `i` keeps a waiting writer's claim (`ww`),
/// read as a replica would serve it (`READONLY`).
fn has_writer_claim(cluster: &RedisCluster, i: usize, key: &str) -> bool {
    let mut con = cluster.connection(i);
    let _: redis::RedisResult<()> = redis::cmd("READONLY").query(&mut con);
    redis::cmd("HEXISTS")
        .arg(format!("lock:{key}"))
        .arg("ww")
        .query(&mut con)
        .unwrap_or(false)
}

/// Waits (bounded) until `check` holds.
async fn until(what: &str, check: impl FnMut() -> bool) {
    until_within(what, Duration::from_secs(10), check).await;
}

/// Waits until `check` holds, at most `limit`.
async fn until_within(what: &str, limit: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !check() {
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writers_claim_withdrawn_before_a_failover_stays_withdrawn() {
    let _serial = SERIAL.lock().await;
    let mut cluster = RedisCluster::start();
    let readers = client(&cluster, LockClient::builder()).await;
    let writers = client(&cluster, LockClient::builder()).await;
    let key = "claimed";
    let master = cluster.master_of(&format!("lock:{key}"));
    let replica = cluster.replica_of(master);
    let read = LockOptions::new()
        .mode(LockMode::Read)
        .lease(Duration::from_secs(60));
    let reader = Holder::start(&readers, key, read).await;

    // A writer waits behind the reader: its claim holds new readers back
    // for its waiter lease, far longer than its own lease.
    let write = LockOptions::new()
        .mode(LockMode::Write)
        .lease(Duration::from_secs(1))
        .waiter_lease(Duration::from_secs(60))
        .wait(Duration::from_secs(60));
    let writer = tokio::spawn({
        let writers = writers.clone();
        async move {
            let body = async { Ok::<_, LockError>(()) };
            writers.run_locked(key, write, body).await
        }
    });
    until("the writer's claim", || {
        has_writer_claim(&cluster, master, key)
    })
    .await;
    // (Not `WAIT`: on a fresh connection, which has written nothing, it
    // proves nothing about the claim.)
    until("the replica has the claim", || {
        has_writer_claim(&cluster, replica, key)
    })
    .await;

    // The replica's link is cut, the writer gives up (its claim is
    // withdrawn on the master only), the master dies and the replica,
    // which still has the claim, is promoted: more than the writer's
    // lease after the withdrawal.
    let paused = cluster.pause(replica);
    let dropped: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query(&mut cluster.connection(master))
        .expect("CLIENT KILL");
    assert_eq!(dropped, 1, "the master dropped its replica");
    writer.abort();
    let _ = writer.await;
    until("the withdrawal", || {
        !has_writer_claim(&cluster, master, key)
    })
    .await;
    cluster.kill(master);
    paused.resume();
    assert!(
        has_writer_claim(&cluster, replica, key),
        "the replica missed the withdrawal"
    );
    wait_promoted(&cluster, replica).await;

    // A new reader gets in within a few seconds of the promotion, beside
    // the first: the writer's client sent the withdrawal again there.
    let options = LockOptions::new().mode(LockMode::Read).wait(Duration::ZERO);
    let (taken, last) = first_taken(&readers, key, options, Duration::from_secs(20)).await;
    let claim = has_writer_claim(&cluster, replica, key);
    assert!(
        taken.is_some(),
        "no reader got in within 20 s of the promotion (claim kept: {claim}): {last:?}"
    );
    reader.release().await.expect("the first reader");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_names_the_node_that_failed_not_the_seeds() {
    let _serial = SERIAL.lock().await;
    let mut cluster = RedisCluster::start();
    let client = client(&cluster, LockClient::builder()).await;
    let key = "dead-master";
    let master = cluster.master_of(&format!("lock:{key}"));
    let dead = format!("127.0.0.1:{}", cluster.nodes[master].port());
    let others: Vec<String> = (0..cluster.nodes.len())
        .filter(|&i| i != master)
        .map(|i| format!("127.0.0.1:{}", cluster.nodes[i].port()))
        .collect();
    client
        .run_locked(key, LockOptions::new(), async { Ok::<_, LockError>(()) })
        .await
        .expect("locked on the live master");

    // Calls on the key while its master is dead and not replaced yet fail
    // (a refused connection, a replica's `MOVED` to the dead master, or
    // `CLUSTERDOWN`): each error names the dead master, and no other node.
    cluster.kill(master);
    for _ in 0..3 {
        let options = LockOptions::new().wait(Duration::ZERO);
        let error = client
            .run_locked(key, options, async { Ok::<_, LockError>(()) })
            .await
            .expect_err("the key's master is dead");
        let shown = error.to_string();
        match &error {
            LockError::Backend { node, .. } => assert!(
                node == &dead || node.starts_with(&format!("{dead} ")),
                "the error names {node}, not the dead master {dead}: {shown}"
            ),
            other => panic!("not a backend error: {other:?}"),
        }
        assert!(
            others.iter().all(|node| !shown.contains(node.as_str())),
            "the error names another node than the dead master {dead}: {shown}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_at_least_keeps_keys_on_every_master_until_their_end() {
    let _serial = SERIAL.lock().await;
    let cluster = RedisCluster::start();
    let sync = Duration::from_secs(2);
    let synced = client(&cluster, LockClient::builder().sync_replicas(1, sync)).await;
    let plain = client(&cluster, LockClient::builder()).await;
    let other = client(&cluster, LockClient::builder()).await;
    // Past the lease: the release sets the key's expiry to the end.
    const HOLD: Duration = Duration::from_secs(1);
    let options = LockOptions::new()
        .wait(Duration::ZERO)
        .lease(Duration::from_millis(300))
        .hold_at_least(HOLD);
    let keys = spread_keys(&cluster, 6);
    let mut tokens = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        let client = if i % 2 == 0 { &synced } else { &plain };
        let body = async { Ok::<_, LockError>(lock_runtime::fencing_token().expect("held")) };
        tokens.push(client.run_locked(key, options, body).await.expect("ran"));
    }
    // Each key is taken again only at or past its end (a fresh key's token
    // is its master's time in µs), and well before a 30 s lease.
    let start = Instant::now();
    for (key, token) in keys.iter().zip(&tokens) {
        let end = token / 1000 + HOLD.as_millis() as u64;
        let taken = loop {
            let probe = LockOptions::new().wait(Duration::ZERO);
            let body = async { Ok::<_, LockError>(lock_runtime::fencing_token().expect("held")) };
            match other.run_locked(key, probe, body).await {
                Ok(taken) => break taken / 1000,
                Err(error) if error.is_timeout() => {}
                Err(error) => panic!("{key}: {error}"),
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "{key} still held"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert!(
            taken >= end,
            "{key} taken again at {taken}, before its end {end}"
        );
        assert!(
            taken <= end + 6_000,
            "{key} taken again at {taken}, long after {end}"
        );
    }
}

/// Several keys at once on a cluster, under contention: keys in three
/// slots (taken slot by slot, given back when a slot refuses) and keys that
/// share a hash tag (one script): no deadlock, no key with two holders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_keys_across_slots_never_deadlock_under_contention() {
    let _serial = SERIAL.lock().await;
    let cluster = RedisCluster::start();
    let a = client(&cluster, LockClient::builder()).await;
    let b = client(&cluster, LockClient::builder()).await;
    let spread = spread_keys(&cluster, 3);
    let spread: Vec<&str> = spread.iter().map(String::as_str).collect();
    let clients = [a, b];
    let figures = support::several::contention(&clients, &spread, 4, 20).await;
    assert_eq!((figures.timeouts, figures.overlaps), (0, 0), "{figures:?}");
    let tagged = ["{acct}:1", "{acct}:2", "{acct}:3"];
    let figures = support::several::contention(&clients, &tagged, 4, 20).await;
    assert_eq!((figures.timeouts, figures.overlaps), (0, 0), "{figures:?}");
    // A zero-wait call that finds a key of another slot taken holds none.
    let holder = Holder::start(&clients[1], spread[2], LockOptions::new()).await;
    let error = clients[0]
        .run_locked_all(&spread, LockOptions::new().wait(Duration::ZERO), async {
            Ok::<_, LockError>(())
        })
        .await
        .expect_err("one key held");
    assert!(matches!(error, LockError::Timeout { .. }), "{error}");
    for key in &spread[..2] {
        let info = clients[0].inspect(key).await.expect("inspect");
        assert!(!info.is_held(), "{key} left held");
    }
    holder.release().await.expect("holder");
}
