//! Before `init`, annotated calls fail with `NotInitialized`; `init` works
//! once.
use lock_runtime::{distributed_lock, LockClient, LockError, LockOptions};

#[distributed_lock(key = "job:<name>")]
async fn job(name: &str) -> Result<String, LockError> {
    Ok(name.to_uppercase())
}

#[tokio::test]
async fn calls_before_init_fail_and_init_works_once() {
    let error = job("nightly").await.expect_err("no client yet");
    assert!(matches!(error, LockError::NotInitialized), "{error:?}");
    assert!(error.to_string().contains("lock_runtime::init"), "{error}");
    let programmatic = lock_runtime::run_locked("job:x", LockOptions::new(), async {
        Ok::<_, LockError>(())
    })
    .await;
    assert!(matches!(programmatic, Err(LockError::NotInitialized)));

    lock_runtime::init(LockClient::in_memory()).expect("first init");
    let again = lock_runtime::init(LockClient::in_memory());
    assert!(
        matches!(again, Err(LockError::AlreadyInitialized)),
        "{again:?}"
    );
    assert_eq!(job("nightly").await.expect("runs now"), "NIGHTLY");
}
