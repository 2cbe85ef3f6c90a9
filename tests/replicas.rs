//! `sync_replicas` on a master with one replica, both real redis-server
//! processes on loopback ports: synced locks work, an acquire that the
//! replica does not acknowledge fails with `NotReplicated` and leaves the
//! lock free, renewals the replica does not acknowledge end in `Lost`, a
//! fenced write waits for the replica too, and the cost per acquire. One test at a time: the replica is frozen.
mod support;

use std::time::Duration;

use lock_runtime::{LockClient, LockError, LockOptions, LossReason};
use lock_testkit::Server;
use support::{parse_lock, Holder};
use tokio::time::Instant;

const SYNC_TIMEOUT: Duration = Duration::from_millis(500);

/// The tests of this binary run one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn synced_client(master: &Server) -> LockClient {
    LockClient::builder()
        .sync_replicas(1, SYNC_TIMEOUT)
        .connect(&master.url())
        .await
        .expect("connect")
}

async fn once(client: &LockClient, key: &str) -> Result<(), LockError> {
    let options = LockOptions::new().wait(Duration::from_secs(5));
    client
        .run_locked(key, options, async { Ok::<_, LockError>(()) })
        .await
}

/// Whether the lock `key` (full key) is held on `server`.
fn is_held(server: &Server, key: &str) -> bool {
    let value: Option<String> = server.query(redis::cmd("GET").arg(key)).flatten();
    value
        .and_then(|v| parse_lock(&v))
        .is_some_and(|(_, state, _)| state != "f")
}

/// How many times `command` ran on `server`, from INFO commandstats.
fn calls(server: &Server, command: &str) -> u64 {
    let info = server.info("commandstats").unwrap_or_default();
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// `once`, called again while it fails with `NotReplicated`, as an
/// application would: for a healthy replica, which a busy machine may keep
/// from acknowledging within the timeout.
async fn replicated(client: &LockClient, key: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match once(client, key).await {
            Ok(()) => return,
            Err(LockError::NotReplicated { .. }) if Instant::now() < deadline => {}
            Err(other) => panic!("synced lock {key}: {other:?}"),
        }
    }
}

/// Asserts that `outcome` is `NotReplicated` on `key`, the one replica
/// not acknowledging, after about the sync timeout (`took`).
fn not_replicated<T: std::fmt::Debug>(outcome: Result<T, LockError>, key: &str, took: Duration) {
    match outcome {
        Err(LockError::NotReplicated {
            key: named,
            needed,
            acked,
            timeout,
            waited,
            ..
        }) => {
            assert_eq!(named, key);
            assert_eq!((needed, acked, timeout), (1, 0, SYNC_TIMEOUT));
            assert!(
                waited >= timeout.mul_f64(0.9),
                "the call's own time: {waited:?}"
            );
        }
        other => panic!("expected NotReplicated, got {other:?}"),
    }
    assert!(
        took >= SYNC_TIMEOUT.mul_f64(0.9) && took < SYNC_TIMEOUT + Duration::from_secs(2),
        "failed after about the timeout, not {took:?}"
    );
}

