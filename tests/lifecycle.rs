//! A client's life: `shutdown` (refuse new calls, let bodies finish within
//! the deadline, stop the rest, release) and `lazy_connect` for services
//! that start before Redis.
mod support;

use std::time::Duration;

use lock_runtime::{LockClient, LockError, LockOptions, LossReason};
use lock_testkit::ServerOptions;
use support::{Holder, RedisServer};
use tokio::time::Instant;

async fn take(client: &LockClient, key: &str, wait: Duration) -> Result<(), LockError> {
    client
        .run_locked(key, LockOptions::new().wait(wait), async {
            Ok::<_, LockError>(())
        })
        .await
}

fn is_free(server: &RedisServer, key: &str) -> bool {
    server
        .lock_value(key)
        .is_none_or(|(_, state, _)| state == "f")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_shutdown_new_calls_fail_at_once() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.expect("connect");
    take(&client, "k", Duration::ZERO).await.expect("works");
    let entries = || -> Vec<String> {
        redis::cmd("KEYS")
            .arg("lock:client:*")
            .query(&mut server.connection())
            .expect("KEYS")
    };
    assert_eq!(entries().len(), 1, "the client's registry entry");
    client.shutdown(Duration::from_secs(5)).await;
    assert!(entries().is_empty(), "deleted at shutdown");
    let start = Instant::now();
    let error = take(&client.clone(), "k", Duration::from_secs(10))
        .await
        .expect_err("shut down");
    assert!(start.elapsed() < Duration::from_millis(500));
    assert!(
        matches!(&error, LockError::ShutDown { key, .. } if key == "lock:k"),
        "{error:?}"
    );
    assert!(!error.is_retryable());
    println!("{error}");
    // Again: harmless.
    client.shutdown(Duration::ZERO).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_finishes_within_the_deadline_and_waiters_are_refused() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.expect("connect");
    let (held_tx, held_rx) = tokio::sync::oneshot::channel();
    let body = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .run_locked("job", LockOptions::new(), async {
                    held_tx.send(()).expect("test");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    Ok::<_, LockError>(42)
                })
                .await
        })
    };
    held_rx.await.expect("held");
    let waiter = {
        let client = client.clone();
        tokio::spawn(async move { take(&client, "job", Duration::from_secs(30)).await })
    };
    // Until the waiter has found the lock held.
    let waiting = support::eventually(Duration::from_secs(10), || {
        server
            .lock_value("lock:job")
            .is_some_and(|(_, state, _)| state == "w")
    })
    .await;
    assert!(waiting);

    let start = Instant::now();
    client.shutdown(Duration::from_secs(10)).await;
    let took = start.elapsed();
    assert_eq!(body.await.expect("task").expect("body finished"), 42);
    assert!(took < Duration::from_secs(5), "{took:?}");
    let refused = tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .expect("the waiter ends at once")
        .expect("task");
    assert!(
        matches!(refused, Err(LockError::ShutDown { .. })),
        "{refused:?}"
    );
    assert!(is_free(&server, "lock:job"));
    assert!(client.held().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_past_the_deadline_is_stopped_with_lost_shut_down_and_released() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.expect("connect");
    let holder = Holder::start(&client, "long", LockOptions::new()).await;
    let start = Instant::now();
    client.shutdown(Duration::from_millis(300)).await;
    let took = start.elapsed();
    println!("shutdown took {took:?}");
    assert!(took < Duration::from_secs(3), "{took:?}");
    match tokio::time::timeout(Duration::from_secs(5), holder.outcome()).await {
        Ok(Err(LockError::Lost { reason, .. })) => assert_eq!(reason, LossReason::ShutDown),
        other => panic!("expected Lost ShutDown, got {other:?}"),
    }
    assert!(is_free(&server, "lock:long"));
    assert_eq!(client.renewing(), 0);
    // Another process takes it at once.
    let other = LockClient::connect(&server.url()).await.expect("connect");
    take(&other, "long", Duration::ZERO)
        .await
        .expect("free after shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_on_memory() {
    let client = LockClient::in_memory();
    let holder = Holder::start(&client, "m", LockOptions::new()).await;
    client.shutdown(Duration::from_millis(100)).await;
    assert!(matches!(
        holder.outcome().await,
        Err(LockError::Lost {
            reason: LossReason::ShutDown,
            ..
        })
    ));
    assert!(matches!(
        take(&client, "m", Duration::ZERO).await,
        Err(LockError::ShutDown { .. })
    ));
}

/// A loopback port that was free a moment ago.
fn free_port() -> u16 {
    lock_testkit::free_port().expect("a free loopback port")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lazy_client_starts_before_redis_and_works_once_it_is_up() {
    let port = free_port();
    let url = format!("redis://127.0.0.1:{port}/");
    let start = Instant::now();
    let client = LockClient::builder()
        .lazy_connect(true)
        .connect_timeout(Duration::from_millis(500))
        .command_timeout(Duration::from_millis(500))
        .client_name("lazy")
        .connect(&url)
        .await
        .expect("a lazy connect does not need Redis");
    assert!(start.elapsed() < Duration::from_secs(1));

    let start = Instant::now();
    let error = take(&client, "early", Duration::from_secs(30))
        .await
        .expect_err("Redis is not up");
    let shown = error.to_string();
    println!("{shown} after {:?}", start.elapsed());
    assert!(matches!(error, LockError::Backend { .. }), "{error:?}");
    assert!(error.is_retryable());
    assert!(shown.contains(&format!("127.0.0.1:{port}")), "{shown}");
    assert!(shown.to_lowercase().contains("refused"), "{shown}");
    assert!(start.elapsed() < Duration::from_secs(5));

    let _server = ServerOptions::tcp()
        .port(port)
        .start()
        .unwrap_or_else(|e| panic!("{e}"));
    let start = Instant::now();
    let mut attempts = 0;
    loop {
        attempts += 1;
        match take(&client, "later", Duration::from_secs(1)).await {
            Ok(()) => break,
            Err(e) if e.is_retryable() && start.elapsed() < Duration::from_secs(20) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("no recovery after {attempts} attempts: {e}"),
        }
    }
    println!("up after {attempts} attempts, {:?}", start.elapsed());
    // The connections got their name when they were made.
    let mut con = redis::Client::open(url.as_str())
        .expect("url")
        .get_connection()
        .expect("connect");
    let named = support::eventually(Duration::from_secs(10), || {
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query(&mut con)
            .expect("CLIENT LIST");
        list.contains("name=lazy ")
    })
    .await;
    assert!(named);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lazy_redlock_client_starts_with_every_node_down() {
    let urls: Vec<String> = (0..3)
        .map(|_| format!("redis://127.0.0.1:{}/", free_port()))
        .collect();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let client = LockClient::builder()
        .lazy_connect(true)
        .node_timeout(Duration::from_millis(200))
        .redlock(&urls)
        .await
        .expect("a lazy connect does not need the nodes");
    let error = take(&client, "k", Duration::from_secs(30))
        .await
        .expect_err("no node is up");
    println!("{error}");
    assert!(matches!(error, LockError::NoQuorum { .. }), "{error:?}");
    assert!(error.is_retryable());
}

/// A metrics recorder that holds the thread that first marks a lock held
/// (the `distributed_lock_held` gauge, raised as the call registers its
/// hold) until it is let go.
struct HoldAtRegistration {
    reached: std::sync::mpsc::SyncSender<()>,
    go_on: std::sync::Mutex<std::sync::mpsc::Receiver<()>>,
}

impl metrics::GaugeFn for HoldAtRegistration {
    fn increment(&self, _: f64) {
        let _ = self.reached.try_send(());
        let go_on = self.go_on.lock().expect("one caller");
        let _ = go_on.recv_timeout(Duration::from_secs(30));
    }
    fn decrement(&self, _: f64) {}
    fn set(&self, _: f64) {}
}

struct Recorder(std::sync::Arc<HoldAtRegistration>);

impl metrics::Recorder for Recorder {
    fn describe_counter(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_gauge(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_histogram(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn register_counter(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        metrics::Counter::noop()
    }
    fn register_gauge(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        if key.name() == lock_runtime::metrics::HELD {
            metrics::Gauge::from_arc(self.0.clone())
        } else {
            metrics::Gauge::noop()
        }
    }
    fn register_histogram(
        &self,
        _: &metrics::Key,
        _: &metrics::Metadata<'_>,
    ) -> metrics::Histogram {
        metrics::Histogram::noop()
    }
}

/// A call whose acquire succeeds while `shutdown` runs, and that is held up
/// (as a preempted thread would be) while it registers its hold, until
/// `shutdown` has returned: it must not run its body after `shutdown`
/// returned. It fails with `ShutDown` and gives the lock back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_registers_its_hold_during_shutdown_does_not_run() {
    let client = LockClient::in_memory();
    let (reached_tx, reached) = std::sync::mpsc::sync_channel(1);
    let (go_on, go_on_rx) = std::sync::mpsc::channel();
    let hook = std::sync::Arc::new(HoldAtRegistration {
        reached: reached_tx,
        go_on: std::sync::Mutex::new(go_on_rx),
    });
    let shut = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ran_after_shutdown = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let caller = std::thread::spawn({
        let (client, shut, ran) = (client.clone(), shut.clone(), ran_after_shutdown.clone());
        move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            let call = client.run_locked("k", LockOptions::new(), async {
                if shut.load(std::sync::atomic::Ordering::SeqCst) {
                    ran.store(true, std::sync::atomic::Ordering::SeqCst);
                }
                Ok::<_, LockError>(())
            });
            metrics::with_local_recorder(&Recorder(hook), || runtime.block_on(call))
        }
    });
    let reached =
        tokio::task::spawn_blocking(move || reached.recv_timeout(Duration::from_secs(10)));
    reached
        .await
        .expect("task")
        .expect("the call registers its hold");
    client.shutdown(Duration::ZERO).await;
    shut.store(true, std::sync::atomic::Ordering::SeqCst);
    go_on.send(()).expect("the caller waits");
    let result = tokio::task::spawn_blocking(move || caller.join().expect("caller"))
        .await
        .expect("task");
    assert!(
        !ran_after_shutdown.load(std::sync::atomic::Ordering::SeqCst),
        "the body ran after shutdown returned: {result:?}"
    );
    assert!(
        matches!(&result, Err(LockError::ShutDown { .. })),
        "{result:?}"
    );
}
