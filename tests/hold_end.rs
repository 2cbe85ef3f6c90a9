//! A hold's own end: a hold is marked lost at its trusted end (its lease
//! less the drift margin, from when its acquire was sent) even while its
//! renewal calls stall on a connection that neither answers nor resets (a
//! partition that drops packets, a hung proxy), and everything that listens
//! hears it from that mark: the locked body is dropped, and a leader's
//! workers stop on `Term::ended()` and `Term::lost()`.
//!
//! The clients reach a redis-server through a freezable proxy
//! (`lock_testkit::Proxy`), frozen once every hold has started and before
//! any renewal is confirmed, so the trusted end of each is known to the
//! test: the instant its acquire was sent (`LockClient::held`'s `held_for`)
//! plus the lease less the margin. The command timeout is 5 s, longer than
//! the lease: only the clock can mark the holds in time.
mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_runtime::{FoundBy, LockClient, LockError, LockOptions, LossReason, Term, TermEnd};
use lock_testkit::{Proxy, Server};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The most a loss may be heard after the trusted end in the suite (a busy
/// 2-core machine, `LOCK_TEST_LOAD=4`). Idle, it is about a millisecond.
const HEARD_WITHIN: Duration = Duration::from_millis(250);

const LEASE: Duration = Duration::from_secs(2);

/// How long a hold is trusted after its acquire was sent: the lease less
/// the default drift margin (1 % of the lease and 2 ms).
fn valid() -> Duration {
    LEASE - (LEASE.mul_f64(0.01) + Duration::from_millis(2))
}

/// A redis-server on a loopback port, and a proxy in front of it.
fn stalling_server() -> (Server, Proxy) {
    let server = Server::tcp(&[]);
    let proxy = Proxy::start(([127, 0, 0, 1], server.port()).into()).expect("the proxy");
    (server, proxy)
}

/// A client through `proxy` whose calls wait for an answer longer than a
/// lease lasts.
async fn client_through(proxy: &Proxy) -> LockClient {
    LockClient::builder()
        .command_timeout(Duration::from_secs(5))
        .connect(&format!("redis://{}/", proxy.addr()))
        .await
        .expect("connect through the proxy")
}

/// When the acquire of this client's hold on `key` was sent.
fn sent_at(client: &LockClient, key: &str) -> Instant {
    let now = Instant::now();
    let held = client.held();
    let info = held
        .iter()
        .find(|held| held.key.ends_with(key))
        .expect("the hold is listed");
    now - info.held_for
}

/// The instant a value is dropped (the body, when its call stops it).
struct DropStamp(Arc<Mutex<Option<Instant>>>);

impl Drop for DropStamp {
    fn drop(&mut self) {
        *self.0.lock().unwrap() = Some(Instant::now());
    }
}

/// How many holds the test marks: `LOCK_TEST_MARKS`, or 200.
fn marks() -> usize {
    std::env::var("LOCK_TEST_MARKS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200)
}

/// The `q`-quantile of sorted `values`.
fn quantile(sorted: &[Duration], q: f64) -> Duration {
    let at = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

/// Freezes `proxy` once `started` holds have started, checking that no
/// renewal can have been confirmed yet (the first goes out at a third of
/// the lease).
async fn freeze_when_started(
    proxy: &Proxy,
    started: &mut tokio::sync::mpsc::Receiver<Instant>,
    count: usize,
) {
    let mut first = None;
    for _ in 0..count {
        let at = tokio::time::timeout(Duration::from_secs(30), started.recv())
            .await
            .expect("every hold starts")
            .expect("a start");
        first = first.min(Some(at)).or(Some(at));
    }
    proxy.freeze();
    let first = first.expect("one hold at least");
    assert!(
        first.elapsed() < LEASE / 3,
        "the holds took {:?} to start: a renewal may have been confirmed",
        first.elapsed()
    );
}

/// Many bodies parked forever on one client whose connection stalls: each
/// is stopped at its hold's trusted end, not when the stalled renewal call
/// gives up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_connection_delays_no_body_past_its_trusted_end() {
    let (_server, proxy) = stalling_server();
    let client = client_through(&proxy).await;
    let count = marks();
    let (started_tx, mut started) = tokio::sync::mpsc::channel(count);
    let calls: Vec<_> = (0..count)
        .map(|i| {
            let client = client.clone();
            let started_tx = started_tx.clone();
            tokio::spawn(async move {
                let key = format!("parked:{i}");
                let dropped = Arc::new(Mutex::new(None));
                let stamp = DropStamp(dropped.clone());
                let sent = Arc::new(Mutex::new(None));
                let seen = sent.clone();
                let (lender, name) = (client.clone(), key.clone());
                let body = async move {
                    let _stamp = stamp;
                    *seen.lock().unwrap() = Some(sent_at(&lender, &name));
                    started_tx.send(Instant::now()).await.expect("the test");
                    std::future::pending::<Result<(), LockError>>().await
                };
                let options = LockOptions::new().lease(LEASE);
                let result = client.run_locked(&key, options, body).await;
                let returned = Instant::now();
                let sent = sent.lock().unwrap().expect("the body started");
                let dropped = dropped.lock().unwrap().expect("the body was dropped");
                (key, result, sent, dropped, returned)
            })
        })
        .collect();
    freeze_when_started(&proxy, &mut started, count).await;
    let mut late = Vec::new();
    for call in calls {
        let (key, result, sent, dropped, returned) = call.await.expect("the call");
        match result {
            Err(LockError::Lost {
                reason: LossReason::Expired,
                found_by: FoundBy::Clock,
                ..
            }) => {}
            other => panic!("{key}: expected Lost(Expired) by the clock, got {other:?}"),
        }
        let end = sent + valid();
        assert!(
            dropped >= end,
            "{key}: stopped {:?} before its trusted end",
            end - dropped
        );
        assert!(
            dropped - end <= HEARD_WITHIN,
            "{key}: stopped {:?} after its trusted end",
            dropped - end
        );
        assert!(
            returned >= dropped,
            "{key}: returned before the body was dropped"
        );
        late.push(dropped - end);
    }
    late.sort();
    println!(
        "{} bodies stopped after their trusted end: p50 {:?}, p99 {:?}, max {:?}",
        late.len(),
        quantile(&late, 0.5),
        quantile(&late, 0.99),
        late[late.len() - 1]
    );
    proxy.thaw();
}

/// What a leader's worker saw: its writes, and when and how it heard the
/// end of its term.
#[derive(Default)]
struct WorkerLog {
    writes: Vec<Instant>,
    ended: Option<(Instant, TermEnd)>,
    /// The leader gauge when the worker heard the end.
    gauge: Option<f64>,
    lost: Option<(Instant, LossReason)>,
}

/// A worker of the leader's: writes every 5 ms until its clone of the term
/// ends (one `ended()` future, awaited beside each write); another clone
/// waits on `lost()`.
fn spawn_worker(
    term: &Term,
    log: Arc<Mutex<WorkerLog>>,
    gauge: impl Fn() -> f64 + Send + 'static,
) -> [JoinHandle<()>; 2] {
    let worker = term.clone();
    let writes = log.clone();
    let working = tokio::spawn(async move {
        // One future for the whole term, as a worker holds it.
        let ended = worker.ended();
        tokio::pin!(ended);
        for _ in 0..100_000 {
            tokio::select! {
                end = &mut ended => {
                    let at = Instant::now();
                    let mut log = writes.lock().unwrap();
                    log.ended = Some((at, end));
                    log.gauge = Some(gauge());
                    return;
                }
                () = tokio::time::sleep(Duration::from_millis(5)) => {
                    writes.lock().unwrap().writes.push(Instant::now());
                }
            }
        }
    });
    let watcher = term.clone();
    let watching = tokio::spawn(async move {
        let reason = watcher.lost().await;
        log.lock().unwrap().lost = Some((Instant::now(), reason));
    });
    [working, watching]
}

/// A leader whose connection stalls: its workers hear `ended()` and
/// `lost()` at the trusted end of its term, before a leader on another
/// client can be elected (when the lease ends in Redis).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaders_workers_stop_at_the_trusted_end_on_a_stalled_connection() {
    // The only recorder of this binary (it is process-wide).
    let metrics = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .expect("the only recorder of this binary");
    let gauge = move || {
        let series = r#"distributed_lock_leader{lock="scheduler"} "#;
        let page = metrics.render();
        let value = page
            .lines()
            .find_map(|line| line.strip_prefix(series)?.parse().ok());
        value.unwrap_or(0.0_f64)
    };
    let (server, proxy) = stalling_server();
    let first = client_through(&proxy).await;
    let next = LockClient::connect(&server.url()).await.expect("connect");
    let options = LockOptions::new().lease(LEASE).label("scheduler");
    let log = Arc::new(Mutex::new(WorkerLog::default()));
    let (started_tx, mut started) = tokio::sync::mpsc::channel(1);
    let sent = Arc::new(Mutex::new(None));
    let workers = Arc::new(Mutex::new(Vec::new()));
    let (leader, seen, worker_log) = (first.clone(), sent.clone(), log.clone());
    let spawned = workers.clone();
    let leader_gauge = gauge.clone();
    let options_a = options;
    tokio::spawn(async move {
        let lead = leader.lead("scheduler", options_a, |term| {
            let (lender, seen, log, started_tx, spawned, gauge) = (
                leader.clone(),
                seen.clone(),
                worker_log.clone(),
                started_tx.clone(),
                spawned.clone(),
                leader_gauge.clone(),
            );
            async move {
                *seen.lock().unwrap() = Some(sent_at(&lender, "scheduler"));
                spawned
                    .lock()
                    .unwrap()
                    .extend(spawn_worker(&term, log, gauge));
                let _ = started_tx.send(Instant::now()).await;
                std::future::pending::<Result<(), LockError>>().await
            }
        });
        let _ = lead.await;
    });
    freeze_when_started(&proxy, &mut started, 1).await;
    let end = sent.lock().unwrap().expect("elected") + valid();
    assert_eq!(gauge(), 1.0, "leading");

    // Another client campaigns, directly.
    let (elected_tx, elected) = tokio::sync::oneshot::channel();
    let mut elected_tx = Some(elected_tx);
    let campaign = tokio::spawn(async move {
        let lead = next.lead("scheduler", options, |term| {
            if let Some(tx) = elected_tx.take() {
                let _ = tx.send((Instant::now(), term.token()));
            }
            std::future::pending::<Result<(), LockError>>()
        });
        let _ = lead.await;
    });
    let (elected_at, _) = tokio::time::timeout(Duration::from_secs(30), elected)
        .await
        .expect("another leader is elected")
        .expect("elected");

    let workers: Vec<_> = workers.lock().unwrap().drain(..).collect();
    for worker in workers {
        tokio::time::timeout(Duration::from_secs(10), worker)
            .await
            .expect("the workers hear the end")
            .expect("a worker");
    }
    let log = log.lock().unwrap();
    let (ended_at, how) = log.ended.expect("the worker heard the end");
    assert_eq!(how, TermEnd::Lost(LossReason::Expired));
    assert_eq!(
        log.gauge,
        Some(0.0),
        "the gauge dropped before the worker heard"
    );
    let (lost_at, reason) = log.lost.expect("lost() completed");
    assert_eq!(reason, LossReason::Expired);
    for (what, at) in [("ended()", ended_at), ("lost()", lost_at)] {
        assert!(
            at >= end,
            "{what} heard {:?} before the trusted end",
            end - at
        );
        assert!(
            at - end <= HEARD_WITHIN,
            "{what} heard {:?} after the trusted end",
            at - end
        );
    }
    let last = *log.writes.last().expect("the worker wrote");
    assert!(last <= ended_at);
    println!(
        "the worker heard the end {:?} after the trusted end; its last write was {:?} \
         before the next leader's election",
        ended_at - end,
        elected_at.saturating_duration_since(last)
    );
    campaign.abort();
    proxy.thaw();
}
