//! A burst: many locks taken, waited on and released at once, on one node
//! and on a Redis Cluster of 3 masters (each test starts its own servers on
//! loopback or a unix socket and stops them by pid; one test at a time).
//!
//! - The waiters of a burst subscribe to their release channels in
//!   commands of many channels each, not one command per key, and each
//!   waiter takes its key after the holder's release.
//! - On Cluster, a burst of calls from one client waits its turn in the
//!   client: calls the servers never saw do not time out behind the
//!   others.
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lock_runtime::{LockClient, LockError, LockOptions};
use lock_testkit::cluster::RedisCluster;
use lock_testkit::ServerOptions;
use redis::aio::MultiplexedConnection;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

/// One burst at a time: they share the machine's two cores.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Keys in a burst.
const KEYS: usize = 2_000;

/// How long the waiters may take to be subscribed, and the holder to take
/// every key: far above what a loaded 2-core machine needs.
const WITHIN: Duration = Duration::from_secs(60);

/// The holders of `keys` on `client`, each until `go` says so; returns
/// once every key is held.
async fn hold_all(
    client: &LockClient,
    keys: &Arc<Vec<String>>,
    go: &watch::Receiver<bool>,
) -> Vec<JoinHandle<Result<(), LockError>>> {
    let held = Arc::new((AtomicUsize::new(0), Notify::new()));
    let all_held = held.1.notified();
    tokio::pin!(all_held);
    all_held.as_mut().enable();
    let mut tasks = Vec::new();
    for i in 0..keys.len() {
        let (client, keys, held, mut go) = (client.clone(), keys.clone(), held.clone(), go.clone());
        tasks.push(tokio::spawn(async move {
            let options = LockOptions::new().wait(WITHIN);
            client
                .run_locked(&keys[i], options, async {
                    if held.0.fetch_add(1, Ordering::SeqCst) + 1 == keys.len() {
                        held.1.notify_one();
                    }
                    let _ = go.wait_for(|go| *go).await;
                    Ok::<_, LockError>(())
                })
                .await
        }));
    }
    tokio::time::timeout(WITHIN, all_held)
        .await
        .unwrap_or_else(|_| panic!("the holder took {} keys", held.0.load(Ordering::SeqCst)));
    tasks
}

/// A waiter on each of `keys` on `client`.
fn wait_all(
    client: &LockClient,
    keys: &Arc<Vec<String>>,
) -> Vec<JoinHandle<Result<(), LockError>>> {
    (0..keys.len())
        .map(|i| {
            let (client, keys) = (client.clone(), keys.clone());
            tokio::spawn(async move {
                let options = LockOptions::new().wait(WITHIN * 2);
                client.run_locked(&keys[i], options, async { Ok(()) }).await
            })
        })
        .collect()
}

/// The number in `INFO` section `section`'s `field`, summed over `admins`.
async fn info_sum(admins: &[MultiplexedConnection], section: &str, field: &str) -> u64 {
    let mut sum = 0;
    for admin in admins {
        let info: String = redis::cmd("INFO")
            .arg(section)
            .query_async(&mut admin.clone())
            .await
            .expect("INFO");
        sum += match section {
            "commandstats" => lock_testkit::calls_in(&info, field),
            _ => info
                .lines()
                .find_map(|line| {
                    line.strip_prefix(field)?
                        .strip_prefix(':')?
                        .trim()
                        .parse()
                        .ok()
                })
                .unwrap_or(0),
        };
    }
    sum
}

