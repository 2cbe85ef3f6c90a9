//! Sentinel: a master, a replica and three sentinels, real redis-server
//! processes on loopback ports. Locks work through the sentinels; after the
//! master is killed, a call's error names it (not the sentinels) and calls
//! follow the failover; a lock held across the failover with
//! `sync_replicas` is reported lost before another owner gets it, and a
//! release the promoted replica missed is sent to it again. One test at a
//! time: each starts five servers and kills one.
mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lock_runtime::{LockClient, LockError, LockOptions};
use lock_testkit::replication::{Role, Sentinels, MASTER_NAME};
use lock_testkit::{wait_until, Server, ServerOptions};
use support::parse_lock;
use tokio::time::Instant;

/// The tests of this binary run one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How long calls may fail after the master is killed.
const FAILOVER_LIMIT: Duration = Duration::from_secs(30);

async fn client(sentinels: &Sentinels, builder: lock_runtime::LockClientBuilder) -> LockClient {
    let urls = sentinels.urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    builder
        .command_timeout(Duration::from_secs(1))
        .sentinel(&urls, MASTER_NAME)
        .await
        .expect("connect through the sentinels")
}

async fn once(client: &LockClient, key: &str) -> Result<(), LockError> {
    let options = LockOptions::new().wait(Duration::from_secs(5));
    client
        .run_locked(key, options, async { Ok::<_, LockError>(()) })
        .await
}

