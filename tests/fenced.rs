//! Fenced writes (`LockClient::fenced_write`), on Redis and the embedded
//! backend: a holder writes many times with its own token; once a newer
//! holder wrote, an older token is refused with `LockError::Fenced` and
//! changes nothing; a write without a token is refused; the embedded
//! backend refuses a command outside its list; on Cluster, keys outside
//! the resource's slot are refused.
mod support;

use lock_runtime::redis::Value;
use lock_runtime::{fencing_token, LockClient, LockError, LockOptions};
use support::Kind;

/// `INCRBY key by` on `resource` with the running body's token, or `token`.
async fn incr(
    client: &LockClient,
    resource: &str,
    by: i64,
    token: Option<u64>,
) -> Result<i64, LockError> {
    let mut write = client.fenced_write(resource).cmd("INCRBY", [resource], by);
    if let Some(token) = token {
        write = write.token(token);
    }
    match write.run().await?.as_slice() {
        [Value::Int(n)] => Ok(*n),
        other => panic!("INCRBY answered {other:?}"),
    }
}

on_both_backends! {
    async fn a_holder_writes_many_times_with_its_own_token(env: Env) {
        let client = &env.client;
        let replies = client
            .run_locked("acct:1", LockOptions::new(), async {
                for i in 1..=10 {
                    assert_eq!(incr(client, "acct:1", 1, None).await?, i);
                }
                // Several commands in one write, answered in order.
                client
                    .fenced_write("acct:1")
                    .cmd("HSET", ["{acct:1}:h"], ("n", 5))
                    .cmd("HINCRBY", ["{acct:1}:h"], ("n", 2))
                    .cmd("PEXPIRE", ["{acct:1}:h"], 60_000)
                    .cmd_keys("DEL", ["{acct:1}:gone"])
                    .cmd("RPUSH", ["{acct:1}:log"], ("a", "b"))
                    .run()
                    .await
            })
            .await
            .expect("the holder's writes are accepted");
        assert_eq!(
            replies,
            vec![
                Value::Int(1),
                Value::Int(7),
                Value::Int(1),
                Value::Int(0),
                Value::Int(2)
            ]
        );
    }
}

on_both_backends! {
    async fn an_older_token_is_refused_once_a_newer_holder_wrote(env: Env) {
        let client = &env.client;
        let hold = |by: i64| async move {
            client
                .run_locked("acct:2", LockOptions::new(), async {
                    incr(client, "acct:2", by, None).await?;
                    Ok::<_, LockError>(fencing_token().expect("inside the body"))
                })
                .await
                .expect("a holder's write")
        };
        let old = hold(1).await;
        let new = hold(10).await;
        assert!(new > old, "tokens grow: {old} then {new}");

        // The old holder, come back late, writes with its token.
        let refused = incr(client, "acct:2", 1000, Some(old)).await;
        match &refused {
            Err(LockError::Fenced { resource, stored, given, .. }) => {
                assert_eq!((resource.as_str(), *stored, *given), ("acct:2", new, old));
            }
            other => panic!("the stale write was not refused: {other:?}"),
        }
        let text = refused.unwrap_err().to_string();
        assert!(text.contains("stop writing"), "{text}");
        // Nothing changed: the newer holder's state stands, and its own
        // token still writes.
        assert_eq!(incr(client, "acct:2", 0, Some(new)).await.unwrap(), 11);
    }
}

on_both_backends! {
    async fn a_write_without_a_token_is_refused(env: Env) {
        let refused = incr(&env.client, "acct:3", 1, None).await;
        assert!(
            matches!(&refused, Err(LockError::InvalidWrite { resource: key, .. }) if key == "acct:3"),
            "{refused:?}"
        );
        // Nothing was written: a first write with a token finds 0.
        assert_eq!(incr(&env.client, "acct:3", 0, Some(1)).await.unwrap(), 0);
    }
}

on_both_backends! {
    async fn the_embedded_backend_carries_only_its_list(env: Env) {
        let write = env
            .client
            .fenced_write("list:1")
            .token(5)
            .cmd("INCRBY", ["list:1"], 1)
            .cmd("LPUSH", ["list:1:log"], "x");
        let answer = write.run().await;
        match env.kind {
            Kind::Memory => {
                match &answer {
                    Err(LockError::InvalidWrite { resource: key, .. }) => assert!(key.contains("LPUSH"), "{key}"),
                    other => panic!("LPUSH was not refused: {other:?}"),
                }
                // Nothing ran: the counter is untouched.
                assert_eq!(incr(&env.client, "list:1", 0, Some(5)).await.unwrap(), 0);
            }
            Kind::Redis => {
                assert_eq!(answer.unwrap(), vec![Value::Int(1), Value::Int(1)]);
            }
        }
    }
}