/// Runs a burst of `KEYS` keys between two clients of `connect`: the
/// waiters' subscriptions, counted on `admins` in `channels` (the INFO
/// stats field), are all on the servers before the release, in at most
/// `most_commands` of `command`; then every waiter takes its key.
async fn burst(
    admins: &[MultiplexedConnection],
    holder: LockClient,
    waiter: LockClient,
    (channels, command, most_commands): (&str, &str, u64),
) {
    let keys: Arc<Vec<String>> = Arc::new((0..KEYS).map(|i| format!("burst:{i}")).collect());
    let (go, signal) = watch::channel(false);
    let holders = hold_all(&holder, &keys, &signal).await;
    for admin in admins {
        let () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(&mut admin.clone())
            .await
            .expect("CONFIG RESETSTAT");
    }
    let before = info_sum(admins, "stats", channels).await;
    let waiters = wait_all(&waiter, &keys);
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        let now = info_sum(admins, "stats", channels).await;
        if now >= before + KEYS as u64 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} of {KEYS} channels subscribed within {WITHIN:?}",
            now.saturating_sub(before)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let sent = info_sum(admins, "commandstats", command).await;
    assert!(
        sent <= most_commands,
        "{KEYS} waiters' channels took {sent} {command} commands (at most {most_commands})"
    );
    go.send_replace(true);
    for task in holders {
        task.await.expect("holder task").expect("the holder's call");
    }
    for task in waiters {
        task.await
            .expect("waiter task")
            .expect("the waiter took its key");
    }
}

/// Whether the server has sharded pub/sub (Redis 7 on, and Valkey, which
/// gives 7.2 as its `redis_version`).
async fn sharded(admin: &MultiplexedConnection) -> bool {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut admin.clone())
        .await
        .expect("INFO server");
    let major = info.lines().find_map(|line| {
        line.strip_prefix("redis_version:")?
            .split('.')
            .next()?
            .parse::<u32>()
            .ok()
    });
    major.is_some_and(|major| major >= 7)
}

