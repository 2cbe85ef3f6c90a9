//! The lock kinds end to end on the embedded backend: readers together, a
//! writer alone, a counted lock's bound, a key of one kind refusing
//! another, and the re-entry rules of nested calls.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lock_runtime::{KindFoundBy, LockClient, LockError, LockMode, LockOptions};
use tokio::sync::{oneshot, Barrier, Notify};
use tokio::task::JoinSet;
use tokio::time::{timeout, Instant};

/// Long enough for any step here; a test that needs longer is stuck.
const STUCK: Duration = Duration::from_secs(20);

fn read() -> LockOptions {
    LockOptions::new().mode(LockMode::Read).wait(STUCK)
}

fn write() -> LockOptions {
    LockOptions::new().mode(LockMode::Write).wait(STUCK)
}

fn permits(n: u32) -> LockOptions {
    LockOptions::new().permits(n).wait(STUCK)
}

/// How many bodies are inside, and the most that ever were at once.
#[derive(Default)]
struct Occupancy {
    inside: AtomicUsize,
    most: AtomicUsize,
}

impl Occupancy {
    /// One more body inside: how many are now.
    fn enter(&self) -> usize {
        let now = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        now
    }

    fn leave(&self) {
        self.inside.fetch_sub(1, Ordering::SeqCst);
    }

    fn now(&self) -> usize {
        self.inside.load(Ordering::SeqCst)
    }

    fn most(&self) -> usize {
        self.most.load(Ordering::SeqCst)
    }
}

