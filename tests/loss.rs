//! A lock that disappears while held is reported lost, and the body stops.
mod support;

use std::time::Duration;

use lock_runtime::{FoundBy, LockClient, LockError, LockOptions, LossReason};
use support::{Holder, RedisServer};
use tokio::time::Instant;

/// The message, key, reason and step of a `Lost` error; panics on anything
/// else.
fn lost_parts<T: std::fmt::Debug>(
    result: Result<T, LockError>,
) -> (String, String, LossReason, FoundBy) {
    match result {
        Err(error @ LockError::Lost { .. }) => {
            let shown = error.to_string();
            let LockError::Lost {
                key,
                reason,
                found_by,
                ..
            } = error
            else {
                unreachable!()
            };
            (shown, key, reason, found_by)
        }
        other => panic!("expected Lost, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_that_finds_the_lock_gone_stops_the_body() {
    let server = RedisServer::start();
    let client = LockClient::builder()
        .default_lease(Duration::from_millis(600))
        .connect(&server.url())
        .await
        .expect("connect");
    let holder = Holder::start(&client, "vanishing", LockOptions::new()).await;
    // Someone deletes the lock and another owner takes the key.
    let _: () = redis::cmd("DEL")
        .arg("lock:vanishing")
        .query(&mut server.connection())
        .expect("DEL");
    let _: () = redis::cmd("SET")
        .arg("lock:vanishing")
        .arg("L1:1:h:intruder")
        .query(&mut server.connection())
        .expect("SET");
    let deleted = Instant::now();
    let result = holder.outcome().await;
    let (shown, key, reason, found_by) = lost_parts(result);
    assert_eq!(key, "lock:vanishing");
    assert_eq!(reason, LossReason::Taken);
    assert_eq!(found_by, FoundBy::Renewal);
    assert!(shown.contains("a renewal found"), "{shown}");
    // Found at the next renewal, a third of the lease later.
    assert!(
        deleted.elapsed() < Duration::from_secs(3),
        "{:?}",
        deleted.elapsed()
    );
    // The release touched only its own hold: the intruder's stays.
    assert_eq!(server.owners("lock:vanishing"), [("intruder".into(), 1)]);
}

/// The lock vanishes and the body ends before any renewal: the release finds
/// it gone, and the call reports the loss instead of success.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_finds_the_lock_gone_reports_the_loss() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.expect("connect");
    let result = client
        .run_locked("gone-early", LockOptions::new(), async {
            let _: () = redis::cmd("DEL")
                .arg("lock:gone-early")
                .query(&mut server.connection())
                .expect("DEL");
            Ok::<_, LockError>("the body finished")
        })
        .await;
    let (shown, key, reason, found_by) = lost_parts(result);
    assert_eq!(key, "lock:gone-early");
    // Nothing names who freed it, and nobody holds it: gone.
    assert_eq!(reason, LossReason::Gone);
    assert_eq!(found_by, FoundBy::Release);
    // No renewal ran: the message says the release found it.
    assert!(shown.contains("the release"), "{shown}");
    assert!(!shown.contains("renewal"), "{shown}");
}

/// A restart of a Redis without persistence forgets every lock: holders
/// find out at their next renewal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_forgotten_by_a_restart_are_found_lost_at_the_next_renewal() {
    let mut server = RedisServer::start();
    let client = LockClient::builder()
        .default_lease(Duration::from_millis(900))
        .connect(&server.url())
        .await
        .expect("connect");
    let holders = [
        Holder::start(&client, "restart-1", LockOptions::new()).await,
        Holder::start(&client, "restart-2", LockOptions::new()).await,
    ];
    server.restart();
    let restarted = Instant::now();
    for holder in holders {
        match holder.outcome().await {
            Err(LockError::Lost { .. }) => {}
            other => panic!("expected Lost, got {other:?}"),
        }
    }
    assert!(
        restarted.elapsed() < Duration::from_secs(5),
        "{:?}",
        restarted.elapsed()
    );
}