async fn admin(url: &str) -> MultiplexedConnection {
    redis::Client::open(url)
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("admin connection")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_waiters_subscribes_in_few_commands() {
    let _serial = SERIAL.lock().await;
    let server = ServerOptions::unix().start().expect("redis-server");
    let url = server.url();
    let holder = LockClient::connect(&url).await.expect("connect");
    let waiter = LockClient::connect(&url).await.expect("connect");
    // Every channel pending since the task's last round goes in one
    // command of up to 1,024: 2 commands when the waiters arrive at once.
    // They arrive over the time it takes to start 2,000 calls, which on a
    // busy machine spans tens of the task's rounds, so the bound is one
    // command per 16 waiters: one a waiter (the unbatched task) is 2,000.
    let most = KEYS as u64 / 16;
    let admins = [admin(&url).await];
    burst(
        &admins,
        holder,
        waiter,
        ("pubsub_channels", "subscribe", most),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_on_cluster_subscribes_and_hands_over_every_key() {
    let _serial = SERIAL.lock().await;
    let cluster = RedisCluster::try_start(0).expect("cluster");
    let urls = cluster.urls();
    let seeds: Vec<&str> = urls.iter().map(String::as_str).collect();
    let holder = LockClient::cluster(&seeds).await.expect("connect");
    let waiter = LockClient::cluster(&seeds).await.expect("connect");
    let mut admins = Vec::new();
    for url in &urls {
        admins.push(admin(url).await);
    }
    // One channel a command (a sharded subscribe may not span slots), sent
    // side by side; Redis 6.2 has no sharded pub/sub, and its nodes take a
    // plain SUBSCRIBE.
    let most = KEYS as u64 + 64;
    let counted = if sharded(&admins[0]).await {
        ("pubsubshard_channels", "ssubscribe", most)
    } else {
        ("pubsub_channels", "subscribe", most)
    };
    burst(&admins, holder, waiter, counted).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_on_cluster_waits_its_turn_in_the_client() {
    let _serial = SERIAL.lock().await;
    let cluster = RedisCluster::try_start(0).expect("cluster");
    let urls = cluster.urls();
    let seeds: Vec<&str> = urls.iter().map(String::as_str).collect();
    // A short command timeout: calls queued behind thousands of others
    // would run out of it before the servers saw them. (1 s: on a busy
    // 2-core machine, a debug build's 10,000 tasks can keep the answers
    // to 256 calls in flight from being read for some 300 ms.)
    let client = LockClient::builder()
        .command_timeout(Duration::from_secs(1))
        .cluster(&seeds)
        .await
        .expect("connect");
    let calls: Vec<_> = (0..10_000)
        .map(|i| {
            let client = client.clone();
            tokio::spawn(async move {
                let options = LockOptions::new().wait(WITHIN);
                let key = format!("turn:{i}");
                client
                    .run_locked(&key, options, async { Ok::<_, LockError>(()) })
                    .await
            })
        })
        .collect();
    let mut failed = Vec::new();
    for call in calls {
        if let Err(error) = call.await.expect("call task") {
            failed.push(error.to_string());
        }
    }
    assert!(
        failed.is_empty(),
        "{} of 10,000 calls failed, the first: {}",
        failed.len(),
        failed[0]
    );
}

/// A fleet on one key: 16 clients (each its own connections, as 16
/// processes), one task each, taking the key in turn with a short body. A
/// release names one waiting client, which alone tries at once: the
/// servers' script calls per critical section stay bounded (16 clients
/// woken by each release made it about 17).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_one_client_of_a_fleet() {
    const CLIENTS: usize = 16;
    const SECTIONS: usize = 20;
    let _serial = SERIAL.lock().await;
    let server = ServerOptions::unix().start().expect("redis-server");
    let url = server.url();
    let mut admin = admin(&url).await;
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(LockClient::connect(&url).await.expect("connect"));
    }
    let () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut admin)
        .await
        .expect("CONFIG RESETSTAT");
    let tasks: Vec<_> = clients
        .iter()
        .map(|client| {
            let client = client.clone();
            tokio::spawn(async move {
                for _ in 0..SECTIONS {
                    let options = LockOptions::new().wait(WITHIN);
                    client
                        .run_locked("fleet", options, async {
                            tokio::time::sleep(Duration::from_millis(1)).await;
                            Ok::<_, LockError>(())
                        })
                        .await
                        .expect("a section");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("fleet task");
    }
    let calls = info_sum(&[admin], "commandstats", "evalsha").await;
    let sections = (CLIENTS * SECTIONS) as u64;
    let per_section = calls as f64 / sections as f64;
    assert!(
        per_section <= 8.0,
        "{calls} script calls for {sections} critical sections: {per_section:.2} each (at most 8)"
    );
}

/// Waits until `places` clients are on the lock's `record` of waiting
/// clients (the latest, `who`).
async fn wait_for_places(admin: &mut MultiplexedConnection, record: &str, places: u64, who: &str) {
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        let now: u64 = redis::cmd("HLEN")
            .arg(record)
            .query_async(admin)
            .await
            .expect("HLEN");
        if now >= places {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "`{who}` never waited"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A release names a waiting client whose waiter has gone (cancelled): the
/// other clients' waiters, held back, try after the pause and take the
/// key, well within their wait, not at the end of the last holder's lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_client_that_left_does_not_stall_the_others() {
    let _serial = SERIAL.lock().await;
    let server = ServerOptions::unix().start().expect("redis-server");
    let url = server.url();
    let holder = LockClient::connect(&url).await.expect("connect");
    let gone = LockClient::connect(&url).await.expect("connect");
    let other = LockClient::connect(&url).await.expect("connect");
    let (go, signal) = watch::channel(false);
    let keys = Arc::new(vec!["left".to_owned()]);
    let holders = hold_all(&holder, &keys, &signal).await;
    // `gone` is first on the record of waiting clients, then leaves.
    let waiting = {
        let gone = gone.clone();
        tokio::spawn(async move {
            let options = LockOptions::new().wait(WITHIN);
            gone.run_locked("left", options, async { Ok::<_, LockError>(()) })
                .await
        })
    };
    let mut admin = admin(&url).await;
    let record = "lock:left:waiting{lock:left}";
    wait_for_places(&mut admin, record, 1, "gone").await;
    waiting.abort();
    let _ = waiting.await;
    let taker = {
        let other = other.clone();
        tokio::spawn(async move {
            let options = LockOptions::new().wait(Duration::from_secs(10));
            other
                .run_locked("left", options, async {
                    Ok::<_, LockError>(tokio::time::Instant::now())
                })
                .await
        })
    };
    wait_for_places(&mut admin, record, 2, "other").await;
    let released = tokio::time::Instant::now();
    go.send_replace(true);
    for task in holders {
        task.await.expect("holder task").expect("the holder's call");
    }
    let took = taker
        .await
        .expect("taker task")
        .expect("the other client took the key within its wait");
    assert!(
        took - released < Duration::from_secs(5),
        "taken {:?} after the release",
        took - released
    );
}
