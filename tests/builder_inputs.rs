//! Out-of-range builder values are clamped to what they can mean: a call
//! still runs, and nothing panics.
use std::time::Duration;

use lock_runtime::{LockClient, LockError, LockOptions};

#[tokio::test]
async fn a_drift_factor_out_of_range_or_not_a_number_is_clamped() {
    for factor in [f64::NAN, -1.0, 7.5, f64::INFINITY] {
        let client = LockClient::builder()
            .clock_drift_factor(factor)
            .renewal_batch_size(0)
            .in_memory();
        let options = LockOptions::new().lease(Duration::from_secs(1));
        let result = client
            .run_locked("drift", options, async { Ok::<_, LockError>(factor) })
            .await;
        assert!(result.is_ok(), "factor {factor}: {result:?}");
    }
}

/// A lease shorter than the drift margin would always end in `Lost`: the
/// call is refused before it takes anything.
#[tokio::test]
async fn a_lease_too_short_for_the_drift_margin_is_refused() {
    let client = LockClient::in_memory();
    for lease in [
        Duration::ZERO,
        Duration::from_millis(2),
        Duration::from_millis(9),
    ] {
        let options = LockOptions::new().lease(lease);
        let result = client
            .run_locked("short", options, async { Ok::<_, LockError>(()) })
            .await;
        assert!(
            matches!(&result, Err(LockError::Invalid { key, .. }) if key == "lock:short"),
            "{lease:?}: {result:?}"
        );
    }
    let options = LockOptions::new().lease(LockOptions::SHORTEST_LEASE);
    let result = client
        .run_locked("short", options, async { Ok::<_, LockError>(()) })
        .await;
    // The shortest lease is accepted: the call is not refused as invalid.
    // Whether a 10 ms lease outlives the empty body depends on how busy the
    // machine is, so a lease found lost is an accepted call too.
    assert!(
        matches!(&result, Ok(()) | Err(LockError::Lost { .. })),
        "{result:?}"
    );
}

/// The constructors that take several URLs take any iterator of strings:
/// a `&Vec<String>` from configuration, an array, a slice. (Nothing listens
/// on these ports: each fails to connect, with an error that says so.)
#[tokio::test]
async fn several_urls_come_as_any_iterator_of_strings() {
    let port = lock_testkit::free_port().expect("a free port");
    let urls: Vec<String> = (0..3)
        .map(|i| format!("redis://127.0.0.1:{}/{i}", port))
        .collect();
    let quick = || LockClient::builder().connect_timeout(Duration::from_millis(200));
    assert!(matches!(
        quick().cluster(&urls).await,
        Err(LockError::Connect(_))
    ));
    assert!(matches!(
        quick().redlock(&urls).await,
        Err(LockError::Connect(_))
    ));
    let sentinel = quick().sentinel(urls.iter().map(String::as_str), "mymaster");
    assert!(matches!(sentinel.await, Err(LockError::Connect(_))));
    assert!(matches!(
        LockClient::cluster(["redis://127.0.0.1:1/"]).await,
        Err(LockError::Connect(_))
    ));
}