/// On Cluster a fenced write runs on the master of the resource's slot;
/// keys of another slot are refused before anything is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_cluster_the_keys_must_share_the_resource_slot() {
    let cluster = lock_testkit::cluster::RedisCluster::start();
    let urls = cluster.urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let client = LockClient::builder()
        .connect_timeout(std::time::Duration::from_secs(5))
        .cluster(&urls)
        .await
        .expect("cluster connect");
    // `acct:9` and its fence key `{acct:9}:fence` share slot 9812;
    // `acct:10` is in slot 10138.
    let two_slots = client
        .fenced_write("acct:9")
        .token(7)
        .cmd("INCRBY", ["acct:9"], 1)
        .cmd("INCRBY", ["acct:10"], 1)
        .run()
        .await;
    assert!(
        matches!(&two_slots, Err(LockError::InvalidWrite { resource: key, .. }) if key == "acct:9"),
        "{two_slots:?}"
    );
    // Nothing ran; the resource's own slot is written, and fenced.
    assert_eq!(incr(&client, "acct:9", 1, Some(7)).await.unwrap(), 1);
    let stale = incr(&client, "acct:9", 1, Some(6)).await;
    assert!(
        matches!(
            stale,
            Err(LockError::Fenced {
                stored: 7,
                given: 6,
                ..
            })
        ),
        "{stale:?}"
    );
    assert_eq!(incr(&client, "acct:9", 0, Some(7)).await.unwrap(), 1);
}

on_both_backends! {
    async fn a_leader_writes_with_its_term_token_and_a_later_term_fences_it(env: Env) {
        let client = env.client.clone();
        let mut tokens = Vec::new();
        for _ in 0..2 {
            let (tx, rx) = tokio::sync::oneshot::channel();
            let tx = std::sync::Mutex::new(Some(tx));
            client
                .lead("leader:1", LockOptions::new(), |term| {
                    let (client, tx) = (client.clone(), tx.lock().unwrap().take());
                    async move {
                        // The term's token, taken from the term itself.
                        let n = incr(&client, "leader:1", 1, None).await?;
                        if let Some(tx) = tx {
                            let _ = tx.send((term.token(), n));
                        }
                        Ok::<_, LockError>(())
                    }
                })
                .await
                .expect("a term");
            tokens.push(rx.await.expect("the term wrote"));
        }
        let [(first, n1), (second, n2)] = tokens[..] else {
            unreachable!()
        };
        assert!((second > first) && (n1, n2) == (1, 2), "{tokens:?}");
        // The first term's token, late, is refused.
        let stale = incr(&client, "leader:1", 1, Some(first)).await;
        assert!(
            matches!(stale, Err(LockError::Fenced { stored, given, .. }) if stored == second && given == first),
            "{stale:?}"
        );
    }
}

/// A Redlock client refuses a fenced write: it is not a quorum operation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redlock_client_refuses_a_fenced_write() {
    let servers: Vec<support::RedisServer> =
        (0..3).map(|_| support::RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let client = LockClient::redlock(&urls).await.expect("redlock connect");
    let refused = incr(&client, "acct:11", 1, Some(1)).await;
    assert!(
        matches!(&refused, Err(LockError::InvalidWrite { resource: key, message, .. }) if key == "acct:11" && message.contains("Redlock") && message.contains("run_on")),
        "{refused:?}"
    );
    // Nothing was written on any node.
    for server in &servers {
        let found: u64 = lock_runtime::redis::cmd("EXISTS")
            .arg(&["acct:11", "{acct:11}:fence"])
            .query(&mut server.connection())
            .expect("EXISTS");
        assert_eq!(found, 0);
    }
}

/// `run_on`: a fenced write on a connection of the user's, the form a
/// Redlock client takes, with the same fence; no installed client needed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redlock_client_writes_through_a_connection_of_the_users() {
    let servers: Vec<support::RedisServer> =
        (0..3).map(|_| support::RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let client = LockClient::redlock(&urls).await.expect("redlock connect");
    let store = support::RedisServer::start();
    let mut con = lock_runtime::redis::Client::open(store.url())
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect to the store");

    let hold = |by: i64| {
        let (client, mut con) = (&client, con.clone());
        async move {
            client
                .run_locked("acct:12", LockOptions::new(), async {
                    let replies = lock_runtime::fenced("acct:12")
                        .cmd("INCRBY", ["acct:12"], by)
                        .run_on(&mut con)
                        .await?;
                    Ok::<_, LockError>((fencing_token().expect("in the body"), replies))
                })
                .await
                .expect("a holder's write")
        }
    };
    let (old, replies) = hold(1).await;
    assert_eq!(replies, vec![Value::Int(1)]);
    let (new, replies) = hold(10).await;
    assert_eq!(replies, vec![Value::Int(11)]);
    assert!(new > old, "tokens grow: {old} then {new}");

    let refused = lock_runtime::fenced("acct:12")
        .token(old)
        .cmd("INCRBY", ["acct:12"], 1000)
        .run_on(&mut con)
        .await;
    match &refused {
        Err(LockError::Fenced {
            resource,
            stored,
            given,
            ..
        }) => {
            assert_eq!((resource.as_str(), *stored, *given), ("acct:12", new, old));
        }
        other => panic!("the stale write was not refused: {other:?}"),
    }
    let balance: i64 = lock_runtime::redis::cmd("GET")
        .arg("acct:12")
        .query(&mut store.connection())
        .expect("GET");
    assert_eq!(balance, 11, "the stale write changed nothing");
    // The locks' nodes hold no resource.
    for server in &servers {
        let found: u64 = lock_runtime::redis::cmd("EXISTS")
            .arg(&["acct:12", "{acct:12}:fence"])
            .query(&mut server.connection())
            .expect("EXISTS");
        assert_eq!(found, 0);
    }
}

