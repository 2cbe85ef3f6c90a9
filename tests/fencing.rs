//! Fencing tokens only go up: across a restart that brings back an older
//! snapshot, and across Redlock quorums of different nodes.
mod support;

use std::time::Duration;

use lock_runtime::{LockClient, LockError, LockOptions};
use support::RedisServer;

async fn token(client: &LockClient, key: &str) -> u64 {
    client
        .run_locked(key, LockOptions::new(), async {
            Ok::<_, LockError>(lock_runtime::fencing_token().expect("held"))
        })
        .await
        .expect("locked call")
}

/// The snapshot keeps an older fence; after the restart the next token is
/// still above every token given before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_go_up_across_a_restart_from_an_older_snapshot() {
    let mut server = RedisServer::start_persistent();
    let client = LockClient::connect(&server.url()).await.expect("connect");
    let first = token(&client, "restored").await;
    server.save().expect("SAVE");
    let mut last = first;
    for _ in 0..3 {
        let next = token(&client, "restored").await;
        assert!(next > last, "{last} then {next}");
        last = next;
    }
    server.restart();
    assert_eq!(
        server.lock_value("lock:restored").map(|(fence, ..)| fence),
        Some(first),
        "the snapshot brought the older fence back"
    );
    // The first call after the restart may find the connection dropped.
    let mut after = None;
    for _ in 0..3 {
        let options = LockOptions::new().wait(Duration::from_secs(2));
        let call = client.run_locked("restored", options, async {
            Ok::<_, LockError>(lock_runtime::fencing_token().expect("held"))
        });
        if let Ok(token) = call.await {
            after = Some(token);
            break;
        }
    }
    let after = after.expect("a call succeeds after the restart");
    assert!(after > last, "{last} before the restart, {after} after");
}
