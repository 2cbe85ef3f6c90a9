//! ACL users: the least-privilege user of the security guide runs the whole
//! behaviour; a user without channel rights (Redis 7's default
//! `resetchannels`) still waits within `wait` and releases successfully.
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_runtime::{LockClient, LockError, LockOptions};
use lock_testkit::Server;
use support::contention_with_wakeup;
use tokio::sync::Notify;

const PASSWORD: &str = "acl-test-pw";

/// The security guide's `ACL SETUSER` command, split into arguments, with
/// the test's password: the guide is the one place the rules are written.
fn guide_acl() -> Vec<String> {
    guide_line("<!-- acl-rules:")
}

/// The guide's line for Redis 6.2, which has no sharded pub/sub.
fn guide_acl_62() -> Vec<String> {
    guide_line("<!-- acl-rules-6.2:")
}

/// The first `ACL SETUSER locker` line after `marker` in the security
/// guide, split into arguments, with the test's password.
fn guide_line(marker: &str) -> Vec<String> {
    let guide = include_str!("../lock-runtime/src/guide/security.md");
    let after = &guide[guide.find(marker).expect("the guide's ACL marker")..];
    let line = after
        .lines()
        .find(|l| l.starts_with("ACL SETUSER locker "))
        .expect("the security guide's ACL line");
    line.split_whitespace()
        .map(|arg| match arg {
            ">password" => format!(">{PASSWORD}"),
            _ => arg.to_owned(),
        })
        .collect()
}

#[test]
fn the_guides_two_acl_lines_differ_by_the_sharded_rules_only() {
    let without: Vec<String> = guide_acl()
        .into_iter()
        .filter(|arg| !SHARDED_RULES.contains(&arg.as_str()))
        .collect();
    assert_eq!(without, guide_acl_62());
}

/// Every command a library script calls (`redis.call('x'`, `redis.pcall`,
/// and the renewal's local `call('x'`) is granted by both of the guide's
/// lines: a command left out fails every call of the kind that needs it.
#[test]
fn the_guides_lines_grant_every_command_the_scripts_call() {
    let mut called = std::collections::BTreeSet::new();
    for name in lock_runtime::__private::script_names() {
        let source = lock_runtime::__private::script_source(name).expect("a library script");
        for (at, _) in source.match_indices("call('") {
            let rest = &source[at + "call('".len()..];
            let command: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphabetic())
                .collect();
            called.insert(command.to_lowercase());
        }
    }
    assert!(
        called.contains("hdel") && called.contains("mget"),
        "{called:?}"
    );
    for line in [guide_acl(), guide_acl_62()] {
        for command in &called {
            let rule = format!("+{command}");
            assert!(
                line.contains(&rule),
                "the guide's line lacks {rule}: {line:?}"
            );
        }
    }
}

/// The rules of Redis 7.0's sharded pub/sub (Cluster's release channels),
/// which Redis 6.2 does not know.
const SHARDED_RULES: [&str; 3] = ["+spublish", "+ssubscribe", "+sunsubscribe"];

/// Creates a user by `ACL SETUSER` with `args` (`ACL SETUSER` and the
/// rules), and gives its URL. A server that refuses one of the sharded
/// pub/sub rules as unknown (Redis 6.2) gets the same rules without them,
/// after a `reset` of whatever the refused line left: found by asking the
/// server, not by its version.
fn create_user(server: &Server, args: &[String]) -> String {
    assert_eq!(&args[..2], ["ACL", "SETUSER"]);
    let setuser = |args: &[String]| {
        let mut cmd = redis::cmd("ACL");
        for arg in &args[1..] {
            cmd.arg(arg);
        }
        cmd.query::<()>(&mut server.connection_as(""))
    };
    if let Err(refused) = setuser(args) {
        let detail = refused.to_string();
        assert!(
            SHARDED_RULES.iter().any(|rule| detail.contains(rule)),
            "ACL SETUSER refused: {detail}"
        );
        let mut older: Vec<String> = args[..3].to_vec();
        older.push("reset".to_owned());
        older.extend(
            args[3..]
                .iter()
                .filter(|arg| !SHARDED_RULES.contains(&arg.as_str()))
                .cloned(),
        );
        println!("no sharded pub/sub ({detail}); the user is {older:?}");
        setuser(&older).expect("ACL SETUSER without the sharded pub/sub rules");
    }
    server.url_as("redis", &format!("{}:{PASSWORD}@", args[2]))
}

