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
/// (a body three leases long), release, re-entry.
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
