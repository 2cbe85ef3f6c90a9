//! `run_locked_outcome` and `run_locked_all_outcome` tell each way a call
//! ends apart: the body held throughout, ran to its end and then the lock
//! was found lost (its result kept), stopped part-way, or never began;
//! `run_locked` keeps its `Err(Lost)` and says where the result went.
mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lock_runtime::{FoundBy, LockClient, LockError, LockOptions, LossReason, Outcome};
use support::RedisServer;

async fn client_on(server: &RedisServer) -> LockClient {
    LockClient::connect(&server.url()).await.expect("connect")
}

/// Deletes `key` behind the holder's back, as an operator or a restart
/// without persistence would.
fn delete(server: &RedisServer, key: &str) {
    let _: i64 = redis::cmd("DEL")
        .arg(key)
        .query(&mut server.connection())
        .expect("DEL");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_held_throughout_gives_its_result() {
    let client = LockClient::in_memory();
    let outcome = client
        .run_locked_outcome("o:held", LockOptions::new(), async { Ok::<_, String>(7) })
        .await;
    assert!(matches!(outcome, Outcome::Held(Ok(7))), "{outcome:?}");
    assert!(outcome.error().is_none() && outcome.body_began());
    // A body's own error is its result too: the lock held.
    let outcome = client
        .run_locked_outcome("o:held", LockOptions::new(), async {
            Err::<u8, _>("no funds")
        })
        .await;
    assert!(
        matches!(outcome, Outcome::Held(Err("no funds"))),
        "{outcome:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_never_began_is_not_run() {
    let client = LockClient::in_memory();
    let ran = Arc::new(AtomicBool::new(false));
    // Another task of the client holds the key.
    let (held_tx, held_rx) = tokio::sync::oneshot::channel();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let holder = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .run_locked("o:busy", LockOptions::new(), async move {
                    let _ = held_tx.send(());
                    let _ = done_rx.await;
                    Ok::<_, LockError>(())
                })
                .await
        }
    });
    held_rx.await.expect("held");
    let flag = ran.clone();
    let outcome = client
        .run_locked_outcome(
            "o:busy",
            LockOptions::new().wait(Duration::ZERO),
            async move {
                flag.store(true, Ordering::SeqCst);
                Ok::<_, LockError>(())
            },
        )
        .await;
    let _ = done_tx.send(());
    holder.await.expect("joined").expect("the holder's call");
    match &outcome {
        Outcome::NotRun(error) => assert!(error.is_timeout(), "{error}"),
        other => panic!("expected NotRun, got {other:?}"),
    }
    assert!(!outcome.body_began() && outcome.body().is_none());
    assert!(!ran.load(Ordering::SeqCst), "the body ran");
    // No client: not run either.
    let outcome =
        lock_runtime::run_locked_outcome("o:none", LockOptions::new(), async { Ok::<_, ()>(()) })
            .await;
    assert!(
        matches!(outcome, Outcome::NotRun(LockError::NotInitialized)),
        "{outcome:?}"
    );
}