/// A loss wakes this client's waiters at once: the key is free in Redis,
/// and the head must not sleep until the holder's lease would have ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loss_wakes_the_line_at_once() {
    let server = RedisServer::start();
    let client = LockClient::builder()
        .default_lease(Duration::from_secs(9))
        .connect(&server.url())
        .await
        .expect("connect");
    let holder = Holder::start(&client, "dropped", LockOptions::new()).await;
    let waiter = tokio::spawn({
        let client = client.clone();
        async move {
            let forever = LockOptions::new().wait(Duration::MAX);
            client
                .run_locked("dropped", forever, async {
                    Ok::<_, LockError>(Instant::now())
                })
                .await
        }
    });
    // The waiter has tried at once and again from the head of its line
    // (2 acquires after the holder's), and is subscribed: it now sleeps until
    // the holder's lease would end. The subscription's confirmation wakes it
    // for one more try, which the settling pause lets pass.
    let asleep = support::eventually(Duration::from_secs(5), || {
        let numsub: (String, i64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg("lock:dropped")
            .query(&mut server.connection())
            .expect("PUBSUB NUMSUB");
        server.command_calls("evalsha") >= 3 && numsub.1 == 1
    })
    .await;
    assert!(asleep);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        server.lock_value("lock:dropped").map(|v| v.1),
        Some("w".into())
    );
    let _: () = redis::cmd("DEL")
        .arg("lock:dropped")
        .query(&mut server.connection())
        .expect("DEL");
    // Found at the next renewal (3 s), long before the 9 s lease.
    let lost = holder.outcome().await;
    assert!(matches!(lost, Err(LockError::Lost { .. })), "{lost:?}");
    let found = Instant::now();
    let taken = waiter.await.expect("waiter").expect("taken");
    assert!(
        taken.saturating_duration_since(found) < Duration::from_secs(2),
        "{:?}",
        taken.saturating_duration_since(found)
    );
}

/// A restart erases the lock while the body runs, before any renewal; the
/// first command on the old connection (the release) fails: it is sent
/// again, finds the lock gone, and the call reports the loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_after_a_restart_reports_the_loss() {
    let mut server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.expect("connect");
    let result = client
        .run_locked("restarted", LockOptions::new(), async {
            server.restart();
            Ok::<_, LockError>("the body finished")
        })
        .await;
    match result {
        Err(LockError::Lost { reason, .. }) => assert_eq!(reason, LossReason::Gone),
        other => panic!("expected Lost, got {other:?}"),
    }
}

/// Redis is gone when the body ends: whether the lock was held to the end is
/// unknown, which is not a success.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_cannot_reach_redis_is_no_success() {
    let mut server = RedisServer::start();
    let client = LockClient::builder()
        .connect_timeout(Duration::from_millis(300))
        .command_timeout(Duration::from_millis(300))
        .connect(&server.url())
        .await
        .expect("connect");
    let result = client
        .run_locked("unreachable", LockOptions::new(), async {
            server.stop();
            Ok::<_, LockError>(())
        })
        .await;
    match result {
        Err(LockError::Lost { reason, .. }) => assert_eq!(reason, LossReason::Unconfirmed),
        other => panic!("expected Lost, got {other:?}"),
    }
}

/// Runs a call on `key` whose release's answer is lost after Redis ran it
/// (the connection drops every answer from the body's end on, and closes
/// once the release ran): the release is sent again on a new connection.
/// `between` runs on a connection of the test's own after the first send
/// freed the lock and before the second is sent. With `contended`, the
/// owner `other:1` asks for the lock while the body holds it (and is
/// refused), as a waiter would.
async fn release_with_a_lost_answer(
    key: &'static str,
    contended: bool,
    between: impl FnOnce(&mut redis::Connection) + Send + 'static,
) -> (
    lock_runtime::Outcome<&'static str, LockError>,
    lock_testkit::Server,
) {
    let (server, proxy, client) = support::proxied_client(Duration::from_secs(5)).await;
    let proxy = std::sync::Arc::new(proxy);
    let (muted, when_muted) = std::sync::mpsc::channel::<()>();
    // Once Redis ran the release (the lock is free there), the connection
    // closes, well within the command timeout: the client sees a dropped
    // connection, not a timeout, and makes a new one.
    let cut = {
        let (proxy, port) = (proxy.clone(), server.port());
        std::thread::spawn(move || {
            if when_muted.recv().is_err() {
                return;
            }
            let mut con = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
                .and_then(|c| c.get_connection())
                .expect("a connection of the test's own");
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while std::time::Instant::now() < deadline {
                let value: Option<String> = redis::cmd("GET")
                    .arg(format!("lock:{key}"))
                    .query(&mut con)
                    .expect("GET");
                if value.is_some_and(|v| v.contains(":f:")) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            between(&mut con);
            proxy.cut();
        })
    };
    let port = server.port();
    let outcome = client
        .run_locked_outcome(key, LockOptions::new(), async {
            if contended {
                let mut con = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
                    .and_then(|c| c.get_connection())
                    .expect("a connection of the test's own");
                assert!(other_acquires(&mut con, key) < 0, "the body holds it");
            }
            proxy.mute_answers();
            let _ = muted.send(());
            Ok::<_, LockError>("the body finished")
        })
        .await;
    cut.join().expect("the cutting thread");
    (outcome, server)
}

/// The release's answer is lost after Redis ran it; sent again, the
/// release finds the freed value naming its own hold. The lock was held to
/// the end and freed by that first send: the call is a success.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_whose_answer_is_lost_learns_that_its_first_send_freed_it() {
    let (outcome, server) = release_with_a_lost_answer("muted", false, |_| {}).await;
    let lock_runtime::Outcome::Held(body) = outcome else {
        panic!("expected Held, got {outcome:?}");
    };
    assert_eq!(body.expect("the body's result"), "the body finished");
    let value: Option<String> = redis::cmd("GET")
        .arg("lock:muted")
        .query(&mut server.connection())
        .expect("GET");
    let value = value.expect("the freed lock keeps its fence");
    assert!(value.contains(":f:"), "{value}");
}

