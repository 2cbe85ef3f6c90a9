//! The metrics of locked calls (feature `metrics`), read from a Prometheus
//! recorder: each step counted once, under the call's label, never the key.
//!
//! One test: the recorder is process-wide.

mod support;

use std::time::Duration;

use lock_runtime::{LockClient, LockError, LockOptions};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use support::RedisServer;

/// The value of the series `name{labels}` on the current page, 0 if absent.
fn value(handle: &PrometheusHandle, name: &str, labels: &str) -> f64 {
    let series = format!("{name}{{{labels}}} ");
    let page = handle.render();
    page.lines()
        .find_map(|line| line.strip_prefix(&series)?.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_step_is_counted_once_under_the_calls_label() {
    let metrics = PrometheusBuilder::new()
        .install_recorder()
        .expect("the only recorder");
    lock_runtime::metrics::describe();
    let client = LockClient::in_memory();
    let item = LockOptions::new().label("item:<id>");
    let lock = r#"lock="item:<id>""#;
    let count = |name: &str| value(&metrics, name, lock);

    // Two acquisitions (one of them with a nested re-entry) and an
    // unlabelled call.
    for _ in 0..2 {
        let nested = async {
            client
                .run_locked("item:1", item, async { Ok::<_, LockError>(()) })
                .await
        };
        client
            .run_locked("item:1", item, nested)
            .await
            .expect("the calls run");
    }
    client
        .run_locked("other", LockOptions::new(), async {
            Ok::<_, LockError>(())
        })
        .await
        .expect("the call runs");
    assert_eq!(count("distributed_lock_acquisitions_total"), 2.0);
    assert_eq!(count("distributed_lock_reentries_total"), 2.0);
    assert_eq!(count("distributed_lock_attempts_total"), 2.0);
    assert_eq!(count("distributed_lock_held"), 0.0);
    assert_eq!(
        value(
            &metrics,
            "distributed_lock_acquisitions_total",
            r#"lock="unlabelled""#
        ),
        1.0
    );
    assert_eq!(count("distributed_lock_wait_seconds_count"), 2.0);
    assert_eq!(count("distributed_lock_held_seconds_count"), 2.0);
    let page = metrics.render();
    assert!(
        !page.contains("item:1"),
        "a rendered key in a label: {page}"
    );
    assert!(
        page.contains("# HELP distributed_lock_acquisitions_total"),
        "{page}"
    );

    // A holder, seen by the gauge, and a waiter that times out.
    let (taken_tx, taken_rx) = tokio::sync::oneshot::channel();
    let (free_tx, free_rx) = tokio::sync::oneshot::channel::<()>();
    let holder = tokio::spawn({
        let client = client.clone();
        async move {
            let body = async {
                let _ = taken_tx.send(());
                let _ = free_rx.await;
                Ok::<_, LockError>(())
            };
            client.run_locked("item:2", item, body).await
        }
    });
    taken_rx.await.expect("the holder took the lock");
    assert_eq!(count("distributed_lock_held"), 1.0);
    let short = item.wait(Duration::from_millis(20));
    let waited = client
        .run_locked("item:2", short, async { Ok::<_, LockError>(()) })
        .await;
    assert!(
        matches!(waited, Err(LockError::Timeout { .. })),
        "{waited:?}"
    );
    assert_eq!(count("distributed_lock_timeouts_total"), 1.0);
    free_tx.send(()).expect("the holder waits");
    holder.await.expect("no panic").expect("the holder's call");
    assert_eq!(count("distributed_lock_held"), 0.0);

    // A lease that runs out under a body that outlives it.
    let short_lease = item.lease(Duration::from_millis(50)).renew(false);
    let body = async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        Ok::<_, LockError>(())
    };
    let lost = client.run_locked("item:3", short_lease, body).await;
    assert!(matches!(lost, Err(LockError::Lost { .. })), "{lost:?}");
    let expired = value(
        &metrics,
        "distributed_lock_losses_total",
        r#"lock="item:<id>",reason="expired""#,
    );
    assert_eq!(expired, 1.0);

    // A call cancelled while it holds its lock.
    let (taken_tx, taken_rx) = tokio::sync::oneshot::channel();
    let cancelled = tokio::spawn({
        let client = client.clone();
        async move {
            let body = async {
                let _ = taken_tx.send(());
                std::future::pending::<Result<(), LockError>>().await
            };
            client.run_locked("item:4", item, body).await
        }
    });
    taken_rx.await.expect("the call took the lock");
    cancelled.abort();
    let _ = cancelled.await;
    assert_eq!(count("distributed_lock_background_releases_total"), 1.0);
    assert_eq!(count("distributed_lock_held"), 0.0);

    // Renewals that fail while Redis is down, until the lease runs out.
    let mut server = RedisServer::start();
    let redis = LockClient::builder()
        .command_timeout(Duration::from_millis(200))
        .connect(&server.url())
        .await
        .expect("connect");
    let (taken_tx, taken_rx) = tokio::sync::oneshot::channel();
    let renewing = item.lease(Duration::from_millis(600));
    let call = tokio::spawn({
        let redis = redis.clone();
        async move {
            let body = async {
                let _ = taken_tx.send(());
                std::future::pending::<Result<(), LockError>>().await
            };
            redis.run_locked("item:5", renewing, body).await
        }
    });
    taken_rx.await.expect("the call took the lock");
    server.stop();
    let outcome = tokio::time::timeout(Duration::from_secs(20), call)
        .await
        .expect("the loss ends the call")
        .expect("no panic");
    assert!(
        matches!(outcome, Err(LockError::Lost { .. })),
        "{outcome:?}"
    );
    assert!(count("distributed_lock_renewal_failures_total") >= 1.0);
    let expired = value(
        &metrics,
        "distributed_lock_losses_total",
        r#"lock="item:<id>",reason="expired""#,
    );
    assert_eq!(expired, 2.0);
    assert_eq!(count("distributed_lock_held"), 0.0);
}