on_both_backends! {
    /// `{x}` is fenced where `x` is (`{x}:fence`): a write to the braced
    /// name is refused, naming the other resource, rather than refused with
    /// `Fenced` because the other resource's holder wrote.
    async fn a_resource_that_shares_another_resources_fence_is_refused(env: Env) {
        for (plain, braced) in [("x", "{x}"), ("a}b", "{a}b}")] {
            assert_eq!(incr(&env.client, plain, 1, Some(200)).await.unwrap(), 1);
            match incr(&env.client, braced, 1, Some(100)).await {
                Err(LockError::InvalidWrite { resource: key, message, .. }) => {
                    assert!(key.contains(&format!("resource {plain}'s")), "{key}");
                    assert!(message.contains("fence"), "{message}");
                }
                other => panic!("{braced} after {plain}: {other:?}"),
            }
            // The plain one writes on, with its own token.
            assert_eq!(incr(&env.client, plain, 1, Some(200)).await.unwrap(), 2);
        }
    }
}

on_both_backends! {
    /// A write may not reset its own fence: a command that names the fence
    /// key, or a keyless FLUSHDB, is refused and nothing runs; an older
    /// token is still refused after it.
    async fn a_write_cannot_reset_its_own_fence(env: Env) {
        let client = &env.client;
        assert_eq!(incr(client, "r", 1, Some(200)).await.unwrap(), 1);
        let cleanup = client
            .fenced_write("r")
            .token(200)
            .cmd_keys("DEL", ["r", "{r}:fence"])
            .run()
            .await;
        match &cleanup {
            Err(LockError::InvalidWrite { resource: key, .. }) => assert!(key.contains("DEL"), "{key}"),
            other => panic!("a DEL of the fence ran: {other:?}"),
        }
        let flush = client.fenced_write("r").token(200).cmd_keys("flushdb", [] as [&str; 0]);
        match flush.run().await {
            Err(LockError::InvalidWrite { resource: key, .. }) => assert!(key.contains("flushdb"), "{key}"),
            other => panic!("FLUSHDB ran: {other:?}"),
        }
        // Nothing ran: the counter and the fence are as they were.
        assert_eq!(incr(client, "r", 0, Some(200)).await.unwrap(), 1);
        assert!(matches!(
            incr(client, "r", 1, Some(100)).await,
            Err(LockError::Fenced { stored: 200, given: 100, .. })
        ));
    }
}

/// The script refuses the same commands itself, before anything runs, for
/// a caller that sends it by hand.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_script_refuses_a_command_on_the_fence_key() {
    let server = support::RedisServer::start();
    let mut con = server.connection();
    let script = lock_runtime::redis::Script::new(
        lock_runtime::__private::script_source("fenced_write").expect("the script"),
    );
    let mut write = |keys: &[&str], name: &str| {
        let mut call = script.key("{r}:fence");
        for key in keys {
            call.key(*key);
        }
        call.arg(100)
            .arg("r")
            .arg(1)
            .arg(name)
            .arg(keys.len())
            .arg(0);
        call.invoke::<lock_runtime::redis::Value>(&mut con)
    };
    let refused = write(&["{r}:fence"], "DEL").expect_err("refused");
    assert!(refused.to_string().contains("fence key"), "{refused}");
    let refused = write(&[], "FlushAll").expect_err("refused");
    assert!(refused.to_string().contains("FlushAll"), "{refused}");
    // Nothing ran, not even the fence's write.
    let fence: Option<String> = lock_runtime::redis::cmd("GET")
        .arg("{r}:fence")
        .query(&mut server.connection())
        .expect("GET");
    assert_eq!(fence, None);
}

