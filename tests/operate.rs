//! What an operator has: named connections, `inspect`, `held` and
//! `force_unlock`, on one node, on Redlock and in memory.
mod support;

use std::time::{Duration, SystemTime};

use lock_runtime::{fencing_token, FoundBy, LockClient, LockError, LockOptions, LossReason};
use support::{eventually, Holder, RedisServer};
use tokio::time::Instant;

fn client_list(server: &RedisServer) -> String {
    redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut server.connection())
        .expect("CLIENT LIST")
}

fn query<T: redis::FromRedisValue>(server: &RedisServer, args: &[&str]) -> T {
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    cmd.query(&mut server.connection()).expect("command")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_list_shows_every_connection_by_name() {
    let server = RedisServer::start();
    let named = LockClient::builder()
        .client_name("checkout 7")
        .connect(&server.url())
        .await
        .expect("connect");
    let default = LockClient::connect(&server.url()).await.expect("connect");
    let list = client_list(&server);
    println!("{list}");
    // The command connection and the pub/sub connection of each client.
    assert_eq!(list.matches("name=checkout_7 ").count(), 2, "{list}");
    let default_name = format!("@{}:{} ", hostname(), std::process::id());
    let defaults = list
        .lines()
        .filter(|l| l.contains("name=lock-runtime:") && l.contains(&default_name))
        .count();
    assert_eq!(defaults, 2, "{list}");
    drop((named, default));
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .expect("hostname")
        .trim()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_client_setname_still_connects_and_locks() {
    let server = RedisServer::start();
    let rules = ["ACL", "SETUSER", "plain", "on", ">pw", "~*", "&*", "+@all"];
    let without_setname = redis::cmd("ACL")
        .arg(&rules[1..])
        .arg("-client|setname")
        .query::<()>(&mut server.connection());
    if let Err(refused) = without_setname {
        // A server that cannot take one subcommand away (Redis 6.2) takes
        // CLIENT away whole: the client's only CLIENT command is SETNAME.
        println!("-client|setname refused ({refused}); taking -client instead");
        let _: () = redis::cmd("ACL")
            .arg(&rules[1..3])
            .arg("reset")
            .arg(&rules[3..])
            .arg("-client")
            .query(&mut server.connection())
            .expect("ACL SETUSER without CLIENT");
    }
    let url = format!("{}?user=plain&pass=pw", server.url());
    let client = LockClient::builder()
        .client_name("refused")
        .connect(&url)
        .await
        .expect("connect without CLIENT SETNAME");
    client
        .run_locked("k", LockOptions::new(), async { Ok::<_, LockError>(()) })
        .await
        .expect("locks");
    assert!(!client_list(&server).contains("name=refused"));
    let info = client.inspect("k").await.expect("inspect");
    assert!(!info.is_held());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_names_the_holder_its_ttl_and_token_and_a_freed_lock_reads_free() {
    let server = RedisServer::start();
    let holder_client = LockClient::builder()
        .client_name("holder-a")
        .connect(&server.url())
        .await
        .expect("connect");
    let operator = LockClient::connect(&server.url()).await.expect("connect");

    let never = operator.inspect("order:1").await.expect("inspect");
    assert!(!never.is_held());
    assert_eq!((never.ttl, never.fencing_token), (None, None));
    assert_eq!(never.key, "lock:order:1");

    let (token_tx, token_rx) = tokio::sync::oneshot::channel();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let body = {
        let client = holder_client.clone();
        tokio::spawn(async move {
            let options = LockOptions::new().lease(Duration::from_secs(20));
            client
                .run_locked("order:1", options, async {
                    token_tx.send(fencing_token().expect("held")).expect("test");
                    let _ = done_rx.await;
                    Ok::<_, LockError>(())
                })
                .await
        })
    };
    let token = token_rx.await.expect("holder took it");

    let started = Instant::now();
    let info = operator.inspect("order:1").await.expect("inspect");
    println!("{info:?} in {:?}", started.elapsed());
    let holder = info.holder.clone().expect("held");
    assert_eq!(info.fencing_token, Some(token));
    let ttl = info.ttl.expect("a lease");
    assert!(
        ttl <= Duration::from_secs(20) && ttl > Duration::from_secs(10),
        "{ttl:?}"
    );
    assert!(holder.owner.starts_with(&holder.client_id), "{holder:?}");
    let about = holder.client.expect("the holder's registry entry");
    assert_eq!(about.name, "holder-a");
    assert_eq!(about.pid, std::process::id());
    assert_eq!(about.host, hostname());
    assert!(about.started <= SystemTime::now());
    assert_eq!(about.version, env!("CARGO_PKG_VERSION"));

    // The registry entry lives a while, not forever.
    let entry = format!("lock:client:{}", holder.client_id);
    let entry_ttl: i64 = query(&server, &["PTTL", &entry]);
    assert!(entry_ttl > 60_000 && entry_ttl <= 90_000, "{entry_ttl}");

    done_tx.send(()).expect("body waits");
    body.await.expect("task").expect("released");
    let freed = operator.inspect("order:1").await.expect("inspect");
    assert!(!freed.is_held(), "{freed:?}");
    assert_eq!(freed.fencing_token, Some(token));
    // The key is still there: EXISTS does not tell whether a lock is held.
    let exists: i64 = query(&server, &["EXISTS", "lock:order:1"]);
    assert_eq!(exists, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_on_memory_and_held_lists_this_clients_locks() {
    let client = LockClient::builder().client_name("mem").in_memory();
    assert!(client.held().is_empty());
    let renewing = Holder::start(&client, "a", LockOptions::new()).await;
    let options = LockOptions::new()
        .lease(Duration::from_secs(30))
        .renew(false);
    let fixed = Holder::start(&client, "b", options).await;

    let info = client.inspect("a").await.expect("inspect");
    let about = info.holder.expect("held").client.expect("own entry");
    assert_eq!(about.name, "mem");
    assert!(info.ttl.is_some() && info.fencing_token.is_some());

    let mut held = client.held();
    held.sort_by(|x, y| x.key.cmp(&y.key));
    assert_eq!(held.len(), 2, "{held:?}");
    assert_eq!(held[0].key, "lock:a");
    assert!(held[0].renewing);
    assert_eq!(held[1].key, "lock:b");
    assert!(!held[1].renewing);
    assert_eq!(held[1].lease, Duration::from_secs(30));
    assert!(held[1].held_for < Duration::from_secs(30));
    assert_ne!(held[0].fencing_token, held[1].fencing_token);

    renewing.release().await.expect("released");
    fixed.release().await.expect("released");
    assert!(client.held().is_empty());
    assert!(!client.inspect("a").await.expect("inspect").is_held());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_wakes_a_waiter_elsewhere_at_once_and_the_holder_learns_an_operator_freed_it()
{
    let server = RedisServer::start();
    let url = server.url();
    let connect = || LockClient::connect(&url);
    let (holder_client, waiter_client, operator) = (
        connect().await.expect("connect"),
        connect().await.expect("connect"),
        connect().await.expect("connect"),
    );
    let lease = Duration::from_secs(6);
    let holder = Holder::start(&holder_client, "stuck", LockOptions::new().lease(lease)).await;
    let holder_token = operator
        .inspect("stuck")
        .await
        .expect("inspect")
        .fencing_token
        .expect("held");

    let waiter = tokio::spawn(async move {
        let options = LockOptions::new().wait(Duration::from_secs(30));
        waiter_client
            .run_locked("stuck", options, async {
                Ok::<_, LockError>((Instant::now(), fencing_token().expect("held")))
            })
            .await
    });
    // The waiter found it held (marked `w`) and has had time to subscribe.
    let waiting = eventually(Duration::from_secs(10), || {
        server
            .lock_value("lock:stuck")
            .is_some_and(|(_, state, _)| state == "w")
    })
    .await;
    assert!(waiting, "the waiter did not find the lock held");
    tokio::time::sleep(Duration::from_millis(300)).await;

    let forced = Instant::now();
    assert!(operator.force_unlock("stuck").await.expect("force"));
    let (got_it, token) = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("waiter ends")
        .expect("task")
        .expect("the waiter took the lock");
    let woke = got_it.saturating_duration_since(forced);
    println!("waiter took the lock {woke:?} after the force-unlock");
    assert!(woke < Duration::from_secs(2), "{woke:?}");
    assert!(token > holder_token, "tokens never go back");

    match tokio::time::timeout(Duration::from_secs(10), holder.outcome()).await {
        Ok(Err(LockError::Lost { reason, .. })) => assert_eq!(reason, LossReason::ForceUnlocked),
        other => panic!("expected Lost Taken, got {other:?}"),
    }
    let stopped = forced.elapsed();
    println!("holder stopped {stopped:?} after the force-unlock");
    assert!(stopped < lease, "{stopped:?}");

    assert!(!operator.force_unlock("stuck").await.expect("force"));
    assert!(operator.force_unlock("").await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_on_memory_stops_the_holder_at_once() {
    let client = LockClient::in_memory();
    let holder = Holder::start(&client, "m", LockOptions::new()).await;
    let waiter = {
        let client = client.clone();
        tokio::spawn(async move {
            let options = LockOptions::new().wait(Duration::from_secs(30));
            client
                .run_locked("m", options, async { Ok::<_, LockError>(()) })
                .await
        })
    };
    assert!(client.force_unlock("m").await.expect("force"));
    match tokio::time::timeout(Duration::from_secs(5), holder.outcome()).await {
        Ok(Err(error @ LockError::Lost { .. })) => {
            let shown = error.to_string();
            assert!(shown.contains("force_unlock"), "{shown}");
            let LockError::Lost {
                reason, found_by, ..
            } = error
            else {
                unreachable!()
            };
            assert_eq!(reason, LossReason::ForceUnlocked);
            assert_eq!(found_by, FoundBy::ForceUnlock);
        }
        other => panic!("expected Lost Taken, got {other:?}"),
    }
    tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("waiter ends")
        .expect("task")
        .expect("the waiter took the lock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_inspect_reports_the_quorum_and_force_unlock_frees_it() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(|node| node.url()).collect();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let builder = || LockClient::builder().node_timeout(Duration::from_millis(500));
    let holder_client = builder()
        .client_name("redlock-holder")
        .redlock(&urls)
        .await
        .expect("connect");
    let operator = builder().redlock(&urls).await.expect("connect");
    for server in &servers {
        let list = client_list(server);
        assert_eq!(list.matches("name=redlock-holder ").count(), 2, "{list}");
    }

    let options = LockOptions::new().lease(Duration::from_secs(3));
    let holder = Holder::start(&holder_client, "q", options).await;
    let info = operator.inspect("q").await.expect("inspect");
    let about = info.holder.clone().expect("held").client.expect("entry");
    assert_eq!(about.name, "redlock-holder");
    assert!(
        info.ttl.is_some() && info.fencing_token.is_some(),
        "{info:?}"
    );

    // One node forgets it: a quorum still holds it.
    let _: i64 = query(&servers[0], &["DEL", "lock:q"]);
    assert!(operator.inspect("q").await.expect("inspect").is_held());

    assert!(operator.force_unlock("q").await.expect("force"));
    let freed = operator.inspect("q").await.expect("inspect");
    assert!(!freed.is_held(), "{freed:?}");
    match tokio::time::timeout(Duration::from_secs(10), holder.outcome()).await {
        Ok(Err(LockError::Lost { reason, .. })) => assert_eq!(reason, LossReason::ForceUnlocked),
        other => panic!("expected Lost Taken, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_remade_after_a_restart_get_their_name_again() {
    let mut server = RedisServer::start();
    let client = LockClient::builder()
        .client_name("survivor")
        .connect_timeout(Duration::from_millis(500))
        .command_timeout(Duration::from_millis(500))
        .connect(&server.url())
        .await
        .expect("connect");
    server.restart();
    let named = eventually(Duration::from_secs(15), || {
        client_list(&server).matches("name=survivor ").count() == 2
    })
    .await;
    assert!(named, "{}", client_list(&server));
    client
        .run_locked("after", LockOptions::new(), async {
            Ok::<_, LockError>(())
        })
        .await
        .expect("works after the restart");
}

#[tokio::test(flavor = "current_thread")]
async fn a_callers_own_connection_is_named_too() {
    let server = RedisServer::start();
    let client = LockClient::builder()
        .client_name("local-too")
        .connect(&server.url())
        .await
        .expect("connect");
    // A current-thread runtime that keeps calling gets a connection of its
    // own after a few calls (see route/local.rs).
    let mut named = false;
    for _ in 0..200 {
        client
            .run_locked("k", LockOptions::new(), async { Ok::<_, LockError>(()) })
            .await
            .expect("locks");
        if client_list(&server).matches("name=local-too ").count() == 3 {
            named = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(named, "{}", client_list(&server));
}

/// The ACL LOG's count of refusals that concern the key `prefix*`.
fn acl_refusals(server: &RedisServer, prefix: &str) -> i64 {
    let entries: Vec<std::collections::HashMap<String, redis::Value>> =
        query(server, &["ACL", "LOG"]);
    entries
        .iter()
        .filter(|e| {
            matches!(e.get("object"), Some(redis::Value::BulkString(o)) if o.starts_with(prefix.as_bytes()))
        })
        .map(|e| match e.get("count") {
            Some(redis::Value::Int(n)) => *n,
            _ => 0,
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_that_may_not_write_the_registry_is_refused_once_and_still_locks() {
    let server = RedisServer::start();
    let _: () = query(
        &server,
        &[
            "ACL",
            "SETUSER",
            "orders",
            "on",
            ">pw",
            "~lock:order:*",
            "&*",
            "+@all",
        ],
    );
    let url = format!("{}?user=orders&pass=pw", server.url());
    let client = LockClient::builder()
        .client_name("orders-only")
        .connect(&url)
        .await
        .expect("connect");
    let refused = acl_refusals(&server, "lock:client:");
    assert!(refused >= 1, "the first write was refused");

    // Reconnect (the server drops the client's connections): the client
    // names them again but does not try the entry again.
    let _: i64 = query(&server, &["CLIENT", "KILL", "USER", "orders"]);
    let named = eventually(Duration::from_secs(15), || {
        client_list(&server).matches("name=orders-only ").count() == 2
    })
    .await;
    assert!(named, "{}", client_list(&server));
    assert_eq!(acl_refusals(&server, "lock:client:"), refused);

    let holder = Holder::start(&client, "order:1", LockOptions::new()).await;
    let operator = LockClient::connect(&server.url()).await.expect("connect");
    let info = operator.inspect("order:1").await.expect("inspect");
    let who = info.holder.expect("held");
    assert_eq!(who.client, None, "no entry to read");
    holder.release().await.expect("released");
}

on_both_backends! {
    /// `inspect` and `force_unlock` take the key without the client's
    /// prefix. A held lock's full key given instead (`lock:order:7`, where
    /// `lock:lock:order:7` holds nothing) is refused as `Invalid`, saying so;
    /// the lock is left alone. Any other key that starts with the prefix is
    /// read as given, since an attribute's key may itself start with it.
    async fn a_held_locks_full_key_is_refused_and_other_prefixed_keys_are_read_as_given(
        env: Env
    ) {
        let client = env.client.clone();
        let holder = Holder::start(&client, "order:7", LockOptions::new()).await;

        let refused = client.inspect("lock:order:7").await;
        let Err(error @ LockError::Invalid { .. }) = refused else {
            panic!("a held lock's full key, inspected: {refused:?}");
        };
        assert_eq!(error.key(), Some("lock:order:7"));
        let message = error.to_string();
        assert!(message.contains("without the client's prefix"), "{message}");
        assert!(message.contains("as the attribute names it"), "{message}");

        let refused = client.force_unlock("lock:order:7").await;
        assert!(
            matches!(refused, Err(LockError::Invalid { .. })),
            "a held lock's full key, force-unlocked: {refused:?}"
        );
        assert!(client.inspect("order:7").await.expect("inspect").is_held());

        // A key that starts with the prefix and names a lock of its own.
        let own = Holder::start(&client, "lock:job", LockOptions::new()).await;
        let info = client.inspect("lock:job").await.expect("inspect");
        assert_eq!(info.key, "lock:lock:job");
        assert!(info.is_held());
        // Nothing at either key: read (and freed) as given.
        let info = client.inspect("lock:none").await.expect("inspect");
        assert_eq!(info.key, "lock:lock:none");
        assert!(!info.is_held());
        assert!(!client.force_unlock("lock:none").await.expect("force"));
        assert!(client.force_unlock("lock:job").await.expect("force"));
        let lost = own.release().await;
        assert!(matches!(lost, Err(LockError::Lost { .. })), "{lost:?}");

        holder.release().await.expect("the lock was left alone");
    }
}
