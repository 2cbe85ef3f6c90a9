//! The lock kinds through the public API, on Redis and the embedded
//! backend: readers share and writers exclude, permits count, a fair line
//! keeps arrival order, and the re-entry rules of each kind.
mod support;

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use lock_runtime::{KindFoundBy, LockClient, LockError, LockMode, LockOptions};
use tokio::task::JoinHandle;

/// Who is inside a key's critical section now, and the most ever.
#[derive(Default)]
struct Inside {
    readers: AtomicUsize,
    writers: AtomicUsize,
    most_readers: AtomicUsize,
    overlaps: AtomicUsize,
}

impl Inside {
    fn enter(&self, writer: bool) {
        if writer {
            let writers = self.writers.fetch_add(1, Ordering::SeqCst);
            if writers > 0 || self.readers.load(Ordering::SeqCst) > 0 {
                self.overlaps.fetch_add(1, Ordering::SeqCst);
            }
        } else {
            let readers = self.readers.fetch_add(1, Ordering::SeqCst) + 1;
            self.most_readers.fetch_max(readers, Ordering::SeqCst);
            if self.writers.load(Ordering::SeqCst) > 0 {
                self.overlaps.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    fn leave(&self, writer: bool) {
        let count = if writer { &self.writers } else { &self.readers };
        count.fetch_sub(1, Ordering::SeqCst);
    }
}

fn read() -> LockOptions {
    LockOptions::new()
        .mode(LockMode::Read)
        .wait(Duration::from_secs(20))
}

fn write() -> LockOptions {
    LockOptions::new()
        .mode(LockMode::Write)
        .wait(Duration::from_secs(20))
}

/// A body that records itself inside for `hold`.
async fn inside(client: &LockClient, options: LockOptions, seen: &Inside, hold: Duration) {
    let writer = options.lock_mode() == LockMode::Write;
    client
        .run_locked("doc", options, async {
            seen.enter(writer);
            tokio::time::sleep(hold).await;
            seen.leave(writer);
            Ok::<_, LockError>(())
        })
        .await
        .expect("locked call");
}

/// A holder of `key` on `client`, inside its body when this returns; it
/// leaves when the sender is used or dropped, and its task answers when it
/// left.
async fn hold_inside(
    client: &LockClient,
    key: &str,
    options: LockOptions,
) -> (
    tokio::task::JoinHandle<Result<Instant, LockError>>,
    tokio::sync::oneshot::Sender<()>,
) {
    let (entered_tx, entered_rx) = tokio::sync::oneshot::channel();
    let (leave_tx, leave_rx) = tokio::sync::oneshot::channel::<()>();
    let (client, key) = (client.clone(), key.to_owned());
    let holder = tokio::spawn(async move {
        client
            .run_locked(&key, options, async {
                let _ = entered_tx.send(());
                let _ = leave_rx.await;
                Ok::<_, LockError>(Instant::now())
            })
            .await
    });
    entered_rx.await.expect("the holder is inside");
    (holder, leave_tx)
}

/// Runs `call` in a task of its own, and answers once it waits in its
/// client's line for `key` (a call of `env.client`). Its first poll, here,
/// puts it there when it queues behind waiters of its client without asking,
/// and on the embedded backend in any case (its requests are answered in
/// place); on Redis, a call that asks first is in line when the client
/// listens for the key's releases, which it starts when its first waiter
/// joins the line.
async fn start_waiting<F>(env: &support::Env, key: &str, call: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let mut call = Box::pin(call);
    let first = std::future::poll_fn(|cx| Poll::Ready(call.as_mut().poll(cx).is_pending()));
    assert!(first.await, "the call on {key} ended at its first poll");
    let call = tokio::spawn(call);
    if let Some(server) = &env.server {
        let channel = format!("lock:{key}");
        let listened = support::eventually(Duration::from_secs(10), || {
            let (_, listeners): (String, u64) = redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg(&channel)
                .query(&mut server.connection())
                .expect("PUBSUB NUMSUB");
            listeners > 0
        });
        assert!(listened.await, "nobody waits on {key}");
    }
    call
}

/// A call on `key` of `client` with `options`, whose body tells when it is
/// inside and leaves when the sender is used or dropped.
fn call_holding(
    client: &LockClient,
    key: &str,
    options: LockOptions,
) -> (
    impl Future<Output = Result<(), LockError>> + Send + 'static,
    tokio::sync::oneshot::Receiver<()>,
    tokio::sync::oneshot::Sender<()>,
) {
    let (entered_tx, entered_rx) = tokio::sync::oneshot::channel();
    let (leave_tx, leave_rx) = tokio::sync::oneshot::channel::<()>();
    let (client, key) = (client.clone(), key.to_owned());
    let call = async move {
        client
            .run_locked(&key, options, async {
                let _ = entered_tx.send(());
                let _ = leave_rx.await;
                Ok::<_, LockError>(())
            })
            .await
    };
    (call, entered_rx, leave_tx)
}

/// A call on `key` of `client` with `options` and an empty body, which
/// answers when it got in.
fn call_once(
    client: &LockClient,
    key: &str,
    options: LockOptions,
) -> impl Future<Output = Result<Instant, LockError>> + Send + 'static {
    let (client, key) = (client.clone(), key.to_owned());
    async move {
        client
            .run_locked(&key, options, async { Ok::<_, LockError>(Instant::now()) })
            .await
    }
}

/// The other kinds than fair, each with a wait far beyond what the tests
/// allow them.
fn unfair_kinds() -> [(&'static str, LockOptions); 3] {
    let long = Duration::from_secs(30);
    [
        ("plain", LockOptions::new().wait(long)),
        ("read", read().wait(long)),
        ("permits", LockOptions::new().permits(2).wait(long)),
    ]
}

on_both_backends! {
    /// A plain, read or permit call that queued behind a fair waiter of its
    /// own client, on a key that this client holds fair, fails with
    /// `KindMismatch` as soon as the fair hold is released (the fair waiter
    /// goes next), not at the end of its 30 s wait: the fair release's
    /// notice names only the fair waiter. The client's kind check is off,
    /// so that the calls of other kinds reach the backend's line.
    async fn a_call_of_another_kind_behind_a_fair_waiter_hears_of_the_fair_release(
        env: Env = LockClient::builder().kind_check(false)
    ) {
        let fair = LockOptions::new().fair(true).wait(Duration::from_secs(30));
        for (name, options) in unfair_kinds() {
            let key = format!("fair-then-{name}");
            let (holder, leave_holder) = hold_inside(&env.client, &key, fair).await;
            let (waiter, waiter_in, waiter_leave) = call_holding(&env.client, &key, fair);
            let waiter = start_waiting(&env, &key, waiter).await;
            let other = start_waiting(&env, &key, call_once(&env.client, &key, options)).await;
            let _ = leave_holder.send(());
            holder.await.expect("task").expect("holder");
            let outcome = tokio::time::timeout(Duration::from_secs(5), other)
                .await
                .unwrap_or_else(|_| panic!("{name}: still waiting 5 s after the fair hold left"))
                .expect("task");
            let error = outcome.expect_err("the key is the fair waiter's");
            assert!(matches!(error, LockError::KindMismatch { .. }), "{name}: {error}");
            waiter_in.await.expect("the fair waiter got in");
            let _ = waiter_leave.send(());
            waiter.await.expect("task").expect("fair waiter");
        }
    }
}

/// A plain, read or permit call that queued behind a fair waiter of its own
/// client, served after another client's fair holder, ends at once when
/// that waiter leaves: it gets the key (the fair release publishes nothing
/// when nobody else waits in the fair line, and this client's own release
/// wakes the call), or, if it was woken while the fair waiter held the key,
/// failed with `KindMismatch` then. The client's kind check is off, so that
/// the calls of other kinds reach the backend's line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_of_another_kind_behind_a_fair_waiter_gets_the_key_it_leaves() {
    let builder = LockClient::builder().kind_check(false);
    let env = support::Env::with(support::Kind::Redis, builder).await;
    let other = env.other_client().await;
    let fair = LockOptions::new().fair(true).wait(Duration::from_secs(30));
    for (name, options) in unfair_kinds() {
        let key = format!("fair-then-{name}");
        let (holder, leave_holder) = hold_inside(&other, &key, fair).await;
        let (waiter, waiter_in, waiter_leave) = call_holding(&env.client, &key, fair);
        let waiter = start_waiting(&env, &key, waiter).await;
        let late = start_waiting(&env, &key, call_once(&env.client, &key, options)).await;
        let _ = leave_holder.send(());
        holder.await.expect("task").expect("holder");
        waiter_in.await.expect("the fair waiter got in");
        let left = Instant::now();
        let _ = waiter_leave.send(());
        waiter.await.expect("task").expect("fair waiter");
        let outcome = tokio::time::timeout(Duration::from_secs(5), late)
            .await
            .unwrap_or_else(|_| panic!("{name}: still waiting 5 s after the fair waiter left"))
            .expect("task");
        match outcome {
            Ok(entered) => println!("{name}: in {:?} after the fair waiter left", entered - left),
            Err(LockError::KindMismatch { .. }) => println!("{name}: met the fair hold"),
            Err(error) => panic!("{name}: {error}"),
        }
    }
}

/// A client with two waiters on a full counted lock: the first gets the
/// last permit freed by a release, and the second, head now, gets the next
/// permit as soon as a holder whose process died (no release, no notice)
/// reaches the end of its lease, not at the end of its own 20 s wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_waiter_after_the_last_permit_tries_when_a_dead_holder_expires() {
    let env = support::Env::new(support::Kind::Redis).await;
    let server = env.server.as_ref().expect("a Redis server");
    let other = env.other_client().await;
    let options = LockOptions::new().permits(2).wait(Duration::from_secs(20));
    let (holder, leave_holder) = hold_inside(&other, "quota", options).await;
    // A holder whose process died: its permit frees at the end of its
    // 3 s lease, and nobody announces it.
    let dead = redis::Script::new(
        lock_runtime::__private::script_source("shared_acquire").expect("a library script"),
    );
    let granted: Vec<i64> = dead
        .key("lock:quota")
        .arg("0123456789abcdef0123456789abcdef:1")
        .arg(3000)
        .arg("p")
        .arg(5000)
        .arg(2)
        .invoke(&mut server.connection())
        .expect("the dead holder's permit");
    assert_eq!(granted.len(), 2, "a permit: {granted:?}");
    let (first, first_in, first_leave) = call_holding(&env.client, "quota", options);
    let first = start_waiting(&env, "quota", first).await;
    let second = start_waiting(&env, "quota", call_once(&env.client, "quota", options)).await;
    let released = Instant::now();
    let _ = leave_holder.send(());
    holder.await.expect("task").expect("holder");
    first_in
        .await
        .expect("the first waiter got the freed permit");
    let entered = tokio::time::timeout(Duration::from_secs(6), second)
        .await
        .expect("the second waiter still waited 6 s after the release")
        .expect("task")
        .expect("the second waiter got the dead holder's permit");
    let after = entered - released;
    assert!(
        after < Duration::from_secs(5),
        "the second waiter got in {after:?} after the release"
    );
    let _ = first_leave.send(());
    first.await.expect("task").expect("first waiter");
}

/// A fair notice that names a waiter of this client no longer in line (it
/// left before the notice came) does not make the client's other waiters
/// on the key deaf to plain release notices: a plain waiter gets the key
/// as soon as its holder (another client) releases it, not at the end of
/// its 20 s wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_notice_for_a_waiter_that_left_does_not_silence_the_line() {
    let env = support::Env::new(support::Kind::Redis).await;
    let server = env.server.as_ref().expect("a Redis server");
    let other = env.other_client().await;
    // This client's id, from the owner of a lock it held.
    let (probe, probe_in, probe_leave) = call_holding(&env.client, "probe", LockOptions::new());
    let probe = tokio::spawn(probe);
    probe_in.await.expect("the probe is inside");
    let (_, _, owner) = server.lock_value("lock:probe").expect("the probe's lock");
    let (client_id, _) = owner.rsplit_once(':').expect("an owner id");
    let _ = probe_leave.send(());
    probe.await.expect("task").expect("probe");

