//! What an error says, against a real server: the cause and the node in
//! `Display`, no credential, `source()` kept, and the helpers
//! `is_timeout`, `is_lost` and `is_retryable`.
mod support;

use std::error::Error as _;
use std::time::Duration;

use lock_runtime::{LockClient, LockError, LockOptions, LossReason};
use support::{Holder, RedisServer};

const SECRET: &str = "s3cret-pass";

async fn take(client: &LockClient, key: &str, wait: Duration) -> Result<(), LockError> {
    let options = LockOptions::new().wait(wait);
    client
        .run_locked(key, options, async { Ok::<_, LockError>(()) })
        .await
}

fn query(server: &RedisServer, args: &[&str]) {
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    let _: redis::Value = cmd.query(&mut server.connection()).expect("setup command");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_user_without_the_key_gets_noperm_with_the_node_and_no_password() {
    let server = RedisServer::start();
    // May run everything, but only on keys `other:*`, and no channels.
    query(
        &server,
        &[
            "ACL",
            "SETUSER",
            "limited",
            "on",
            &format!(">{SECRET}"),
            "~other:*",
            "+@all",
        ],
    );
    let url = format!("{}?user=limited&pass={SECRET}", server.url());
    let client = LockClient::connect(&url).await.expect("connect as limited");

    let error = take(&client, "order:1", Duration::ZERO)
        .await
        .expect_err("no access to lock:*");
    let shown = error.to_string();
    println!("{shown}");
    assert!(matches!(error, LockError::Backend { .. }), "{error:?}");
    assert!(shown.contains("NOPERM"), "{shown}");
    assert!(shown.contains("lock:order:1"), "{shown}");
    assert!(shown.contains("redis.sock"), "names the node: {shown}");
    assert!(!shown.contains(SECRET), "{shown}");
    assert!(!format!("{error:?}").contains(SECRET), "{error:?}");
    assert!(error.source().is_some());
    assert!(!error.is_retryable());
    assert!(!error.is_timeout() && !error.is_lost());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_value_at_the_key_is_named_and_not_retryable() {
    let server = RedisServer::start();
    query(&server, &["SET", "lock:plain", "not a lock"]);
    query(&server, &["HSET", "lock:hash", "owner", "x"]);
    // Layout 1's shape, but a state it does not define, and a fence past
    // what the scripts' numbers carry exactly (2^53 + 1).
    query(&server, &["SET", "lock:state", "L1:5:x:someone:1"]);
    query(&server, &["SET", "lock:fence", "L1:9007199254740993:f:"]);
    let client = LockClient::connect(&server.url()).await.expect("connect");
    for key in ["plain", "hash", "state", "fence"] {
        let error = take(&client, key, Duration::ZERO)
            .await
            .expect_err("foreign value");
        let shown = error.to_string();
        println!("{shown}");
        assert!(matches!(error, LockError::Backend { .. }), "{error:?}");
        assert!(shown.contains("LOCKLAYOUT"), "{shown}");
        assert!(shown.contains(&format!("lock:{key}")), "{shown}");
        assert!(!error.is_retryable());
        let error = client.inspect(key).await.expect_err("foreign value");
        let shown = error.to_string();
        println!("inspect: {shown}");
        assert!(matches!(error, LockError::Backend { .. }), "{error:?}");
        assert!(shown.contains("LOCKLAYOUT"), "{shown}");
        assert!(!error.is_retryable());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_names_the_node_and_is_retryable() {
    // A port nobody listens on; a lazy client connects on first use.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let client = LockClient::builder()
        .lazy_connect(true)
        .connect_timeout(Duration::from_millis(500))
        .connect(&format!("redis://127.0.0.1:{port}/"))
        .await
        .expect("lazy");
    let error = take(&client, "k", Duration::ZERO)
        .await
        .expect_err("refused");
    let shown = error.to_string();
    println!("{shown}");
    assert!(matches!(error, LockError::Backend { .. }), "{error:?}");
    assert!(shown.contains(&format!("127.0.0.1:{port}")), "{shown}");
    assert!(shown.contains("Connection refused"), "{shown}");
    assert!(error.source().is_some());
    assert!(error.is_retryable() && !error.is_timeout() && !error.is_lost());

    // Eagerly: the connect itself fails, also retryably.
    let error = LockClient::builder()
        .connect_timeout(Duration::from_millis(500))
        .connect(&format!("redis://127.0.0.1:{port}/"))
        .await
        .expect_err("refused");
    assert!(matches!(error, LockError::Connect(_)), "{error:?}");
    assert!(error.is_retryable(), "{error:?}");
    // A refusal is no sign of a TLS port: no `rediss://` hint.
    assert!(!error.to_string().contains("rediss"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_server_is_a_retryable_backend_error_naming_the_node() {
    let mut server = RedisServer::start();
    let client = LockClient::builder()
        .connect_timeout(Duration::from_millis(500))
        .command_timeout(Duration::from_millis(500))
        .connect(&server.url())
        .await
        .expect("connect");
    take(&client, "up", Duration::ZERO).await.expect("works");
    server.stop();
    let error = take(&client, "down", Duration::ZERO)
        .await
        .expect_err("server stopped");
    let shown = error.to_string();
    println!("{shown}");
    assert!(matches!(error, LockError::Backend { .. }), "{error:?}");
    assert!(shown.contains("redis.sock"), "{shown}");
    assert!(error.is_retryable(), "{error:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_and_lost_helpers() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.expect("connect");
    let holder = Holder::start(&client, "busy", LockOptions::new()).await;
    let error = take(&client, "busy", Duration::from_millis(50))
        .await
        .expect_err("held");
    assert!(error.is_timeout() && error.is_retryable() && !error.is_lost());
    holder.release().await.expect("released");

    // A body that outlives its lease without renewal is stopped: lost.
    let options = LockOptions::new()
        .lease(Duration::from_millis(100))
        .renew(false);
    let error = client
        .run_locked("short", options, async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok::<_, LockError>(())
        })
        .await
        .expect_err("outlived its lease");
    assert!(
        matches!(
            error,
            LockError::Lost {
                reason: LossReason::Expired,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(error.is_lost() && !error.is_retryable() && !error.is_timeout());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_demoted_to_replica_answers_readonly_which_is_retryable() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.expect("connect");
    take(&client, "k", Duration::ZERO).await.expect("works");
    // A failover demotes it: a replica of a master that is not there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    query(&server, &["REPLICAOF", "127.0.0.1", &port.to_string()]);
    let error = take(&client, "k", Duration::ZERO)
        .await
        .expect_err("read-only");
    let shown = error.to_string();
    println!("{shown}");
    assert!(matches!(error, LockError::Backend { .. }), "{error:?}");
    assert!(shown.contains("READONLY"), "{shown}");
    assert!(shown.contains("redis.sock"), "{shown}");
    assert!(error.is_retryable(), "{error:?}");
}

/// A key from a request cannot forge a log line: an error shows control
/// characters of its key (and of a fenced write's resource) escaped.
#[tokio::test]
async fn an_error_escapes_control_characters_of_its_key() {
    let client = lock_runtime::LockClient::in_memory();
    let key = "order:7\r\nINFO forged line\x1b[31m";
    let once = lock_runtime::LockOptions::new().wait(std::time::Duration::ZERO);
    let inner = client.run_locked(key, once, async { Ok::<_, lock_runtime::LockError>(()) });
    let outer = client.run_locked(key, once, async {
        // A call of another task, not a re-entry: spawned, it waits.
        let other = client.clone();
        let spawned = tokio::spawn(async move {
            other
                .run_locked(key, once, async { Ok::<_, lock_runtime::LockError>(()) })
                .await
        });
        Ok::<_, lock_runtime::LockError>(spawned.await.expect("task"))
    });
    drop(inner);
    let timeout = outer.await.expect("outer").expect_err("held");
    let write = |token| {
        client
            .fenced_write("res\nx")
            .token(token)
            .cmd("SET", ["{res\nx}:v"], 1)
            .run()
    };
    write(5).await.expect("the newer token writes");
    let refused = write(1).await.expect_err("an older token is refused");
    assert!(matches!(refused, lock_runtime::LockError::Fenced { .. }));
    let shown = [timeout.to_string(), refused.to_string()];
    for text in shown {
        assert!(!text.contains(['\r', '\n', '\x1b']), "{text:?}");
    }
    assert!(timeout
        .to_string()
        .contains(r"order:7\r\nINFO forged line\u{1b}[31m"));
}
