//! Redlock across 5 real redis-server processes: quorum, node failures,
//! frozen nodes, stale foreign locks, renewal and fencing.
mod support;

use std::time::Duration;

use lock_runtime::{LockClient, LockError, LockOptions, LossReason};
use support::{Holder, RedisServer};
use tokio::time::Instant;

const NODE_TIMEOUT: Duration = Duration::from_millis(200);

struct Cluster {
    nodes: Vec<RedisServer>,
}

impl Cluster {
    fn start() -> Cluster {
        Cluster {
            nodes: (0..5).map(|_| RedisServer::start()).collect(),
        }
    }

    fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(|node| node.url()).collect()
    }

    async fn client(&self, builder: lock_runtime::LockClientBuilder) -> LockClient {
        let urls = self.urls();
        let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
        builder
            .node_timeout(NODE_TIMEOUT)
            .connect_timeout(Duration::from_secs(2))
            .redlock(&urls)
            .await
            .expect("redlock connect")
    }
}

async fn once(client: &LockClient, key: &str, wait: Duration) -> Result<(), LockError> {
    let options = LockOptions::new().wait(wait);
    client
        .run_locked(key, options, async { Ok::<_, LockError>(()) })
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_two_of_five_nodes_down_locks_still_exclude_across_processes() {
    let mut cluster = Cluster::start();
    let store = RedisServer::start();
    cluster.nodes[0].stop();
    cluster.nodes[3].stop();
    let urls = cluster.urls().join(",");
    support::four_processes_never_oversell(&urls, &store.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_three_of_five_down_calls_fail_clearly_and_recover_after_restart() {
    let mut cluster = Cluster::start();
    let client = cluster.client(LockClient::builder()).await;
    once(&client, "quorum", Duration::ZERO)
        .await
        .expect("all up");

    for i in [1, 2, 4] {
        cluster.nodes[i].stop();
    }
    let start = Instant::now();
    let error = once(&client, "quorum", Duration::from_millis(500))
        .await
        .expect_err("no quorum");
    let elapsed = start.elapsed();
    match &error {
        LockError::NoQuorum {
            key,
            needed,
            reached,
            failures,
            ..
        } => {
            assert_eq!(key, "lock:quorum");
            assert_eq!((*needed, *reached), (3, 2));
            assert_eq!(failures.len(), 3, "{failures:?}");
        }
        other => panic!("expected NoQuorum, got {other:?}"),
    }
    let message = error.to_string();
    for i in [1, 2, 4] {
        let node = cluster.urls()[i].trim_start_matches("unix://").to_owned();
        assert!(message.contains(&node), "{message} does not name {node}");
    }
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");

    for i in [1, 2, 4] {
        cluster.nodes[i].restart();
    }
    let start = Instant::now();
    loop {
        match once(&client, "quorum", Duration::ZERO).await {
            Ok(()) => break,
            Err(e) => assert!(
                start.elapsed() < Duration::from_secs(15),
                "no recovery: {e}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_node_costs_only_its_timeout() {
    let cluster = Cluster::start();
    let client = cluster.client(LockClient::builder()).await;
    once(&client, "frozen", Duration::ZERO).await.expect("warm");
    let paused = cluster.nodes[2].pause();
    let start = Instant::now();
    let result = once(&client, "frozen", Duration::ZERO).await;
    let elapsed = start.elapsed();
    paused.resume();
    result.expect("a quorum of 4 answered");
    // Acquire and release each wait at most one node timeout.
    assert!(
        elapsed < 2 * NODE_TIMEOUT + Duration::from_secs(1),
        "{elapsed:?}"
    );
    println!("acquire + release with a frozen node: {elapsed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_foreign_lock_on_a_minority_does_not_block_a_quorum() {
    let cluster = Cluster::start();
    for node in &cluster.nodes[..2] {
        let _: () = redis::cmd("SET")
            .arg("lock:contested")
            .arg("L1:1:h:someone-else")
            .arg("PX")
            .arg(60_000)
            .query(&mut node.connection())
            .expect("stale lock");
    }
    let client = cluster.client(LockClient::builder()).await;
    once(&client, "contested", Duration::ZERO)
        .await
        .expect("3 of 5 nodes grant it");
    // The foreign holds are untouched.
    for node in &cluster.nodes[..2] {
        assert_eq!(node.owners("lock:contested").len(), 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lock_excludes_others_and_is_renewed_by_quorum() {
    let cluster = Cluster::start();
    let builder = LockClient::builder().default_lease(Duration::from_millis(600));
    let client = cluster.client(builder.clone()).await;
    let other = cluster.client(builder).await;

    let first_token = client
        .run_locked("renewed", LockOptions::new(), async {
            let token = lock_runtime::fencing_token().expect("held");
            for _ in 0..4 {
                tokio::time::sleep(Duration::from_millis(400)).await;
                let holders = cluster
                    .nodes
                    .iter()
                    .filter(|n| !n.owners("lock:renewed").is_empty())
                    .count();
                assert_eq!(holders, 5, "held on every node past its lease");
                let probe = other.clone();
                let taken =
                    tokio::spawn(async move { once(&probe, "renewed", Duration::ZERO).await })
                        .await
                        .expect("probe");
                assert!(matches!(taken, Err(LockError::Timeout { .. })), "{taken:?}");
            }
            Ok::<_, LockError>(token)
        })
        .await
        .expect("held throughout");
    let second_token = other
        .run_locked("renewed", LockOptions::new().wait(Duration::ZERO), async {
            Ok::<_, LockError>(lock_runtime::fencing_token().expect("held"))
        })
        .await
        .expect("free after the release");
    assert!(
        second_token > first_token,
        "{first_token} then {second_token}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_without_quorum_loses_the_lock() {
    let mut cluster = Cluster::start();
    let client = cluster
        .client(LockClient::builder().default_lease(Duration::from_millis(600)))
        .await;
    let holder = Holder::start(&client, "fragile", LockOptions::new()).await;
    for i in [0, 1, 2] {
        cluster.nodes[i].stop();
    }
    let stopped = Instant::now();
    match holder.outcome().await {
        Err(LockError::Lost { reason, .. }) => {
            assert!(matches!(reason, LossReason::Taken | LossReason::Expired));
        }
        other => panic!("expected Lost, got {other:?}"),
    }
    assert!(
        stopped.elapsed() < Duration::from_secs(3),
        "{:?}",
        stopped.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_a_waiter_on_another_client() {
    let cluster = Cluster::start();
    let builder = LockClient::builder().default_lease(Duration::from_secs(30));
    let client = cluster.client(builder.clone()).await;
    let other = cluster.client(builder).await;
    let holder = Holder::start(&client, "hand-off", LockOptions::new()).await;
    let waiter = tokio::spawn(async move {
        let start = Instant::now();
        once(&other, "hand-off", Duration::from_secs(20))
            .await
            .map(|()| start)
    });
    // Until the waiter has subscribed on the nodes.
    let subscribed = support::eventually(Duration::from_secs(10), || {
        let counts: Vec<(String, u64)> = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg("lock:hand-off")
            .query(&mut cluster.nodes[0].connection())
            .expect("NUMSUB");
        counts.first().is_some_and(|(_, n)| *n == 1)
    })
    .await;
    assert!(subscribed);
    let released = Instant::now();
    holder.release().await.expect("holder");
    waiter.await.expect("waiter").expect("waiter got the lock");
    let hand_off = released.elapsed();
    assert!(
        hand_off < Duration::from_secs(5),
        "woken, not left to the 30 s lease: {hand_off:?}"
    );
}

/// A node that was down when the client connected is connected on first
/// use. That connection belongs to the client, not to the runtime of the
/// call that happened to make it: it keeps working after that runtime ends.
#[test]
fn a_node_connected_late_outlives_the_runtime_that_first_used_it() {
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    };
    let mut cluster = Cluster {
        nodes: (0..3).map(|_| RedisServer::start()).collect(),
    };
    cluster.nodes[2].stop();
    let first = runtime();
    let client = first.block_on(cluster.client(LockClient::builder()));
    cluster.nodes[2].restart();
    // The first call after the restart makes the node's connection.
    first
        .block_on(once(&client, "late", Duration::ZERO))
        .expect("3 of 3 nodes up");
    assert_eq!(cluster.nodes[2].owners("lock:late").len(), 0);
    drop(first);

    // Node 2 is now needed for a quorum.
    cluster.nodes[0].stop();
    let second = runtime();
    second
        .block_on(once(&client, "late", Duration::ZERO))
        .expect("nodes 1 and 2 grant it from another runtime");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_given_twice_is_refused() {
    let cluster = Cluster::start();
    let urls = cluster.urls();
    let twice = [urls[0].as_str(), urls[0].as_str(), urls[1].as_str()];
    let error = LockClient::redlock(&twice).await.expect_err("refused");
    assert!(matches!(error, LockError::Connect(_)), "{error:?}");
    assert!(error.to_string().contains("cannot connect") || format!("{error:?}").contains("twice"));
    assert!(format!("{error:?}").contains("twice"), "{error:?}");
}

/// Three of five nodes answer late for a while, shorter than the lock's
/// validity: the renewal is retried, and the lock is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_that_nodes_answer_late_is_retried() {
    let cluster = Cluster::start();
    let client = cluster
        .client(LockClient::builder().default_lease(Duration::from_secs(3)))
        .await;
    let holder = Holder::start(&client, "patient", LockOptions::new()).await;
    // Across the first renewal, at 1 s.
    let paused: Vec<_> = cluster.nodes[..3].iter().map(|node| node.pause()).collect();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    drop(paused);
    tokio::time::sleep(Duration::from_millis(500)).await;
    holder
        .release()
        .await
        .expect("kept through the late answers");
}

/// A node that gave a larger token than the others (its clock ahead, say)
/// leaves the quorum: the next quorum still gives a larger token, because
/// the holder wrote its token back to the nodes that granted it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_go_up_when_the_node_that_gave_the_largest_leaves() {
    let mut cluster = Cluster::start();
    let ahead: u64 = 1 << 52;
    for node in &cluster.nodes[..1] {
        let _: () = redis::cmd("SET")
            .arg("lock:moving")
            .arg(format!("L1:{ahead}:f:"))
            .arg("PX")
            .arg(60_000)
            .query(&mut node.connection())
            .expect("SET");
    }
    let client = cluster.client(LockClient::builder()).await;
    let once = LockOptions::new().wait(Duration::from_secs(2));
    let token = || {
        client.run_locked("moving", once, async {
            Ok::<_, LockError>(lock_runtime::fencing_token().expect("held"))
        })
    };
    let first = token().await.expect("first");
    assert_eq!(first, ahead + 1);
    cluster.nodes[0].stop();
    let second = token().await.expect("second, without node 0");
    assert!(second > first, "{first} then {second}");
}

/// A call keeps its owner id across its attempts, so a node that kept an
/// earlier attempt's hold (the give-back after a split vote did not reach
/// it) answers a later attempt with that hold. The client counts a lease
/// from the later attempt's send; the node must keep the hold that long,
/// or a second client finds a quorum while the first still runs its body.
///
/// No proxy: the kept hold is planted on node A by hand, with the owner id
/// of the client's next acquisition and little lease left, and a foreign
/// hold on node C, so that A (its own hold) and B (free) make the quorum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_kept_from_an_earlier_attempt_lasts_the_lease_the_client_counts() {
    const KEY: &str = "lock:kept";
    const LEASE: Duration = Duration::from_secs(3);
    /// What is left of the kept hold, and of the foreign one.
    const LEFT_MS: u64 = 300;
    /// When the second client tries: past both planted holds, well before
    /// the first client's renewal at a third of its lease.
    const SECOND_AFTER: Duration = Duration::from_millis(600);

    let cluster = Cluster {
        nodes: (0..3).map(|_| RedisServer::start()).collect(),
    };
    let client = cluster.client(LockClient::builder()).await;
    let other = cluster.client(LockClient::builder()).await;

    // Owner ids are `<client id>:<n>`, n counting the client's acquisitions.
    let probe = LockOptions::new().wait(Duration::ZERO);
    let owner = client
        .run_locked("probe", probe, async {
            let info = client.inspect("probe").await?;
            Ok::<_, LockError>(info.holder.expect("held").owner)
        })
        .await
        .expect("probe");
    let (client_id, n) = owner.rsplit_once(':').expect("<client id>:<n>");
    let next = format!("{client_id}:{}", n.parse::<u64>().expect("n") + 1);

    let (mut a, mut c) = (cluster.nodes[0].connection(), cluster.nodes[2].connection());
    let plant = |con: &mut redis::Connection, value: &str| {
        let _: () = redis::cmd("SET")
            .arg(KEY)
            .arg(value)
            .arg("PX")
            .arg(LEFT_MS)
            .query(con)
            .expect("SET");
    };
    // C first: if C's hold is still there when the client's acquire
    // reaches it, so is A's.
    plant(&mut c, "L1:1:h:someone:1");
    plant(&mut a, &format!("L1:1:h:{next}"));

    let mut second = None;
    let options = LockOptions::new().lease(LEASE).wait(Duration::ZERO);
    let first = client
        .run_locked("kept", options, async {
            assert!(
                !cluster.nodes[2]
                    .owners(KEY)
                    .iter()
                    .any(|(owner, _)| *owner == next),
                "C refused the first client (the planted holds were there)"
            );
            tokio::time::sleep(SECOND_AFTER).await;
            let probe = other.clone();
            let taken = tokio::spawn(async move { once(&probe, "kept", Duration::ZERO).await })
                .await
                .expect("second client");
            second = Some(taken);
            Ok::<_, LockError>(())
        })
        .await;
    let second = second.expect("the first client's body ran");
    assert!(
        matches!(second, Err(LockError::Timeout { .. })),
        "a second client took the lock while the first held it: {second:?}"
    );
    first.expect("the first client held the lock to the end");
}

/// The server's time in ms on `node`.
fn time_ms(node: &RedisServer) -> u64 {
    let (secs, micros): (u64, u64) = node.query(&mut redis::cmd("TIME")).expect("TIME");
    secs * 1000 + micros / 1000
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_at_least_stays_on_a_quorum_until_its_end_by_each_node() {
    const HOLD: Duration = Duration::from_millis(1_500);
    let hold_ms = HOLD.as_millis() as u64;
    let mut cluster = Cluster::start();
    // One node is down when the lock is taken: it grants nothing, and its
    // release (a plain one) does not matter.
    cluster.nodes[4].stop();
    let client = cluster.client(LockClient::builder()).await;
    let other = cluster.client(LockClient::builder()).await;

    let before = time_ms(&cluster.nodes[0]);
    let options = LockOptions::new().wait(Duration::ZERO).hold_at_least(HOLD);
    let body = async { Ok::<_, LockError>(lock_runtime::fencing_token().expect("held")) };
    client
        .run_locked("report", options, body)
        .await
        .expect("ran");
    let after = time_ms(&cluster.nodes[0]);

    // Each node that granted it keeps the hold for its owner, until its own
    // grant's time plus the hold (one machine: one clock for all of them).
    let mut owners = Vec::new();
    for node in &cluster.nodes[..4] {
        owners.extend(
            node.owners("lock:report")
                .into_iter()
                .map(|(owner, _)| owner),
        );
        let end = support::expiry_ms(&mut node.connection(), "lock:report").expect("kept");
        assert!(
            end + 1 >= before + hold_ms && end <= after + hold_ms + 1,
            "expires at {end}: not the node's grant ({before}..{after}) plus {hold_ms} ms"
        );
    }
    assert_eq!(owners.len(), 4, "held on every node that granted it");
    assert!(owners.windows(2).all(|w| w[0] == w[1]), "{owners:?}");

    // With one more node gone, the three left (a quorum) keep it until the
    // end: another client's calls are refused until then.
    cluster.nodes[3].stop();
    let start = Instant::now();
    let taken = loop {
        let options = LockOptions::new().wait(Duration::ZERO);
        let body = async { Ok::<_, LockError>(lock_runtime::fencing_token().expect("held")) };
        match other.run_locked("report", options, body).await {
            Ok(token) => break token,
            Err(error) if error.is_timeout() => {}
            Err(error) => panic!("{error}"),
        }
        assert!(start.elapsed() < Duration::from_secs(10), "still held");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // Tokens are the nodes' times in µs: taken again past the end.
    let at = taken / 1000;
    println!(
        "taken again at {at}, {} ms after the earliest end",
        at - (before + hold_ms)
    );
    assert!(
        at >= before + hold_ms,
        "taken again at {at}, before {}",
        before + hold_ms
    );
    assert!(
        at <= after + hold_ms + 6_000,
        "taken again at {at}: freed late"
    );
}

/// Several keys at once by quorum, under contention: no deadlock, no key
/// with two holders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_keys_by_quorum_never_deadlock_under_contention() {
    let cluster = Cluster::start();
    let clients = [
        cluster.client(LockClient::builder()).await,
        cluster.client(LockClient::builder()).await,
    ];
    let figures = support::several::contention(&clients, &["q:a", "q:b", "q:c"], 4, 15).await;
    assert_eq!((figures.timeouts, figures.overlaps), (0, 0), "{figures:?}");
}