    let plain = LockOptions::new().wait(Duration::from_secs(20));
    let (holder, leave_holder) = hold_inside(&other, "named", plain).await;
    let waiter = start_waiting(&env, "named", call_once(&env.client, "named", plain)).await;
    // A fair release's notice for a waiter of this client that has left:
    // it comes on the same connection as the release's, before it.
    let _: u64 = redis::cmd("PUBLISH")
        .arg("lock:named")
        .arg(format!(">{client_id}:999999"))
        .query(&mut server.connection())
        .expect("PUBLISH");
    let released = Instant::now();
    let _ = leave_holder.send(());
    holder.await.expect("task").expect("holder");
    let entered = tokio::time::timeout(Duration::from_secs(6), waiter)
        .await
        .expect("the waiter still waited 6 s after the release")
        .expect("task")
        .expect("the waiter got the key");
    let after = entered - released;
    assert!(
        after < Duration::from_secs(5),
        "the waiter got in {after:?} after the release"
    );
}

on_both_backends! {
    /// Six readers are inside at once (each waits for the others inside);
    /// then readers and writers mixed: a writer never overlaps anyone.
    async fn readers_overlap_and_a_writer_overlaps_nobody(env: Env) {
        let barrier = Arc::new(tokio::sync::Barrier::new(6));
        let tasks: Vec<_> = (0..6)
            .map(|_| {
                let (client, barrier) = (env.client.clone(), barrier.clone());
                tokio::spawn(async move {
                    client
                        .run_locked("doc", read(), async {
                            tokio::time::timeout(Duration::from_secs(10), barrier.wait())
                                .await
                                .expect("all six readers inside at once");
                            Ok::<_, LockError>(())
                        })
                        .await
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("task").expect("reader");
        }
        let seen = Arc::new(Inside::default());
        let tasks: Vec<_> = (0..8)
            .map(|i| {
                let (client, seen) = (env.client.clone(), seen.clone());
                tokio::spawn(async move {
                    for _ in 0..6 {
                        let options = if i % 4 == 0 { write() } else { read() };
                        inside(&client, options, &seen, Duration::from_millis(5)).await;
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("task");
        }
        assert_eq!(seen.overlaps.load(Ordering::SeqCst), 0, "a writer overlapped");
        assert!(seen.most_readers.load(Ordering::SeqCst) >= 2, "readers never overlapped");
    }
}

on_both_backends! {
    /// Readers that come and go so that one is always inside do not keep a
    /// waiting writer out: new readers wait behind it.
    async fn a_waiting_writer_is_not_starved_by_a_stream_of_readers(env: Env) {
        let seen = Arc::new(Inside::default());
        let stop = Arc::new(tokio::sync::Notify::new());
        let readers: Vec<_> = (0..4)
            .map(|_| {
                let (client, seen, stop) = (env.client.clone(), seen.clone(), stop.clone());
                tokio::spawn(async move {
                    let stopped = stop.notified();
                    tokio::pin!(stopped);
                    loop {
                        tokio::select! {
                            () = &mut stopped => return,
                            () = inside(&client, read(), &seen, Duration::from_millis(30)) => {}
                        }
                    }
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let start = Instant::now();
        let options = write().wait(Duration::from_secs(10));
        let writer = env.client.run_locked("doc", options, async {
            Ok::<_, LockError>(start.elapsed())
        });
        let waited = writer.await.expect("the writer got in");
        stop.notify_waiters();
        for reader in readers {
            let _ = reader.await;
        }
        assert!(waited < Duration::from_secs(5), "the writer waited {waited:?}");
    }
}

on_both_backends! {
    /// Eight tasks on `permits = 3`: never more than three inside, and three
    /// at some point.
    async fn permits_admit_at_most_their_count(env: Env) {
        let inside_now = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let options = LockOptions::new().permits(3).wait(Duration::from_secs(20));
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let (client, inside_now, most) = (env.client.clone(), inside_now.clone(), most.clone());
                tokio::spawn(async move {
                    for _ in 0..5 {
                        client
                            .run_locked("partner-api", options, async {
                                let now = inside_now.fetch_add(1, Ordering::SeqCst) + 1;
                                most.fetch_max(now, Ordering::SeqCst);
                                tokio::time::sleep(Duration::from_millis(10)).await;
                                inside_now.fetch_sub(1, Ordering::SeqCst);
                                Ok::<_, LockError>(())
                            })
                            .await
                            .expect("permit");
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("task");
        }
        assert_eq!(most.load(Ordering::SeqCst), 3);
    }
}

on_both_backends! {
    /// A call that meets another kind's live hold fails with
    /// `KindMismatch`, naming the key and both kinds. The client's kind
    /// check is off: it would find the mismatch before the backend does
    /// (`tests/kind_check.rs`).
    async fn a_call_that_meets_another_kind_fails_with_a_kind_mismatch(
        env: Env = LockClient::builder().kind_check(false)
    ) {
        let (holder, leave_tx) = hold_inside(&env.client, "mixed", LockOptions::new().permits(2)).await;
        let error = env
            .client
            .run_locked("mixed", read(), async { Ok::<_, LockError>(()) })
            .await
            .expect_err("a reader on a counted lock");
        let LockError::KindMismatch { key, asked, found, found_by, .. } = &error else {
            panic!("not a kind mismatch: {error}");
        };
        assert_eq!(*found_by, KindFoundBy::Backend, "{error}");
        assert!(key.ends_with("mixed"), "{key}");
        assert!(asked.contains("mode = \"read\""), "{asked}");
        assert!(found.contains("permits = 2"), "{found}");
        let other_count = LockOptions::new().permits(3).wait(Duration::ZERO);
        let error = env
            .client
            .run_locked("mixed", other_count, async { Ok::<_, LockError>(()) })
            .await
            .expect_err("another count");
        assert!(matches!(error, LockError::KindMismatch { .. }), "{error}");
        let _ = leave_tx.send(());
        holder.await.expect("task").expect("holder");
        // Free again: the key takes any kind.
        env.client
            .run_locked("mixed", read(), async { Ok::<_, LockError>(()) })
            .await
            .expect("a reader on the freed key");
    }
}

on_both_backends! {
    /// Under a write hold a nested read or write re-enters; under a read
    /// hold a nested read re-enters and a nested write fails at once; under
    /// a permit a nested call with the same count re-enters. None sends a
    /// request.
    async fn each_kind_re_enters_by_its_rules(env: Env) {
        let client = env.client.clone();
        client
            .run_locked("nest", write(), async {
                client.run_locked("nest", read(), async { Ok::<_, LockError>(()) }).await?;
                client.run_locked("nest", write(), async { Ok::<_, LockError>(()) }).await
            })
            .await
            .expect("read and write under a write hold");
        let started = Instant::now();
        let upgrade = client
            .run_locked("nest", read(), async {
                client.run_locked("nest", read(), async { Ok::<_, LockError>(()) }).await?;
                client.run_locked("nest", write(), async { Ok::<_, LockError>(()) }).await
            })
            .await
            .expect_err("a write under a read hold");
        assert!(matches!(upgrade, LockError::Invalid { .. }), "{upgrade}");
        assert!(upgrade.to_string().contains("nest"), "{upgrade}");
        assert!(started.elapsed() < Duration::from_secs(5), "it failed at once");
        // Nothing is left held: a writer takes the key at once.
        client
            .run_locked("nest", write().wait(Duration::ZERO), async { Ok::<_, LockError>(()) })
            .await
            .expect("free after the failed upgrade");
        // Another key: a key is one lock of one kind.
        let permits = LockOptions::new().permits(1).wait(Duration::ZERO);
        client
            .run_locked("nest-counted", permits, async {
                client.run_locked("nest-counted", permits, async { Ok::<_, LockError>(()) }).await
            })
            .await
            .expect("a permit re-entered, not a second one taken");
    }
}

on_both_backends! {
    /// Waiters on a fair lock, on two clients of the same backend, begin
    /// waiting 150 ms apart and get the lock in that order.
    async fn a_fair_line_serves_waiters_in_arrival_order(env: Env) {
        let other = env.other_client().await;
        let fair = LockOptions::new().fair(true).wait(Duration::from_secs(20));
        let (holder, leave_tx) = hold_inside(&env.client, "line", fair).await;
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut waiters = Vec::new();
        for i in 0..4 {
            let client = if i % 2 == 0 { other.clone() } else { env.client.clone() };
            let order = order.clone();
            waiters.push(tokio::spawn(async move {
                client
                    .run_locked("line", fair, async {
                        order.lock().unwrap().push(i);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        Ok::<_, LockError>(())
                    })
                    .await
            }));
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
        let _ = leave_tx.send(());
        holder.await.expect("task").expect("holder");
        for waiter in waiters {
            waiter.await.expect("task").expect("waiter");
        }
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3]);
    }
}

on_both_backends! {
    /// Eight waiters of one client that begin waiting together on a held
    /// fair lock: each hand-off goes to the waiter the line names, with no
    /// wait for a heartbeat (a third of the waiter lease, 1.7 s here).
    async fn a_fair_line_in_one_client_hands_off_without_waiting_for_heartbeats(env: Env) {
        let fair = LockOptions::new().fair(true).wait(Duration::from_secs(20));
        let (holder, leave_tx) = hold_inside(&env.client, "together", fair).await;
        let waiters: Vec<_> = (0..8)
            .map(|_| {
                let client = env.client.clone();
                tokio::spawn(async move {
                    client
                        .run_locked("together", fair, async { Ok::<_, LockError>(Instant::now()) })
                        .await
                })
            })
            .collect();
        // Let every waiter take its place in the line.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let released = Instant::now();
        let _ = leave_tx.send(());
        holder.await.expect("task").expect("holder");
        let mut last = released;
        for waiter in waiters {
            last = last.max(waiter.await.expect("task").expect("waiter"));
        }
        let all_in = last - released;
        assert!(all_in < Duration::from_millis(1200), "eight hand-offs took {all_in:?}");
    }
}

on_both_backends! {
    /// A client's second waiter on a counted lock is told of the next freed
    /// permit, though only its first waiter was ever refused: two holders
    /// of another client leave one after the other, and each waiter here
    /// gets in at once, not at the holders' lease.
    async fn each_freed_permit_reaches_a_waiting_client_with_several_waiters(env: Env) {
        let holders_client = env.other_client().await;
        let options = LockOptions::new().permits(2).wait(Duration::from_secs(20));
        let mut leaves = Vec::new();
        let mut holders = Vec::new();
        for _ in 0..2 {
            let (holder, leave_tx) = hold_inside(&holders_client, "quota", options).await;
            holders.push(holder);
            leaves.push(leave_tx);
        }
        let entered = Arc::new(tokio::sync::Notify::new());
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let (client, entered) = (env.client.clone(), entered.clone());
                tokio::spawn(async move {
                    client
                        .run_locked("quota", options, async {
                            entered.notify_one();
                            std::future::pending::<()>().await;
                            Ok::<_, LockError>(())
                        })
                        .await
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(300)).await;
        for leave in leaves {
            let released = Instant::now();
            let _ = leave.send(());
            tokio::time::timeout(Duration::from_secs(3), entered.notified())
                .await
                .expect("a waiter got the freed permit at once");
            println!("in {:?} after the release", released.elapsed());
        }
        for holder in holders {
            holder.await.expect("task").expect("holder");
        }
        for waiter in waiters {
            waiter.abort();
        }
    }
}

on_both_backends! {
    /// A writer that gives up behind a reader withdraws its claim, and a
    /// reader that queued behind it gets in at once, not at its own wait's
    /// end or the readers' lease.
    async fn a_reader_behind_a_writer_that_gives_up_gets_in_at_once(env: Env) {
        let (holder, leave_tx) = hold_inside(&env.client, "claim", read()).await;
        let client = env.client.clone();
        let writer = tokio::spawn(async move {
            let options = write().wait(Duration::from_millis(300));
            client
                .run_locked("claim", options, async { Ok::<_, LockError>(()) })
                .await
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let reader = env
            .client
            .run_locked("claim", read().wait(Duration::from_secs(10)), async {
                Ok::<_, LockError>(Instant::now())
            });
        let gave_up = async {
            let error = writer.await.expect("task").expect_err("the writer gives up");
            assert!(matches!(error, LockError::Timeout { .. }), "{error}");
            Instant::now()
        };
        let (entered, gave_up) = tokio::join!(reader, gave_up);
        let after = entered.expect("the reader got in").saturating_duration_since(gave_up);
        assert!(after < Duration::from_millis(1500), "the reader waited {after:?} more");
        let _ = leave_tx.send(());
        holder.await.expect("task").expect("holder");
    }
}

on_both_backends! {
    /// A writer and a reader of one client called side by side behind
    /// another client's reader: whichever heads this client's line, the
    /// writer, whose claim holds the reader back, gets in as soon as the
    /// key is free (ten trials).
    async fn a_writer_behind_its_own_clients_reader_gets_in_when_the_key_frees(env: Env) {
        let other = env.other_client().await;
        for trial in 0..10 {
            let key = format!("side{trial}");
            let (holder, leave_tx) = hold_inside(&other, &key, read()).await;
            let writer = env.client.run_locked(&key, write().wait(Duration::from_secs(5)), async {
                Ok::<_, LockError>(Instant::now())
            });
            let reader = env.client.run_locked(&key, read().wait(Duration::from_secs(5)), async {
                Ok::<_, LockError>(())
            });
            let release = async {
                tokio::time::sleep(Duration::from_millis(150)).await;
                let _ = leave_tx.send(());
            };
            let (written, read_done, ()) = tokio::join!(writer, reader, release);
            let left = holder.await.expect("task").expect("holder");
            read_done.expect("the reader got in after the writer");
            let after = written.expect("the writer got in").saturating_duration_since(left);
            assert!(after < Duration::from_millis(500), "trial {trial}: the writer got in {after:?} after the key was free");
        }
    }
}

/// A zero-wait call that finds the key held sends its one acquire and
/// nothing else, whatever the kind; one that took a place in a line (a
/// fair ticket) gives it back with one release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_zero_wait_call_sends_one_request_and_gives_back_only_a_place() {
    let env = support::Env::new(support::Kind::Redis).await;
    let server = env.server.as_ref().expect("a Redis server");
    let cases = [
        ("plain", LockOptions::new(), 1),
        ("reader", read(), 1),
        ("permit", LockOptions::new().permits(1), 1),
        ("fair", LockOptions::new().fair(true), 2),
    ];
    for (name, options, requests) in cases {
        let key = format!("try-{name}");
        let holder_options = if name == "reader" { write() } else { options };
        let (holder, leave_tx) = hold_inside(&env.client, &key, holder_options).await;
        let other = env.other_client().await;
        // The kind's scripts loaded on the server (a first EVALSHA of a
        // script the server does not have yet counts twice).
        other
            .run_locked(&format!("warm-{name}"), options, async {
                Ok::<_, LockError>(())
            })
            .await
            .expect("an uncontended call");
        let before = server.command_calls("evalsha");
        let error = other
            .run_locked(&key, options.wait(Duration::ZERO), async {
                Ok::<_, LockError>(())
            })
            .await
            .expect_err("held");
        assert!(
            matches!(error, LockError::Timeout { .. }),
            "{name}: {error}"
        );
        // The give-back of a place runs in the background.
        let deadline = Instant::now() + Duration::from_secs(5);
        while server.command_calls("evalsha") - before < requests && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let sent = server.command_calls("evalsha") - before;
        assert_eq!(
            sent, requests,
            "{name}: requests sent by a refused zero-wait call"
        );
        let _ = leave_tx.send(());
        holder.await.expect("task").expect("holder");
    }
}