/// The mean time of `n` uncontended lock-and-release pairs.
async fn pair_time(client: &LockClient, n: u32) -> Duration {
    once(client, "warm-up").await.expect("warm-up");
    let start = Instant::now();
    for _ in 0..n {
        once(client, "pair").await.expect("pair");
    }
    start.elapsed() / n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synced_locks_work_and_cost_one_replica_acknowledgement() {
    let _serial = SERIAL.lock().await;
    let master = Server::master();
    let replica = Server::replica_of(master.port());
    // The replica is healthy here: WAIT answers as soon as it acknowledges,
    // and the timeout is only how long a busy machine may take to.
    let synced = LockClient::builder()
        .sync_replicas(1, Duration::from_secs(5))
        .connect(&master.url())
        .await
        .expect("connect");
    let plain = LockClient::connect(&master.url()).await.expect("connect");

    // Off: no WAIT at all (counted from here: starting the replica waited).
    let _: Option<()> = master.query(redis::cmd("CONFIG").arg("RESETSTAT"));
    let plain_time = pair_time(&plain, 200).await;
    assert_eq!(calls(&master, "wait"), 0, "sync_replicas off sends no WAIT");

    let synced_time = pair_time(&synced, 200).await;
    assert_eq!(calls(&master, "wait"), 201, "one WAIT per synced acquire");
    println!(
        "uncontended pair: {plain_time:?} without sync_replicas, {synced_time:?} with \
         sync_replicas(1) (+{:?} per acquire)",
        synced_time.saturating_sub(plain_time)
    );

    // The lock's write is on the replica when the body runs.
    synced
        .run_locked("on-replica", LockOptions::new(), async {
            assert!(
                is_held(&replica, "lock:on-replica"),
                "the replica has the lock"
            );
            Ok::<_, LockError>(())
        })
        .await
        .expect("synced lock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_the_replica_does_not_acknowledge_fails_and_leaves_the_lock_free() {
    let _serial = SERIAL.lock().await;
    let master = Server::master();
    let replica = Server::replica_of(master.port());
    let client = synced_client(&master).await;
    replicated(&client, "order:1").await;

    let started = Instant::now();
    let outcome = {
        let _paused = replica.pause();
        once(&client, "order:1").await
    };
    not_replicated(outcome, "lock:order:1", started.elapsed());
    assert!(!is_held(&master, "lock:order:1"), "the lock was released");

    // Resumed: it works again, for this client and another.
    replicated(&client, "order:1").await;
    let other = LockClient::connect(&master.url()).await.expect("connect");
    once(&other, "order:1")
        .await
        .expect("free for another client");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_the_replica_does_not_acknowledge_end_in_lost() {
    let _serial = SERIAL.lock().await;
    let master = Server::master();
    let replica = Server::replica_of(master.port());
    let client = synced_client(&master).await;
    let lease = Duration::from_millis(1500);
    let deadline = Instant::now() + Duration::from_secs(30);
    let holder = loop {
        match Holder::try_start(&client, "report", LockOptions::new().lease(lease)).await {
            Ok(holder) => break holder,
            Err(LockError::NotReplicated { .. }) if Instant::now() < deadline => {}
            Err(other) => panic!("synced lock: {other:?}"),
        }
    };

    let paused = replica.pause();
    let started = Instant::now();
    let outcome = tokio::time::timeout(Duration::from_secs(10), holder.outcome())
        .await
        .expect("the holder ended within 10 s");
    drop(paused);
    assert!(
        matches!(
            outcome,
            Err(LockError::Lost {
                reason: LossReason::Expired,
                ..
            })
        ),
        "expected Lost(Expired), got {outcome:?}"
    );
    // Its validity ran out: no later than a lease after the pause.
    assert!(started.elapsed() < lease + Duration::from_secs(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_synced_acquire_dropped_while_waiting_for_the_replica_leaves_the_lock_free() {
    let _serial = SERIAL.lock().await;
    let master = Server::master();
    let replica = Server::replica_of(master.port());
    let client = synced_client(&master).await;
    replicated(&client, "dropped").await;

    let paused = replica.pause();
    // The acquire is taken at once, then WAIT blocks for the frozen replica:
    // the call is dropped there.
    let cut = tokio::time::timeout(Duration::from_millis(100), once(&client, "dropped")).await;
    assert!(cut.is_err(), "the call was still waiting for the replica");
    let freed =
        support::eventually(Duration::from_secs(5), || !is_held(&master, "lock:dropped")).await;
    drop(paused);
    assert!(freed, "the dropped call's lock was released");
    replicated(&client, "dropped").await;
}

/// Whether a client of `server` is blocked in `command` now (`CLIENT LIST`
/// shows it with flag `b`: in `WAIT`, or held by `CLIENT PAUSE`).
fn blocked_in(server: &Server, command: &str) -> bool {
    let list: String = server
        .query(&mut redis::cmd("CLIENT").arg("LIST").clone())
        .unwrap_or_default();
    let cmd = format!(" cmd={command} ");
    list.lines()
        .any(|line| line.contains(" flags=b ") && line.contains(&cmd))
}

/// Closes the connections of `server`'s clients that are blocked in
/// `command`: what they sent is dropped unrun.
fn cut_blocked_in(server: &Server, command: &str) {
    let list: String = server
        .query(&mut redis::cmd("CLIENT").arg("LIST").clone())
        .unwrap_or_default();
    let cmd = format!(" cmd={command} ");
    for line in list.lines() {
        if !(line.contains(" flags=b ") && line.contains(&cmd)) {
            continue;
        }
        let id = line
            .strip_prefix("id=")
            .and_then(|rest| rest.split(' ').next());
        if let Some(id) = id {
            let _: Option<()> = server.query(redis::cmd("CLIENT").arg("KILL").arg("ID").arg(id));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_give_back_of_an_unreplicated_lock_is_sent_again() {
    let _serial = SERIAL.lock().await;
    // No replica: every synced acquire is refused after the timeout.
    let master = Server::master();
    // Long enough for the test to see the acquire's WAIT blocked on a busy
    // machine.
    let client = LockClient::builder()
        .sync_replicas(1, Duration::from_secs(1))
        .connect(&master.url())
        .await
        .expect("connect");
    let options = LockOptions::new()
        .lease(Duration::from_secs(30))
        .wait(Duration::ZERO);
    // Once first, so that the scripts are loaded: a NOSCRIPT would send the
    // acquire twice.
    let first = client
        .run_locked("warm-up", options, async { Ok::<_, LockError>(()) })
        .await;
    assert!(
        matches!(first, Err(LockError::NotReplicated { .. })),
        "{first:?}"
    );
    let call = tokio::spawn(async move {
        client
            .run_locked("unsynced", options, async { Ok::<_, LockError>(()) })
            .await
    });
    // The lock is written and WAIT blocks: pause writes, so that the
    // give-back that follows the refusal is held unrun, then cut its
    // connection, so that it fails.
    let waiting = support::eventually(Duration::from_secs(5), || blocked_in(&master, "wait"));
    assert!(waiting.await, "the acquire waits for the replica");
    let _: Option<()> = master.query(redis::cmd("CLIENT").arg("PAUSE").arg(10_000).arg("WRITE"));
    let held_up = support::eventually(Duration::from_secs(5), || {
        !blocked_in(&master, "wait") && blocked_in(&master, "evalsha")
    });
    assert!(held_up.await, "the give-back is held by the pause");
    cut_blocked_in(&master, "evalsha");
    let _: Option<()> = master.query(&mut redis::cmd("CLIENT").arg("UNPAUSE").clone());

    let result = call.await.expect("task");
    assert!(
        matches!(result, Err(LockError::NotReplicated { .. })),
        "{result:?}"
    );
    let freed = support::eventually(Duration::from_secs(10), || {
        !is_held(&master, "lock:unsynced")
    });
    assert!(freed.await, "given back well before its 30 s lease");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_write_waits_for_the_replica_and_fails_when_it_does_not_acknowledge() {
    let _serial = SERIAL.lock().await;
    let master = Server::master();
    let replica = Server::replica_of(master.port());
    let client = synced_client(&master).await;
    replicated(&client, "account:9").await;
    let get = |server: &Server, key: &str| -> Option<String> {
        server.query(redis::cmd("GET").arg(key)).flatten()
    };

    // Acknowledged: the write and the fence are on the replica when the
    // write returns.
    let token = client
        .run_locked("account:9", LockOptions::new(), async {
            client
                .fenced_write("account:9")
                .cmd("SET", ["{account:9}:balance"], 100)
                .run()
                .await?;
            Ok::<_, LockError>(lock_runtime::fencing_token().expect("in the body"))
        })
        .await
        .expect("synced fenced write");
    assert_eq!(get(&replica, "{account:9}:balance").as_deref(), Some("100"));
    assert_eq!(
        get(&replica, "{account:9}:fence"),
        Some(token.to_string()),
        "the fence is on the replica"
    );

    // Not acknowledged: NotReplicated naming the resource, after about the
    // timeout; the command ran on the master.
    let started = Instant::now();
    let outcome = {
        let _paused = replica.pause();
        client
            .fenced_write("account:9")
            .token(token)
            .cmd("SET", ["{account:9}:balance"], 90)
            .run()
            .await
    };
    let took = started.elapsed();
    // It ran: said so, with its replies, and not retryable.
    let error = outcome.expect_err("not acknowledged");
    match &error {
        LockError::WriteNotReplicated {
            resource,
            needed,
            acked,
            timeout,
            waited,
            replies,
            ..
        } => {
            assert_eq!(resource, "account:9");
            assert_eq!((*needed, *acked, *timeout), (1, 0, SYNC_TIMEOUT));
            assert!(
                *waited >= SYNC_TIMEOUT.mul_f64(0.9) && *waited <= took,
                "{waited:?}"
            );
            assert_eq!(replies, &[redis::Value::Okay]);
        }
        other => panic!("expected WriteNotReplicated, got {other:?}"),
    }
    assert!(
        !error.is_retryable(),
        "a write that ran is not to be repeated"
    );
    let text = error.to_string();
    assert!(
        text.contains("fenced write to `account:9` ran on the master")
            && !text.contains("did not run"),
        "{text}"
    );
    assert!(
        took >= SYNC_TIMEOUT.mul_f64(0.9) && took < SYNC_TIMEOUT + Duration::from_secs(2),
        "failed after about the timeout, not {took:?}"
    );
    assert_eq!(get(&master, "{account:9}:balance").as_deref(), Some("90"));
}
