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