/// The guide's user: contention with wake-up across two clients, renewal
/// (a body three leases long), release, re-entry; every kind (read-write,
/// counted, fair), several keys, a leader's term, `inspect` and
/// `force_unlock`; and, with the guide's extra pattern for a resource's
/// keys and fence, a fenced write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_least_privilege_user_runs_everything() {
    let server = Server::tcp(&[]);
    let url = create_user(&server, &guide_acl());
    let a = LockClient::connect(&url)
        .await
        .expect("connect as the user");
    let b = LockClient::connect(&url)
        .await
        .expect("connect as the user");
    contention_with_wakeup(&a, &b, "acl:contended").await;

    let short = LockOptions::new().lease(Duration::from_millis(300));
    a.run_locked("acl:renewed", short, async {
        tokio::time::sleep(Duration::from_millis(1000)).await;
        Ok::<_, LockError>(())
    })
    .await
    .expect("renewed through a body longer than its lease");

    let once = LockOptions::new().wait(Duration::ZERO);
    let depth = a
        .run_locked("acl:chain", once, async {
            a.run_locked("acl:chain", once, async { Ok::<_, LockError>(2) })
                .await
        })
        .await
        .expect("re-entered");
    assert_eq!(depth, 2);
    // Released: another client takes it at once.
    b.run_locked("acl:chain", once, async { Ok::<_, LockError>(()) })
        .await
        .expect("released at the outermost end");
    every_kind(&a, &b).await;
}

/// Each kind, several keys, a term, `inspect` and `force_unlock` as the
/// guide's user: taken, released (another client takes it at once), and
/// a writer that meets readers told so (`KindMismatch` names no raw script
/// error).
async fn every_kind(a: &LockClient, b: &LockClient) {
    let once = LockOptions::new().wait(Duration::ZERO);
    let kinds = [
        ("acl:read", once.mode(lock_runtime::LockMode::Read)),
        ("acl:permits", once.permits(2)),
        ("acl:fair", once.fair(true)),
        ("acl:write", once.mode(lock_runtime::LockMode::Write)),
    ];
    for (key, options) in kinds {
        a.run_locked(key, options, async { Ok::<_, LockError>(()) })
            .await
            .unwrap_or_else(|e| panic!("{key}: {e}"));
        b.run_locked(key, options, async { Ok::<_, LockError>(()) })
            .await
            .unwrap_or_else(|e| panic!("{key} again: {e}"));
    }
    a.run_locked_all(["acl:x", "acl:y"], once, async { Ok::<_, LockError>(()) })
        .await
        .expect("several keys");
    b.run_locked_all(["acl:y", "acl:x"], once, async { Ok::<_, LockError>(()) })
        .await
        .expect("several keys again");
    a.lead("acl:leader", LockOptions::new(), |_| async {
        Ok::<_, LockError>(())
    })
    .await
    .expect("a term");
    // A plain call and a writer that meet a reader (in another task).
    let read = once.mode(lock_runtime::LockMode::Read);
    let (held_tx, held_rx) = tokio::sync::oneshot::channel();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let reader = a.clone();
    let reading = tokio::spawn(async move {
        let body = async move {
            let _ = held_tx.send(());
            let _ = done_rx.await;
            Ok::<_, LockError>(())
        };
        reader.run_locked("acl:read", read, body).await
    });
    held_rx.await.expect("the reader holds it");
    let plain = b.run_locked("acl:read", once, async { Ok::<_, LockError>(()) });
    let plain = plain.await;
    assert!(
        matches!(
            plain,
            Err(LockError::KindMismatch { .. }) | Err(LockError::Timeout { .. })
        ),
        "{plain:?}"
    );
    let write = once.mode(lock_runtime::LockMode::Write);
    let writer = b.run_locked("acl:read", write, async { Ok::<_, LockError>(()) });
    assert!(matches!(writer.await, Err(LockError::Timeout { .. })));
    done_tx.send(()).expect("the reader waits");
    reading.await.expect("task").expect("read and released");
    let held = a.run_locked("acl:inspected", once, async {
        let info = b.inspect("acl:inspected").await.expect("inspect");
        assert!(info.is_held());
        assert!(b.force_unlock("acl:inspected").await.expect("force_unlock"));
        Ok::<_, LockError>(())
    });
    assert!(matches!(held.await, Err(LockError::Lost { .. })), "forced");
}

/// The guide's rules without any channel.
fn without_channels() -> Vec<String> {
    guide_acl()
        .into_iter()
        .filter(|arg| !arg.starts_with('&'))
        .collect()
}