/// acquire.lua for the owner `other:1` on `lock:<key>`: its answer.
fn other_acquires(con: &mut redis::Connection, key: &str) -> i64 {
    let source = lock_runtime::__private::script_source("acquire").expect("acquire.lua");
    redis::Script::new(source)
        .key(format!("lock:{key}"))
        .arg("other:1")
        .arg(30_000)
        .invoke(con)
        .expect("another owner's acquire")
}

/// As above, but another owner waits for the lock, and takes it between
/// the two sends: the record of who freed it outlives that acquire, and
/// the release sent again still learns that its first send freed it: not a
/// taking.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_sent_again_after_a_waiter_took_the_lock_is_not_called_taken() {
    let (outcome, server) = release_with_a_lost_answer("muted-taken", true, |con| {
        let token = other_acquires(con, "muted-taken");
        assert!(token > 0, "the other owner took the freed lock: {token}");
    })
    .await;
    let lock_runtime::Outcome::Held(body) = outcome else {
        panic!("expected Held, got {outcome:?}");
    };
    assert_eq!(body.expect("the body's result"), "the body finished");
    let mut con = server.connection();
    let value: String = redis::cmd("GET")
        .arg("lock:muted-taken")
        .query(&mut con)
        .expect("GET");
    assert!(
        value.ends_with(":h:other:1"),
        "the other owner holds it: {value}"
    );
    let freed: String = redis::cmd("GET")
        .arg("lock:muted-taken:freed{lock:muted-taken}")
        .query(&mut con)
        .expect("the record of who freed it");
    assert!(!freed.starts_with('!'), "freed by its own release: {freed}");
}

/// The same without a waiter: a caller that did not wait takes the freed
/// lock between the two sends. Nobody waited, so no record of who freed it
/// was kept (an uncontended key taken again writes none), and the release
/// sent again cannot tell its own first send from a taking: it says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_sent_again_after_an_uncontended_free_was_taken_says_it_cannot_tell() {
    let (outcome, _server) = release_with_a_lost_answer("muted-fresh", false, |con| {
        let token = other_acquires(con, "muted-fresh");
        assert!(token > 0, "the other owner took the freed lock: {token}");
    })
    .await;
    let lock_runtime::Outcome::RanButLost { body, error } = outcome else {
        panic!("expected RanButLost, got {outcome:?}");
    };
    assert_eq!(body.expect("the body's result"), "the body finished");
    assert!(
        matches!(
            error,
            LockError::Lost {
                reason: LossReason::ReleaseUnanswered,
                found_by: FoundBy::Release,
                ..
            }
        ),
        "{error:?}"
    );
}

/// The body returns its own error, but the release finds the lock gone: the
/// loss wins, since it says more about what the body did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loss_found_at_the_release_wins_over_the_bodys_error() {
    #[derive(Debug)]
    enum AppError {
        Lock(LockError),
        Mine,
    }
    impl From<LockError> for AppError {
        fn from(e: LockError) -> Self {
            AppError::Lock(e)
        }
    }
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.expect("connect");
    let result: Result<(), AppError> = client
        .run_locked("erred", LockOptions::new(), async {
            let _: () = redis::cmd("DEL")
                .arg("lock:erred")
                .query(&mut server.connection())
                .expect("DEL");
            Err(AppError::Mine)
        })
        .await;
    match result {
        Err(AppError::Lock(LockError::Lost { reason, .. })) => {
            assert_eq!(reason, LossReason::Gone)
        }
        other => panic!("expected Lost, got {other:?}"),
    }
}

/// A body without renewal that outlives its lease in one poll (a long
/// computation, say) lost the lock by expiry, not because it was taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_outlives_its_lease_without_renewal_reports_expired() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.expect("connect");
    let options = LockOptions::new()
        .lease(Duration::from_millis(200))
        .renew(false);
    let result = client
        .run_locked("outlived", options, async {
            std::thread::sleep(Duration::from_millis(400));
            Ok::<_, LockError>(())
        })
        .await;
    match result {
        Err(LockError::Lost { reason, .. }) => assert_eq!(reason, LossReason::Expired),
        other => panic!("expected Lost, got {other:?}"),
    }
}