/// Tries `key` every 100 ms until a call succeeds, within the failover
/// limit; how long that took.
async fn until_it_works(client: &LockClient, key: &str) -> Duration {
    let start = Instant::now();
    let mut last = None;
    while start.elapsed() < FAILOVER_LIMIT {
        match once(client, key).await {
            Ok(()) => return start.elapsed(),
            Err(error) => last = Some(error),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("calls still failed {FAILOVER_LIMIT:?} after the failover: {last:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_work_through_the_sentinels_and_follow_a_failover() {
    let _serial = SERIAL.lock().await;
    let mut sentinels = Sentinels::start();
    let client = client(&sentinels, LockClient::builder()).await;
    once(&client, "order:1")
        .await
        .expect("lock through the sentinels");
    let value: Option<String> = sentinels
        .master
        .query(redis::cmd("GET").arg("lock:order:1"))
        .flatten();
    assert!(
        value.and_then(|v| parse_lock(&v)).is_some(),
        "the lock is on the master"
    );

    sentinels.master.stop();
    // A call that fails on the dead master names it, not the sentinels.
    let dead = format!("127.0.0.1:{}", sentinels.master.port());
    let error = once(&client, "order:2")
        .await
        .expect_err("the master is dead and not replaced yet");
    let shown = error.to_string();
    match &error {
        LockError::Backend { node, .. } => assert!(
            node.starts_with(&format!("{dead} ")),
            "the error names {node}, not the dead master {dead}: {shown}"
        ),
        other => panic!("not a backend error: {other:?}"),
    }
    for sentinel in &sentinels.sentinels {
        let port = sentinel.port().to_string();
        assert!(
            !shown.contains(&port),
            "the error names a sentinel: {shown}"
        );
    }
    let took = until_it_works(&client, "order:2").await;
    println!("calls worked again {took:?} after the master was killed");
    assert_eq!(
        sentinels.current_master_port(),
        Some(sentinels.replica.port()),
        "the replica was promoted"
    );
    let value: Option<String> = sentinels
        .replica
        .query(redis::cmd("GET").arg("lock:order:2"))
        .flatten();
    assert!(value.is_some(), "the new lock is on the new master");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_synced_lock_held_across_a_failover_is_lost_before_another_owner_takes_it() {
    let _serial = SERIAL.lock().await;
    let mut sentinels = Sentinels::start();
    let sync = Duration::from_millis(500);
    let first = client(&sentinels, LockClient::builder().sync_replicas(1, sync)).await;
    let second = client(&sentinels, LockClient::builder()).await;

    // The first owner holds the lock and watches for the second one.
    let second_runs = Arc::new(AtomicBool::new(false));
    let overlap = Arc::new(AtomicBool::new(false));
    let (held_tx, held_rx) = tokio::sync::oneshot::channel();
    let holder = tokio::spawn({
        let (second_runs, overlap) = (second_runs.clone(), overlap.clone());
        let options = LockOptions::new().lease(Duration::from_secs(3));
        async move {
            first
                .run_locked("shared", options, async {
                    let _ = held_tx.send(());
                    for _ in 0..600 {
                        if second_runs.load(Ordering::SeqCst) {
                            overlap.store(true, Ordering::SeqCst);
                        }
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    Ok::<_, LockError>(())
                })
                .await
        }
    });
    held_rx.await.expect("the first owner took the lock");

    sentinels.master.stop();
    let killed = Instant::now();
    let mut taken = None;
    while taken.is_none() && killed.elapsed() < FAILOVER_LIMIT {
        let options = LockOptions::new().wait(Duration::from_secs(5));
        let body = async {
            second_runs.store(true, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(50)).await;
            Ok::<_, LockError>(killed.elapsed())
        };
        match second.run_locked("shared", options, body).await {
            Ok(at) => taken = Some(at),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    let taken = taken.expect("the second owner took the lock after the failover");
    let first_outcome = tokio::time::timeout(Duration::from_secs(10), holder)
        .await
        .expect("the first owner's call ended")
        .expect("holder task");
    println!(
        "the second owner took the lock {taken:?} after the master was killed; \
         the first owner's call ended with {first_outcome:?}"
    );
    assert!(
        matches!(first_outcome, Err(LockError::Lost { .. })),
        "the first owner was told the lock was lost, not {first_outcome:?}"
    );
    assert!(
        !overlap.load(Ordering::SeqCst),
        "the first body still ran when the second owner had the lock"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_master_name_is_a_connect_error_naming_it() {
    let _serial = SERIAL.lock().await;
    let master = Server::master();
    let sentinel = Server::sentinel(master.port(), 1);
    let url = sentinel.url();
    let error = LockClient::sentinel(&[&url], "no-such-master")
        .await
        .expect_err("no master of that name");
    let message = format!(
        "{error}: {}",
        std::error::Error::source(&error).expect("cause")
    );
    assert!(matches!(error, LockError::Connect(_)), "{message}");
    assert!(message.contains("no-such-master"), "{message}");
    println!("{message}");

    // The right name connects.
    let client = LockClient::sentinel(&[&url], MASTER_NAME)
        .await
        .expect("connect");
    once(&client, "k").await.expect("lock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manual_failover_is_followed_and_waiters_are_woken_on_the_new_master() {
    let _serial = SERIAL.lock().await;
    let sentinels = Sentinels::start();
    let holder_client = client(&sentinels, LockClient::builder()).await;
    let waiter_client = client(&sentinels, LockClient::builder()).await;

    // One client holds the lock; the other waits for it.
    let holder = support::Holder::start(&holder_client, "w", LockOptions::new()).await;
    let waiter_probe = waiter_client.clone();
    let waiter = tokio::spawn(async move {
        let options = LockOptions::new().wait(Duration::from_secs(25));
        waiter_client
            .run_locked("w", options, async { Ok::<_, LockError>(Instant::now()) })
            .await
    });
    let marked = support::eventually(Duration::from_secs(10), || {
        let value: Option<String> = sentinels
            .master
            .query(redis::cmd("GET").arg("lock:w"))
            .flatten();
        value
            .and_then(|v| parse_lock(&v))
            .is_some_and(|(_, state, _)| state == "w")
    })
    .await;
    assert!(marked, "the waiter tried the lock");

    // A graceful failover: the old master stays up, demoted to a replica, so
    // the clients' writes there fail with READONLY.
    let failover = wait_until(Duration::from_secs(20), || {
        sentinels.sentinels[0]
            .query::<String>(redis::cmd("SENTINEL").arg("FAILOVER").arg(MASTER_NAME))
            .is_some()
    });
    assert!(failover, "SENTINEL FAILOVER was accepted");
    let promoted = wait_until(FAILOVER_LIMIT, || {
        sentinels.current_master_port() == Some(sentinels.replica.port())
            && sentinels
                .replica
                .query::<Vec<redis::Value>>(&mut redis::cmd("ROLE"))
                .and_then(|role| role.into_iter().next())
                .is_some_and(|kind| kind == redis::Value::BulkString(b"master".to_vec()))
    });
    assert!(promoted, "the replica was promoted");
    // Both clients move to the new master (told by the sentinels, or by
    // READONLY from the demoted one).
    for client in [&holder_client, &waiter_probe] {
        let start = Instant::now();
        let mut n = 0;
        let moved = loop {
            n += 1;
            let key = format!("probe:{n}");
            let on_new_master = once(client, &key).await.is_ok() && {
                let value: Option<String> = sentinels
                    .replica
                    .query(redis::cmd("GET").arg(format!("lock:{key}")))
                    .flatten();
                value.is_some()
            };
            if on_new_master || start.elapsed() > FAILOVER_LIMIT {
                break on_new_master;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert!(moved, "calls reach the new master");
        println!(
            "calls reached the new master {:?} after it was promoted",
            start.elapsed()
        );
    }

    // The holder releases on the new master; the waiter, subscribed there
    // by the switch, is woken by the notice rather than the 30 s lease.
    let released = Instant::now();
    holder
        .release()
        .await
        .expect("the holder kept its lock across the failover");
    let got = tokio::time::timeout(Duration::from_secs(25), waiter)
        .await
        .expect("the waiter ended")
        .expect("waiter task")
        .expect("the waiter took the lock");
    let after = got.saturating_duration_since(released);
    println!("the waiter took the lock {after:?} after the release");
    assert!(
        after < Duration::from_secs(5),
        "woken by the release, not the lease: {after:?}"
    );
}

/// An error and all its causes, as one line.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sentinels_and_the_master_take_their_own_credentials_never_shown() {
    let _serial = SERIAL.lock().await;
    let master = ServerOptions::role(Role::Master)
        .config("requirepass m-secret\n")
        .password("m-secret")
        .start()
        .unwrap_or_else(|e| panic!("{e}"));
    let sentinel = ServerOptions::role(Role::Sentinel(master.port(), 1))
        .config(&format!(
            "requirepass s-secret\nsentinel auth-pass {MASTER_NAME} m-secret\n"
        ))
        .password("s-secret")
        .start()
        .unwrap_or_else(|e| panic!("{e}"));
    let url = sentinel.url();
    let client = LockClient::builder()
        .sentinel_master_auth(None, "m-secret")
        .sentinel(&[&url], MASTER_NAME)
        .await
        .expect("connect with both passwords");
    once(&client, "k").await.expect("lock");

    let wrong_master = LockClient::builder()
        .sentinel_master_auth(None, "wrong-master-secret")
        .sentinel(&[&url], MASTER_NAME)
        .await
        .expect_err("a wrong master password");
    let message = chain(&wrong_master);
    assert!(!message.contains("secret"), "{message}");
    println!("{message}");

    let wrong_sentinel = url.replace("s-secret", "wrong-sentinel-secret");
    let error = LockClient::sentinel(&[&wrong_sentinel], MASTER_NAME)
        .await
        .expect_err("a wrong sentinel password");
    let message = chain(&error);
    assert!(!message.contains("secret"), "{message}");
    assert!(
        message.contains(&sentinel.port().to_string()),
        "names the sentinel: {message}"
    );
    println!("{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_the_replica_misses_is_refused_with_sync_replicas_and_taken_twice_without() {
    let _serial = SERIAL.lock().await;
    let mut sentinels = Sentinels::start();
    let sync = Duration::from_millis(500);
    let synced = client(&sentinels, LockClient::builder().sync_replicas(1, sync)).await;
    let first = client(&sentinels, LockClient::builder()).await;
    let second = client(&sentinels, LockClient::builder()).await;

    // The replica's link is cut (frozen, then dropped by the master) when
    // the lock is taken, so it never gets it; then the master dies and the
    // replica is promoted.
    let paused = sentinels.replica.pause();
    let dropped: Option<i64> = sentinels
        .master
        .query(redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("replica"));
    assert_eq!(dropped, Some(1), "the master dropped its replica");

    // With sync_replicas, the lock is refused (and released).
    let refused = once(&synced, "missed").await;
    assert!(
        matches!(refused, Err(LockError::NotReplicated { acked: 0, .. })),
        "{refused:?}"
    );

    // Without, it is granted.
    let options = LockOptions::new().lease(Duration::from_secs(6));
    let holder = support::Holder::start(&first, "missed", options).await;
    sentinels.master.stop();
    drop(paused);

    let killed = Instant::now();
    let mut taken = None;
    while taken.is_none() && killed.elapsed() < FAILOVER_LIMIT {
        let options = LockOptions::new().wait(Duration::ZERO);
        let body = async { Ok::<_, LockError>(killed.elapsed()) };
        match second.run_locked("missed", options, body).await {
            Ok(at) => taken = Some(at),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    let taken = taken.expect("the second owner took the lock on the promoted replica");
    let outcome = tokio::time::timeout(Duration::from_secs(15), holder.outcome())
        .await
        .expect("the first owner's call ended");
    println!(
        "without sync_replicas: the second owner took the lock {taken:?} after the kill, \
         while the first still held it; the first ended {:?} after the kill with {outcome:?}",
        killed.elapsed()
    );
    assert!(
        matches!(outcome, Err(LockError::Lost { .. })),
        "the first owner was told, late: {outcome:?}"
    );
}

/// The state letter (`h`, `w`, `f`) of the lock `key` on `server`, if it
/// answers and has one.
fn lock_state(server: &Server, key: &str) -> Option<String> {
    let value: Option<String> = server
        .query(redis::cmd("GET").arg(format!("lock:{key}")))
        .flatten();
    value
        .and_then(|v| parse_lock(&v))
        .map(|(_, state, _)| state)
}

/// How soon after the promotion the released key must be free again: well
/// under its 30 s lease.
const FREED_WITHIN: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_the_replica_missed_is_sent_again_to_the_promoted_replica() {
    let _serial = SERIAL.lock().await;
    let mut sentinels = Sentinels::start();
    let first = client(&sentinels, LockClient::builder()).await;
    let second = client(&sentinels, LockClient::builder()).await;

    // The lock is taken with the default 30 s lease and reaches the replica.
    let holder = support::Holder::start(&first, "stale", LockOptions::new()).await;
    // (Not `WAIT`: on a fresh connection, which has written nothing, it
    // proves nothing about the hold.)
    let replicated = support::eventually(Duration::from_secs(10), || {
        lock_state(&sentinels.replica, "stale").as_deref() == Some("h")
    });
    assert!(replicated.await, "the replica has the hold");

    // The replica's link is cut (frozen, then dropped by the master), so
    // the release that follows lands on the master only; then the master
    // dies and the replica, which never heard of the release, is promoted.
    let paused = sentinels.replica.pause();
    let dropped: Option<i64> = sentinels
        .master
        .query(redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("replica"));
    assert_eq!(dropped, Some(1), "the master dropped its replica");
    holder.release().await.expect("released on the master");
    let on_master = lock_state(&sentinels.master, "stale");
    assert_eq!(on_master.as_deref(), Some("f"), "free on the master");
    sentinels.master.stop();
    drop(paused);
    let on_replica = lock_state(&sentinels.replica, "stale");
    assert_eq!(on_replica.as_deref(), Some("h"), "the replica missed it");
    let promoted = wait_until(FAILOVER_LIMIT, || {
        sentinels.current_master_port() == Some(sentinels.replica.port())
            && sentinels
                .replica
                .query::<Vec<redis::Value>>(&mut redis::cmd("ROLE"))
                .and_then(|role| role.into_iter().next())
                .is_some_and(|kind| kind == redis::Value::BulkString(b"master".to_vec()))
    });
    assert!(promoted, "the replica was promoted");

    // Another client takes the key without waiting, within a few seconds
    // of the promotion: the first client sent its release again there.
    let start = Instant::now();
    let mut taken = None;
    let mut last = None;
    while taken.is_none() && start.elapsed() < FREED_WITHIN {
        let options = LockOptions::new().wait(Duration::ZERO);
        let body = async { Ok::<_, LockError>(start.elapsed()) };
        match second.run_locked("stale", options, body).await {
            Ok(at) => taken = Some(at),
            Err(error) => {
                last = Some(error);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    let state = lock_state(&sentinels.replica, "stale");
    println!(
        "after the promotion: taken {taken:?}; the key on the new master is {state:?}; \
         last refusal {last:?}"
    );
    assert!(
        taken.is_some(),
        "the key was still held {FREED_WITHIN:?} after the promotion (state {state:?}): {last:?}"
    );
}

/// The server's time in ms on `server`.
fn time_ms(server: &Server) -> Option<u64> {
    let (secs, micros): (u64, u64) = server.query(&mut redis::cmd("TIME"))?;
    Some(secs * 1000 + micros / 1000)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_at_least_past_its_lease_survives_a_failover_with_sync_replicas() {
    let _serial = SERIAL.lock().await;
    let mut sentinels = Sentinels::start();
    // A long replicas' timeout: the release below waits for the replica to
    // come back.
    let sync = Duration::from_secs(8);
    let first = client(&sentinels, LockClient::builder().sync_replicas(1, sync)).await;
    let second = client(&sentinels, LockClient::builder()).await;
    // The hold ends long after its 1 s lease, and after the failover.
    const HOLD: Duration = Duration::from_secs(12);
    let options = LockOptions::new()
        .lease(Duration::from_secs(1))
        .wait(Duration::ZERO)
        .hold_at_least(HOLD);

    let (held_tx, held_rx) = tokio::sync::oneshot::channel();
    let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
    let call = tokio::spawn(async move {
        let body = async {
            let _ = held_tx.send(lock_runtime::fencing_token().expect("held"));
            let _ = go_rx.await;
            Ok::<_, LockError>(())
        };
        first
            .run_locked("report", options, body)
            .await
            .map(|()| first)
    });
    let token = held_rx.await.expect("the body ran");
    let end = token / 1000 + HOLD.as_millis() as u64;

    // Just before the body ends the replica is frozen for 1.5 s and the
    // master drops its link: the release that keeps the hold lands on the
    // master, and reaches the replica only once it is back and has
    // reconnected, which the release's WAIT waits for. A release that did
    // not wait would return first, the master would die without passing it
    // on, and the replica, promoted after its copy's 1 s lease ran out,
    // would have nothing left for a release sent again to keep.
    let paused = sentinels.replica.pause();
    let dropped: Option<i64> = sentinels
        .master
        .query(redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("replica"));
    assert_eq!(dropped, Some(1), "the master dropped its replica");
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        drop(paused);
    });
    go_tx.send(()).expect("the body waits");
    let first = call
        .await
        .expect("call task")
        .expect("released, kept until the end");
    // Script calls on the replica from here on are the first client's
    // release, sent again once it follows the new master (nobody else
    // calls, and a replica runs no script of its master's stream).
    sentinels.replica.reset_stats();
    sentinels.master.stop();
    let promoted = wait_until(FAILOVER_LIMIT, || {
        sentinels.current_master_port() == Some(sentinels.replica.port())
            && sentinels
                .replica
                .query::<Vec<redis::Value>>(&mut redis::cmd("ROLE"))
                .and_then(|role| role.into_iter().next())
                .is_some_and(|kind| kind == redis::Value::BulkString(b"master".to_vec()))
    });
    assert!(promoted, "the replica was promoted");
    let now = time_ms(&sentinels.replica).expect("TIME");
    assert!(
        now + 1_000 < end,
        "the failover ended at {now}, too close to the hold's end {end} to check it"
    );

    // The new master keeps the hold of the first call, until the end.
    let value: Option<String> = sentinels
        .replica
        .query(redis::cmd("GET").arg("lock:report"))
        .flatten();
    let (fence, state, _) = value
        .and_then(|v| parse_lock(&v))
        .expect("the new master has the lock");
    assert_eq!(fence, token);
    assert_ne!(state, "f", "still held");
    let expires =
        support::expiry_ms(&mut sentinels.replica.connection(), "lock:report").expect("kept");
    println!(
        "on the new master the lock expires {} ms from its end",
        expires as i64 - end as i64
    );
    assert!(
        expires + 2 >= end,
        "expires at {expires}, before the end {end}"
    );

    // The release sent again to the new master recognises its own kept
    // hold: the holder stays marked as kept, and the end stays where it was.
    let scripts =
        || sentinels.replica.command_calls("evalsha") + sentinels.replica.command_calls("eval");
    assert!(
        wait_until(FAILOVER_LIMIT, || scripts() > 0),
        "the release was not sent again"
    );
    let value: Option<String> = sentinels
        .replica
        .query(redis::cmd("GET").arg("lock:report"))
        .flatten();
    let (_, _, owner) = value.and_then(|v| parse_lock(&v)).expect("still kept");
    assert!(owner.ends_with("/kept"), "held by {owner}");
    let again =
        support::expiry_ms(&mut sentinels.replica.connection(), "lock:report").expect("kept");
    assert!(
        again.abs_diff(expires) <= 2,
        "the release sent again moved the end from {expires} to {again}"
    );

    // Another client's calls are refused there until the end, then take it.
    let mut refused = 0;
    let start = Instant::now();
    let taken = loop {
        let options = LockOptions::new().wait(Duration::ZERO);
        let body = async { Ok::<_, LockError>(lock_runtime::fencing_token().expect("held")) };
        match second.run_locked("report", options, body).await {
            Ok(taken) => break taken,
            Err(error) if error.is_timeout() => refused += 1,
            // Not on the new master yet.
            Err(_) => {}
        }
        assert!(start.elapsed() < FAILOVER_LIMIT, "still not taken");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let at = taken / 1000;
    println!(
        "refused {refused} times; taken again {} ms after the end",
        at as i64 - end as i64
    );
    assert!(refused > 0, "no call found it held on the new master");
    assert!(at >= end, "taken again at {at}, before the end {end}");
    assert!(
        at <= end + 6_000,
        "taken again at {at}, long after the end {end}"
    );
    drop(first);
}