/// No channel rights: a contended call waits for the holder's lease (not
/// failing at once), within `wait`; the holder's release reports success.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_channels_waits_on_the_lease() {
    let server = Server::tcp(&[]);
    let url = create_user(&server, &without_channels());
    let a = LockClient::connect(&url)
        .await
        .expect("connect as the user");
    let b = LockClient::connect(&url)
        .await
        .expect("connect as the user");
    let lease = Duration::from_millis(1500);

    // The holder releases early; the waiter gets in by the holder's lease
    // at the latest.
    let held = Arc::new(Notify::new());
    let holder = {
        let (a, held) = (a.clone(), held.clone());
        tokio::spawn(async move {
            let options = LockOptions::new().lease(lease);
            a.run_locked("nochan:key", options, async {
                held.notify_one();
                tokio::time::sleep(Duration::from_millis(300)).await;
                Ok::<_, LockError>(())
            })
            .await
        })
    };
    tokio::time::timeout(Duration::from_secs(10), held.notified())
        .await
        .expect("the holder took the lock");
    let start = Instant::now();
    let options = LockOptions::new().wait(Duration::from_secs(8));
    b.run_locked("nochan:key", options, async { Ok::<_, LockError>(()) })
        .await
        .expect("the waiter got the lock within its wait");
    assert!(
        start.elapsed() < Duration::from_secs(6),
        "{:?}",
        start.elapsed()
    );
    holder
        .await
        .expect("holder task")
        .expect("the release whose delete happened is reported as done");

    // A holder that keeps the lock longer than the wait: the waiter times
    // out after its wait, not at once.
    let held = Arc::new(Notify::new());
    let done = Arc::new(Notify::new());
    let holder = {
        let (a, held, done) = (a.clone(), held.clone(), done.clone());
        tokio::spawn(async move {
            a.run_locked("nochan:long", LockOptions::new(), async {
                held.notify_one();
                done.notified().await;
                Ok::<_, LockError>(())
            })
            .await
        })
    };
    tokio::time::timeout(Duration::from_secs(10), held.notified())
        .await
        .expect("the holder took the lock");
    let start = Instant::now();
    let options = LockOptions::new().wait(Duration::from_millis(700));
    let timeout = b
        .run_locked("nochan:long", options, async { Ok::<_, LockError>(()) })
        .await
        .expect_err("held for longer than the wait");
    assert!(matches!(timeout, LockError::Timeout { .. }), "{timeout:?}");
    assert!(
        start.elapsed() >= Duration::from_millis(650),
        "{:?}",
        start.elapsed()
    );
    done.notify_one();
    holder.await.expect("holder task").expect("released");
}

/// A fenced write as the guide's user, with the guide's extra pattern for
/// the resource's keys and fence (and the command it runs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_write_runs_with_the_guides_extra_pattern() {
    let server = Server::tcp(&[]);
    let mut rules = guide_acl();
    rules.extend(["~{stock:*}*".to_owned(), "+incrby".to_owned()]);
    let url = create_user(&server, &rules);
    let client = LockClient::connect(&url)
        .await
        .expect("connect as the user");
    let replies = client
        .run_locked("stock:1", LockOptions::new(), async {
            client
                .fenced_write("stock:1")
                .cmd("INCRBY", ["{stock:1}:units"], 5)
                .run()
                .await
        })
        .await
        .expect("the fenced write ran");
    assert_eq!(replies, vec![lock_runtime::redis::Value::Int(5)]);
}

/// A release that Redis refuses (`NOPERM`: the user lost a right while the
/// body ran) reached Redis: the call says so with a `Backend` error naming
/// the cause, not a `Lost(Unconfirmed)` that says it could not reach Redis,
/// and the lock stays held until its lease ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_refused_by_an_acl_is_a_backend_error_not_a_loss() {
    let server = Server::tcp(&[]);
    let url = create_user(&server, &guide_acl());
    let client = LockClient::connect(&url)
        .await
        .expect("connect as the user");
    let lease = LockOptions::new().lease(Duration::from_secs(30));
    let outcome = client
        .run_locked("acl:refused", lease, async {
            let mut admin = server.connection_as("");
            redis::cmd("ACL")
                .arg("SETUSER")
                .arg("locker")
                .arg("-evalsha")
                .query::<()>(&mut admin)
                .expect("revoke EVALSHA");
            Ok::<_, LockError>(())
        })
        .await;
    match &outcome {
        Err(LockError::Backend { key, source, .. }) => {
            assert!(key.ends_with("acl:refused"), "{key}");
            assert_eq!(source.code(), Some("NOPERM"), "{source}");
            assert!(!outcome.as_ref().unwrap_err().is_retryable());
        }
        other => panic!("not the refusal: {other:?}"),
    }
    // Still held in Redis (the release changed nothing), until its lease.
    let ttl: i64 = redis::cmd("PTTL")
        .arg("lock:acl:refused")
        .query(&mut server.connection_as(""))
        .expect("PTTL");
    assert!(ttl > 20_000, "{ttl}");
}