/// The acquire's answer comes back after the lease it asked for has run
/// out (its connection froze for longer than the lease): the hold is found
/// lost before the body's first poll, and the body never begins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_found_lost_before_the_first_poll_is_not_run() {
    let (_server, proxy, client) = support::proxied_client(Duration::from_secs(10)).await;
    let lease = Duration::from_millis(500);
    proxy.freeze();
    let proxy = Arc::new(proxy);
    // The fault: the connection stays frozen for twice the lease.
    let thaw = {
        let proxy = proxy.clone();
        std::thread::spawn(move || {
            std::thread::sleep(2 * lease);
            proxy.thaw();
        })
    };
    let ran = Arc::new(AtomicBool::new(false));
    let flag = ran.clone();
    let outcome = client
        .run_locked_outcome("o:late", LockOptions::new().lease(lease), async move {
            flag.store(true, Ordering::SeqCst);
            Ok::<_, LockError>(())
        })
        .await;
    thaw.join().expect("the thawing thread");
    match &outcome {
        Outcome::NotRun(LockError::Lost { reason, .. }) => {
            assert_eq!(*reason, LossReason::Expired, "{outcome:?}")
        }
        other => panic!("expected NotRun(Lost), got {other:?}"),
    }
    assert!(!outcome.body_began(), "{outcome:?}");
    assert!(!ran.load(Ordering::SeqCst), "the body ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_stopped_on_loss_is_stopped() {
    let client = LockClient::in_memory();
    let began = tokio::sync::Notify::new();
    let call = client.run_locked_outcome("o:stop", LockOptions::new(), async {
        began.notify_one();
        std::future::pending::<()>().await;
        Ok::<_, LockError>(())
    });
    let free = async {
        began.notified().await;
        client.force_unlock("o:stop").await.expect("freed");
    };
    let (outcome, ()) = tokio::join!(call, free);
    match &outcome {
        Outcome::Stopped(LockError::Lost { found_by, .. }) => {
            assert_eq!(*found_by, FoundBy::ForceUnlock)
        }
        other => panic!("expected Stopped, got {other:?}"),
    }
    assert!(outcome.body_began() && outcome.body().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_ran_to_its_end_keeps_its_result_when_the_release_finds_the_lock_gone() {
    let server = RedisServer::start();
    let client = client_on(&server).await;
    let outcome = client
        .run_locked_outcome("o:gone", LockOptions::new(), async {
            delete(&server, "lock:o:gone");
            Ok::<_, LockError>("debit applied, credit failed")
        })
        .await;
    match &outcome {
        Outcome::RanButLost {
            body: Ok(said),
            error: LockError::Lost { found_by, .. },
        } => {
            assert_eq!(*said, "debit applied, credit failed");
            assert_eq!(*found_by, FoundBy::Release);
        }
        other => panic!("expected RanButLost, got {other:?}"),
    }
    // run_locked keeps its answer, and says where the result went.
    let error = client
        .run_locked("o:gone", LockOptions::new(), async {
            delete(&server, "lock:o:gone");
            Ok::<_, LockError>(1)
        })
        .await
        .expect_err("lost at the release");
    assert!(
        matches!(
            error,
            LockError::Lost {
                reason: LossReason::Gone,
                found_by: FoundBy::Release,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("run_locked_outcome"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_that_ran_to_its_end_keeps_its_result_when_a_release_finds_a_key_gone() {
    let server = RedisServer::start();
    let client = client_on(&server).await;
    let keys = ["acct:{1}", "acct:{2}"];
    let outcome = client
        .run_locked_all_outcome(keys, LockOptions::new(), async {
            delete(&server, "lock:acct:{2}");
            Ok::<_, LockError>(40)
        })
        .await;
    match &outcome {
        Outcome::RanButLost {
            body: Ok(40),
            error: LockError::Lost { key, found_by, .. },
        } => {
            assert_eq!(key, "lock:acct:{2}");
            assert_eq!(*found_by, FoundBy::Release);
        }
        other => panic!("expected RanButLost, got {other:?}"),
    }
    // Held throughout, the set gives the body's result.
    let outcome = lock_runtime::with_client(
        client.clone(),
        lock_runtime::run_locked_all_outcome(keys, LockOptions::new(), async { Ok::<_, ()>(41) }),
    )
    .await;
    assert!(matches!(outcome, Outcome::Held(Ok(41))), "{outcome:?}");
}

/// A function that declares `Outcome<T, E>` gets the whole answer from the
/// attribute; its body returns `Result<T, E>` as any locked body does.
#[lock_runtime::distributed_lock(key = "attr:<id>", client = client)]
async fn settle(client: &LockClient, id: u32, erase: Option<&RedisServer>) -> Outcome<u32, String> {
    if let Some(server) = erase {
        delete(server, &format!("lock:attr:{id}"));
    }
    if id == 0 {
        return Err("no account 0".to_owned());
    }
    Ok(id * 10)
}

#[lock_runtime::distributed_lock(keys = ["attr:<from>", "attr:<to>"])]
async fn move_all(from: u32, to: u32) -> lock_runtime::Outcome<(u32, u32), LockError> {
    Ok((from, to))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attribute_gives_the_outcome_to_a_function_that_declares_it() {
    let server = RedisServer::start();
    let client = client_on(&server).await;
    assert!(matches!(
        settle(&client, 4, None).await,
        Outcome::Held(Ok(40))
    ));
    let refused = settle(&client, 0, None).await;
    assert!(
        matches!(&refused, Outcome::Held(Err(e)) if e == "no account 0"),
        "{refused:?}"
    );
    match settle(&client, 5, Some(&server)).await {
        Outcome::RanButLost {
            body: Ok(50),
            error,
        } => assert!(error.is_lost(), "{error}"),
        other => panic!("expected RanButLost, got {other:?}"),
    }
    let moved = lock_runtime::with_client(client.clone(), move_all(1, 2)).await;
    assert!(matches!(moved, Outcome::Held(Ok((1, 2)))), "{moved:?}");
    // Without a client: not run, and no From<LockError> needed.
    assert!(matches!(
        move_all(3, 4).await,
        Outcome::NotRun(LockError::NotInitialized)
    ));
}
