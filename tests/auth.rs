//! Passwords in URLs: `requirepass` (`redis://:pw@`) and ACL users
//! (`redis://user:pw@`) work; a wrong or missing password fails at connect
//! with an error that names the cause and the node, never the secret.
mod servers;

use std::error::Error as _;
use std::time::Duration;

use lock_runtime::{LockClient, LockError, LockOptions};
use servers::{contention_with_wakeup, TcpServer};

const SECRET: &str = "s3cret-Pa55word-7f1c";
const WRONG: &str = "wr0ng-Pa55word-93ab";

/// Everything a user may see of `error`: `{}`, `{:?}` and each source.
fn everything_shown(error: &LockError) -> String {
    let mut shown = format!("{error} {error:?}");
    let mut source = error.source();
    while let Some(cause) = source {
        shown.push_str(&format!(" | {cause} {cause:?}"));
        source = cause.source();
    }
    shown
}

async fn connect_error(url: &str) -> LockError {
    LockClient::builder()
        .connect_timeout(Duration::from_secs(3))
        .connect(url)
        .await
        .expect_err("the server refuses this client")
}

async fn lock_once(client: &LockClient) {
    client
        .run_locked("auth:once", LockOptions::new(), async {
            Ok::<_, LockError>(())
        })
        .await
        .expect("a locked call");
}

/// `requirepass`: the right password works; a wrong one and none at all
/// fail at connect, naming WRONGPASS / NOAUTH and the node, without secrets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requirepass() {
    let server = TcpServer::start(&["--requirepass", SECRET]);
    let a = LockClient::connect(&server.url("redis", &format!(":{SECRET}@")))
        .await
        .expect("connect with the password");
    let b = LockClient::connect(&server.url("redis", &format!("default:{SECRET}@")))
        .await
        .expect("connect as the default user");
    lock_once(&a).await;
    contention_with_wakeup(&a, &b, "auth:requirepass").await;

    let node = format!("127.0.0.1:{}", server.port);
    let wrong = connect_error(&server.url("redis", &format!(":{WRONG}@"))).await;
    assert!(matches!(wrong, LockError::Connect(_)), "{wrong:?}");
    let shown = everything_shown(&wrong);
    assert!(wrong.to_string().contains("WRONGPASS"), "{shown}");
    assert!(wrong.to_string().contains(&node), "{shown}");
    assert!(!shown.contains(WRONG) && !shown.contains(SECRET), "{shown}");

    let none = connect_error(&server.url("redis", "")).await;
    assert!(matches!(none, LockError::Connect(_)), "{none:?}");
    assert!(none.to_string().contains("NOAUTH"), "{none}");
    assert!(none.to_string().contains(&node), "{none}");
}

/// An ACL user: its password works; a wrong one fails at connect without
/// showing either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_user() {
    let server = TcpServer::start(&[]);
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("locker")
        .arg("on")
        .arg(format!(">{SECRET}"))
        .arg("allkeys")
        .arg("allchannels")
        .arg("+@all")
        .query(&mut server.connection(""))
        .expect("ACL SETUSER");
    let url = server.url("redis", &format!("locker:{SECRET}@"));
    let a = LockClient::connect(&url).await.expect("connect as locker");
    lock_once(&a).await;

    let wrong = connect_error(&server.url("redis", &format!("locker:{WRONG}@"))).await;
    let shown = everything_shown(&wrong);
    assert!(wrong.to_string().contains("WRONGPASS"), "{shown}");
    assert!(!shown.contains(WRONG) && !shown.contains(SECRET), "{shown}");
}