/// `lock_runtime::fenced` writes through the client in use, as a locked
/// call does: the scoped one (`with_client`) before the global one (none is
/// installed in this test).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_free_function_writes_through_the_scoped_client() {
    let client = LockClient::in_memory();
    let body = async {
        let replies = lock_runtime::fenced("scoped:1")
            .cmd("INCRBY", ["scoped:1"], 5)
            .run()
            .await?;
        Ok::<_, LockError>(replies)
    };
    let call = lock_runtime::run_locked("scoped:1", LockOptions::new(), body);
    let replies = lock_runtime::with_client(client.clone(), call)
        .await
        .expect("written through the scoped client");
    assert_eq!(replies, vec![Value::Int(5)]);
    // On that client's backend.
    assert_eq!(
        incr(&client, "scoped:1", 1, Some(u64::MAX >> 12))
            .await
            .unwrap(),
        6
    );
}

on_both_backends! {
    /// A write whose second command fails says that the first one ran and
    /// stays written, names the resource, and is not retryable.
    async fn a_failing_command_says_which_commands_ran(env: Env) {
        let error = env
            .client
            .fenced_write("mixed:1")
            .token(7)
            .cmd("INCRBY", ["mixed:1"], 3)
            .cmd("RPUSH", ["mixed:1:log"], "x")
            .cmd("INCRBY", ["mixed:1:log"], 1)
            .run()
            .await
            .expect_err("INCRBY on a list fails");
        match &error {
            LockError::WriteFailed {
                resource, ran, source, ..
            } => {
                assert_eq!(resource, "mixed:1");
                assert_eq!(*ran, lock_runtime::WriteRan::Partly, "{error}");
                // Redis 7 and Valkey answer WRONGTYPE; Redis 6.2 wraps it
                // in its "Error running script" ERR.
                assert!(source.to_string().contains("WRONGTYPE"), "{source}");
            }
            other => panic!("expected WriteFailed, got {other:?}"),
        }
        assert!(!error.is_retryable(), "{error}");
        assert_eq!(error.resource(), Some("mixed:1"));
        let text = error.to_string();
        assert!(text.starts_with("fenced write to `mixed:1` on "), "{text}");
        assert!(text.contains("before the failing one ran"), "{text}");
        // The first command ran and stays written.
        assert_eq!(incr(&env.client, "mixed:1", 0, Some(7)).await.unwrap(), 3);
    }
}

/// A write to a server that is gone says that nothing ran (the
/// connection is refused), and may be sent again; one whose answer is lost
/// says so and may not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_that_never_reached_redis_says_nothing_ran() {
    let mut server = support::RedisServer::start();
    let client = LockClient::builder()
        .connect_timeout(std::time::Duration::from_millis(500))
        .command_timeout(std::time::Duration::from_millis(500))
        .connect(&server.url())
        .await
        .expect("connect");
    assert_eq!(incr(&client, "gone:1", 1, Some(3)).await.unwrap(), 1);
    server.stop();
    let mut seen = Vec::new();
    for _ in 0..3 {
        let error = incr(&client, "gone:1", 1, Some(3))
            .await
            .expect_err("no server");
        let LockError::WriteFailed { resource, ran, .. } = &error else {
            panic!("expected WriteFailed, got {error:?}");
        };
        assert_eq!(resource, "gone:1");
        assert_eq!(
            error.is_retryable(),
            *ran == lock_runtime::WriteRan::No,
            "{error}"
        );
        seen.push(*ran);
    }
    assert!(seen.contains(&lock_runtime::WriteRan::No), "{seen:?}");
}

/// A write whose answer is lost (the connection stalls after it was sent)
/// says that it may have run, and is not retryable; it did run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_whose_answer_is_lost_says_it_may_have_run() {
    let server = lock_testkit::Server::tcp(&[]);
    let proxy =
        lock_testkit::Proxy::start(([127, 0, 0, 1], server.port()).into()).expect("the proxy");
    let client = LockClient::builder()
        .command_timeout(std::time::Duration::from_millis(300))
        .connect(&format!("redis://{}/", proxy.addr()))
        .await
        .expect("connect through the proxy");
    assert_eq!(incr(&client, "stall:1", 1, Some(3)).await.unwrap(), 1);
    proxy.freeze();
    let error = incr(&client, "stall:1", 1, Some(3))
        .await
        .expect_err("no answer while frozen");
    let LockError::WriteFailed { resource, ran, .. } = &error else {
        panic!("expected WriteFailed, got {error:?}");
    };
    assert_eq!(resource, "stall:1");
    assert_eq!(*ran, lock_runtime::WriteRan::Unknown, "{error}");
    assert!(!error.is_retryable(), "{error}");
    assert!(error.to_string().contains("may have run"), "{error}");
    // It reaches Redis once the connection moves again, and runs there.
    proxy.thaw();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let value: Option<i64> = redis::cmd("GET")
            .arg("stall:1")
            .query(&mut server.connection())
            .expect("GET");
        if value == Some(2) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the write never ran: {value:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