/// Waits for every task of `tasks`, failing on any error or panic.
async fn join_all(mut tasks: JoinSet<Result<(), LockError>>) {
    let all = async {
        while let Some(done) = tasks.join_next().await {
            done.expect("the task ran to its end")
                .expect("the call worked");
        }
    };
    timeout(STUCK, all).await.expect("the tasks ended");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readers_are_inside_together() {
    const READERS: usize = 6;
    let client = LockClient::in_memory();
    let occupancy = Arc::new(Occupancy::default());
    // Every reader waits inside until all are: only readers that share the
    // key get past it.
    let all_inside = Arc::new(Barrier::new(READERS));
    let mut tasks = JoinSet::new();
    for _ in 0..READERS {
        let (client, occupancy, all_inside) =
            (client.clone(), occupancy.clone(), all_inside.clone());
        tasks.spawn(async move {
            client
                .run_locked("shared", read(), async {
                    occupancy.enter();
                    all_inside.wait().await;
                    occupancy.leave();
                    Ok(())
                })
                .await
        });
    }
    join_all(tasks).await;
    assert_eq!(occupancy.most(), READERS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_writer_waits_for_the_readers_inside_and_new_readers_wait_for_it() {
    let client = LockClient::in_memory();
    let writer_in = Arc::new(AtomicBool::new(false));
    let (inside_tx, inside) = oneshot::channel();
    let leave = Arc::new(Notify::new());
    let first_reader = {
        let (client, leave, writer_in) = (client.clone(), leave.clone(), writer_in.clone());
        tokio::spawn(async move {
            client
                .run_locked("rw", read(), async {
                    inside_tx.send(()).expect("the test listens");
                    leave.notified().await;
                    assert!(!writer_in.load(Ordering::SeqCst), "a writer among readers");
                    Ok::<_, LockError>(())
                })
                .await
        })
    };
    inside.await.expect("the reader is inside");
    // A writer now waits behind the reader.
    let writer = {
        let (client, writer_in) = (client.clone(), writer_in.clone());
        tokio::spawn(async move {
            client
                .run_locked("rw", write(), async {
                    writer_in.store(true, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    writer_in.store(false, Ordering::SeqCst);
                    Ok::<_, LockError>(())
                })
                .await
        })
    };
    // Once its claim is kept, a new reader that does not wait is turned
    // away, although only a reader is inside.
    let once = read().wait(Duration::ZERO);
    let turned_away = async {
        loop {
            match client
                .run_locked("rw", once, async { Ok::<_, LockError>(()) })
                .await
            {
                Ok(()) => tokio::task::yield_now().await,
                Err(error) if error.is_timeout() => break,
                Err(error) => panic!("{error}"),
            }
        }
    };
    timeout(STUCK, turned_away)
        .await
        .expect("the writer's claim");
    assert!(!writer_in.load(Ordering::SeqCst));
    leave.notify_one();
    first_reader.await.unwrap().expect("the reader's call");
    timeout(STUCK, writer)
        .await
        .expect("the writer got in")
        .unwrap()
        .expect("the writer's call");
    client
        .run_locked("rw", once, async { Ok::<_, LockError>(()) })
        .await
        .expect("readers enter again");
}

/// Runs `body()` under `key` once: waiting in the client's line, or, when
/// `hammer`, trying again at once after every refusal (so that the backend,
/// not the client's line, decides who enters).
async fn once_under<F, Fut>(
    client: &LockClient,
    key: &str,
    options: LockOptions,
    hammer: bool,
    body: F,
) -> Result<(), LockError>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<(), LockError>>,
{
    if !hammer {
        return client.run_locked(key, options, body()).await;
    }
    let options = options.wait(Duration::ZERO);
    loop {
        match client.run_locked(key, options, body()).await {
            Err(error) if error.is_timeout() => tokio::task::yield_now().await,
            done => return done,
        }
    }
}

/// Stays inside a body for a few polls, with others running meanwhile.
async fn linger() {
    for _ in 0..5 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_writer_never_overlaps_anyone() {
    let client = LockClient::in_memory();
    let readers = Arc::new(Occupancy::default());
    let writers = Arc::new(Occupancy::default());
    let overlap = Arc::new(AtomicBool::new(false));
    let mut tasks = JoinSet::new();
    for task in 0..8 {
        let (client, readers, writers, overlap) = (
            client.clone(),
            readers.clone(),
            writers.clone(),
            overlap.clone(),
        );
        let writes = task % 3 == 0;
        let hammer = task % 2 == 1;
        tasks.spawn(async move {
            let (options, mine, others) = if writes {
                (write(), &writers, &readers)
            } else {
                (read(), &readers, &writers)
            };
            let body = || async {
                let with_me = mine.enter();
                if others.now() > 0 || (writes && with_me > 1) {
                    overlap.store(true, Ordering::SeqCst);
                }
                linger().await;
                if others.now() > 0 || (writes && mine.now() > 1) {
                    overlap.store(true, Ordering::SeqCst);
                }
                mine.leave();
                Ok(())
            };
            for _ in 0..10 {
                once_under(&client, "mixed", options, hammer, body).await?;
            }
            Ok(())
        });
    }
    join_all(tasks).await;
    assert!(
        !overlap.load(Ordering::SeqCst),
        "a writer overlapped another holder"
    );
    assert_eq!(writers.most(), 1);
    assert!(readers.most() >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_permits_are_never_exceeded_by_eight_tasks() {
    let client = LockClient::in_memory();
    let occupancy = Arc::new(Occupancy::default());
    let mut tasks = JoinSet::new();
    for task in 0..8 {
        let (client, occupancy) = (client.clone(), occupancy.clone());
        let hammer = task % 2 == 1;
        tasks.spawn(async move {
            let body = || async {
                occupancy.enter();
                linger().await;
                occupancy.leave();
                Ok(())
            };
            for _ in 0..10 {
                once_under(&client, "pool", permits(3), hammer, body).await?;
            }
            Ok(())
        });
    }
    join_all(tasks).await;
    assert!(occupancy.most() <= 3, "{} permits taken", occupancy.most());
    assert!(occupancy.most() >= 2, "{} permits taken", occupancy.most());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_holders_fill_three_permits() {
    let client = LockClient::in_memory();
    // Three holders and the test meet inside; the holders then stay until
    // told to leave.
    let all_inside = Arc::new(Barrier::new(4));
    let leave = Arc::new(Notify::new());
    let mut tasks = JoinSet::new();
    for _ in 0..3 {
        let (client, all_inside, leave) = (client.clone(), all_inside.clone(), leave.clone());
        tasks.spawn(async move {
            client
                .run_locked("three", permits(3), async {
                    let leaving = leave.notified();
                    all_inside.wait().await;
                    leaving.await;
                    Ok(())
                })
                .await
        });
    }
    timeout(STUCK, all_inside.wait())
        .await
        .expect("three inside");
    let fourth = client
        .run_locked("three", permits(3).wait(Duration::ZERO), async {
            Ok::<_, LockError>(())
        })
        .await;
    assert!(
        matches!(fourth, Err(LockError::Timeout { .. })),
        "{fourth:?}"
    );
    leave.notify_waiters();
    join_all(tasks).await;
    client
        .run_locked("three", permits(3).wait(Duration::ZERO), async {
            Ok::<_, LockError>(())
        })
        .await
        .expect("a permit is free again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_on_a_key_held_by_readers_is_a_kind_mismatch() {
    // Without the kind check, which would find the mismatch before the
    // backend does (`tests/kind_check.rs`).
    let client = LockClient::builder().kind_check(false).in_memory();
    let (inside_tx, inside) = oneshot::channel();
    let leave = Arc::new(Notify::new());
    let reader = {
        let (client, leave) = (client.clone(), leave.clone());
        tokio::spawn(async move {
            client
                .run_locked("kinds", read(), async {
                    let leaving = leave.notified();
                    inside_tx.send(()).expect("the test listens");
                    leaving.await;
                    Ok::<_, LockError>(())
                })
                .await
        })
    };
    inside.await.expect("the reader is inside");
    let started = Instant::now();
    let counted = client
        .run_locked("kinds", permits(2), async { Ok::<_, LockError>(()) })
        .await;
    match counted {
        Err(LockError::KindMismatch {
            key,
            asked,
            found,
            found_by,
            ..
        }) => {
            assert_eq!(found_by, KindFoundBy::Backend);
            assert!(key.ends_with("kinds"), "{key}");
            assert!(asked.contains("permits = 2"), "{asked}");
            assert!(found.contains("readers"), "{found}");
        }
        other => panic!("a kind mismatch, not {other:?}"),
    }
    assert!(started.elapsed() < STUCK / 2, "the mismatch did not wait");
    leave.notify_one();
    reader.await.unwrap().expect("the reader's call");
    // Free again, the key takes any kind.
    client
        .run_locked("kinds", permits(2), async { Ok::<_, LockError>(()) })
        .await
        .expect("a free key takes permits");
}

#[tokio::test]
async fn a_read_nested_under_a_write_re_enters() {
    let client = LockClient::in_memory();
    let once = read().wait(Duration::ZERO);
    let nested = client
        .run_locked("nest", write(), async {
            client
                .run_locked("nest", once, async { Ok::<_, LockError>(7) })
                .await
        })
        .await;
    assert_eq!(nested.expect("re-entered"), 7);
}

#[tokio::test]
async fn a_write_nested_under_a_read_fails_at_once() {
    let client = LockClient::in_memory();
    let started = Instant::now();
    let nested = client
        .run_locked("upgrade", read(), async {
            client
                .run_locked("upgrade", write(), async { Ok::<_, LockError>(()) })
                .await
        })
        .await;
    assert!(
        matches!(nested, Err(LockError::Invalid { .. })),
        "{nested:?}"
    );
    assert!(started.elapsed() < STUCK / 2, "the nested write waited");
    // The read hold was given back.
    client
        .run_locked("upgrade", write().wait(Duration::ZERO), async {
            Ok::<_, LockError>(())
        })
        .await
        .expect("free after the read");
}

#[tokio::test]
async fn permits_nested_under_the_same_permits_re_enter() {
    let client = LockClient::in_memory();
    // One permit: a second hold would have to wait; the nested call shares
    // the outer one's.
    let once = permits(1).wait(Duration::ZERO);
    let nested = client
        .run_locked("one", permits(1), async {
            client
                .run_locked("one", once, async { Ok::<_, LockError>(1) })
                .await
        })
        .await;
    assert_eq!(nested.expect("re-entered"), 1);
    // Another count around the call is another kind.
    let other = client
        .run_locked("one", permits(1), async {
            client
                .run_locked("one", permits(2), async { Ok::<_, LockError>(()) })
                .await
        })
        .await;
    assert!(
        matches!(other, Err(LockError::KindMismatch { .. })),
        "{other:?}"
    );
}
