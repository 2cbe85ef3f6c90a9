//! What tests of code that uses the attribute need: a client of their own
//! per test (`with_client`, also for tests run in parallel in one process,
//! with no `init`), and an embedded client that follows tokio's paused
//! clock.
//!
//! This binary never calls `init`: outside `with_client` the attribute has
//! no client.

use std::time::Duration;

use lock_runtime::{
    distributed_lock, with_client, HeldBy, LockClient, LockError, LockOptions, LossReason,
};
use tokio::sync::oneshot;

#[distributed_lock(key = "order:<id>")]
async fn pay(id: u64) -> Result<u64, LockError> {
    assert!(lock_runtime::fencing_token().is_some(), "inside the lock");
    Ok(id)
}

#[distributed_lock(key = "order:<id>")]
async fn hold(
    id: u64,
    held: oneshot::Sender<()>,
    done: oneshot::Receiver<()>,
) -> Result<(), LockError> {
    let _ = (id, held.send(()));
    let _ = done.await;
    Ok(())
}

#[distributed_lock(key = "job:<name>", wait = "0s")]
async fn try_job(name: &str) -> Result<(), LockError> {
    let _ = name;
    Ok(())
}

/// Two tests of this binary run at once, each on a client of its own: the
/// same key held in one is free in the other.
async fn a_test_on_its_own_client() {
    let client = LockClient::in_memory();
    with_client(client.clone(), async {
        let (held_tx, held_rx) = oneshot::channel();
        let (done_tx, done_rx) = oneshot::channel();
        let holder = tokio::spawn(with_client(client.clone(), hold(1, held_tx, done_rx)));
        held_rx.await.expect("held");
        let keys: Vec<String> = client.held().into_iter().map(|h| h.key).collect();
        assert_eq!(
            keys,
            ["lock:order:1"],
            "the spawned task, scoped too, holds it here"
        );
        // Another client of its own: the key is free there.
        let other = LockClient::in_memory();
        assert!(with_client(other, pay(1)).await.is_ok());
        done_tx.send(()).expect("holder waits");
        holder.await.expect("task").expect("held and released");
        assert!(pay(1).await.is_ok());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_test_one() {
    a_test_on_its_own_client().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_test_two() {
    a_test_on_its_own_client().await;
}

#[tokio::test]
async fn outside_the_scope_and_in_unwrapped_spawned_tasks_there_is_no_client() {
    assert!(matches!(pay(1).await, Err(LockError::NotInitialized)));
    let client = LockClient::in_memory();
    let spawned = with_client(client.clone(), async {
        tokio::spawn(pay(1)).await.expect("task")
    });
    let error = spawned.await.expect_err("no client in the spawned task");
    assert!(matches!(error, LockError::NotInitialized), "{error:?}");
    // Both ways out: `init`, or the task wrapped in `with_client`.
    let message = error.to_string();
    assert!(message.contains("lock_runtime::init"), "{message}");
    assert!(message.contains("with_client"), "{message}");
    let inner = LockClient::in_memory();
    let innermost = with_client(client.clone(), async {
        with_client(inner.clone(), async {
            let (held_tx, held_rx) = oneshot::channel();
            let (done_tx, done_rx) = oneshot::channel();
            let call = hold(2, held_tx, done_rx);
            let check = async {
                held_rx.await.expect("held");
                let held_here = (inner.held().len(), client.held().len());
                done_tx.send(()).expect("holder waits");
                held_here
            };
            let (held, held_here) = tokio::join!(call, check);
            held.expect("held");
            held_here
        })
        .await
    });
    assert_eq!(innermost.await, (1, 0), "the innermost scope wins");
}

/// `run_locked`'s future made before the scope exists (as the argument of
/// `with_client`, or of `tokio::spawn(with_client(..))`) picks its client
/// when it is first polled, inside the scope, as an annotated call does: both
/// lock on the scope's client, and exclude each other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_locked_made_before_the_scope_locks_on_the_scoped_client() {
    let client = LockClient::in_memory();
    let (held_tx, held_rx) = oneshot::channel();
    let (done_tx, done_rx) = oneshot::channel::<()>();
    let call = lock_runtime::run_locked("job:nightly", LockOptions::new(), async move {
        held_tx.send(()).expect("the test waits");
        let _ = done_rx.await;
        Ok::<_, LockError>(())
    });
    // `spawn` takes only a `Send` future.
    let holder = tokio::spawn(with_client(client.clone(), call));
    held_rx
        .await
        .expect("the body runs, on the scoped client (no `init` in this binary)");
    let info = client.inspect("job:nightly").await.expect("inspect");
    assert!(info.is_held(), "held on the scoped client: {info:?}");
    match with_client(client.clone(), try_job("nightly")).await {
        Err(error @ LockError::Timeout { .. }) => {
            assert!(
                matches!(
                    error,
                    LockError::Timeout {
                        held_by: HeldBy::ThisClient,
                        ..
                    }
                ),
                "{error:?}"
            );
            // Plain contention between two calls of one client: the message
            // says so, and only points at re-entry (HeldBy's docs).
            let message = error.to_string();
            assert!(
                message.contains(": another call of this client holds it"),
                "{message}"
            );
            assert!(!message.contains("spawned"), "{message}");
            assert!(message.contains("HeldBy::ThisClient"), "{message}");
        }
        other => panic!("an annotated call in the same scope ran beside the body: {other:?}"),
    }
    done_tx.send(()).expect("the body waits");
    holder.await.expect("task").expect("held and released");
    assert!(with_client(client.clone(), try_job("nightly"))
        .await
        .is_ok());
}

/// An embedded client built on the test's runtime, whose time is paused:
/// tokio advances the clock whenever every task waits, so these leases of
/// minutes pass at once.
fn paused_client() -> LockClient {
    LockClient::builder().on_current_runtime().in_memory()
}

#[tokio::test(start_paused = true)]
async fn under_paused_time_a_lease_runs_out_on_the_paused_clock() {
    let client = paused_client();
    let real = std::time::Instant::now();
    let options = LockOptions::new()
        .lease(Duration::from_secs(60))
        .renew(false);
    let outlived = client
        .run_locked("job", options, async {
            tokio::time::sleep(Duration::from_secs(20)).await;
            // The embedded backend counts the lease on the paused clock.
            let info = client.inspect("job").await?;
            let ttl = info.ttl.expect("held, with a lease");
            assert!(
                ttl <= Duration::from_secs(40),
                "{ttl:?} left after 20 s of 60 s"
            );
            tokio::time::sleep(Duration::from_secs(100)).await;
            Ok::<_, LockError>(())
        })
        .await;
    match outlived {
        Err(LockError::Lost { reason, .. }) => assert_eq!(reason, LossReason::Expired),
        other => panic!("{other:?}"),
    }
    assert!(
        real.elapsed() < Duration::from_secs(30),
        "{:?}",
        real.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn under_paused_time_renewals_and_waits_follow_the_paused_clock() {
    let client = paused_client();
    let real = std::time::Instant::now();
    let lease = LockOptions::new().lease(Duration::from_secs(30));
    let (held_tx, held_rx) = oneshot::channel();
    let holder = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .run_locked("report", lease, async {
                    held_tx.send(()).expect("test waits");
                    // Ten leases: renewed every 10 s of paused time.
                    tokio::time::sleep(Duration::from_secs(300)).await;
                    Ok::<_, LockError>(())
                })
                .await
        }
    });
    held_rx.await.expect("held");
    // A waiter gives up after its 2 minutes of paused time.
    let start = tokio::time::Instant::now();
    let waited = LockOptions::new().wait(Duration::from_secs(120));
    let waiter = client.run_locked("report", waited, async { Ok::<_, LockError>(()) });
    match waiter.await {
        Err(LockError::Timeout { held_by, .. }) => assert_eq!(held_by, HeldBy::ThisClient),
        other => panic!("{other:?}"),
    }
    assert!(start.elapsed() >= Duration::from_secs(120));
    holder.await.expect("task").expect("renewed for 300 s");
    assert!(
        real.elapsed() < Duration::from_secs(30),
        "{:?}",
        real.elapsed()
    );
}
