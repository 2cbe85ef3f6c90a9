//! Passwords in URLs: `requirepass` (`redis://:pw@`) and ACL users
//! (`redis://user:pw@`) work; a wrong or missing password fails at connect
//! with an error that names the cause and the node, never the secret.
mod support;

use std::error::Error as _;
use std::time::Duration;

use lock_runtime::{LockClient, LockError, LockOptions};
use lock_testkit::Server;
use support::contention_with_wakeup;

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
    let server = Server::tcp(&["--requirepass", SECRET]);
    let a = LockClient::connect(&server.url_as("redis", &format!(":{SECRET}@")))
        .await
        .expect("connect with the password");
    let b = LockClient::connect(&server.url_as("redis", &format!("default:{SECRET}@")))
        .await
        .expect("connect as the default user");
    lock_once(&a).await;
    contention_with_wakeup(&a, &b, "auth:requirepass").await;

    let node = format!("127.0.0.1:{}", server.port());
    let wrong = connect_error(&server.url_as("redis", &format!(":{WRONG}@"))).await;
    assert!(matches!(wrong, LockError::Connect(_)), "{wrong:?}");
    let shown = everything_shown(&wrong);
    assert!(wrong.to_string().contains("WRONGPASS"), "{shown}");
    assert!(wrong.to_string().contains(&node), "{shown}");
    assert!(!shown.contains(WRONG) && !shown.contains(SECRET), "{shown}");

    let none = connect_error(&server.url_as("redis", "")).await;
    assert!(matches!(none, LockError::Connect(_)), "{none:?}");
    assert!(none.to_string().contains("NOAUTH"), "{none}");
    assert!(none.to_string().contains(&node), "{none}");
    assert!(
        none.to_string().contains("redis://user:password@"),
        "says where the password goes: {none}"
    );
    assert!(!everything_shown(&none).contains(SECRET), "{none}");
}

/// A client that connects on first use meets NOAUTH at its first call: the
/// backend error says where the password goes too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noauth_at_a_call_says_where_the_password_goes() {
    let server = Server::tcp(&["--requirepass", SECRET]);
    let client = LockClient::builder()
        .lazy_connect(true)
        .connect_timeout(Duration::from_secs(3))
        .connect(&server.url_as("redis", ""))
        .await
        .expect("a lazy client connects on first use");
    let error = client
        .run_locked("auth:none", LockOptions::new(), async {
            Ok::<_, LockError>(())
        })
        .await
        .expect_err("the server needs a password");
    let shown = error.to_string();
    assert!(matches!(error, LockError::Backend { .. }), "{error:?}");
    assert!(shown.contains("NOAUTH"), "{shown}");
    assert!(shown.contains("redis://user:password@"), "{shown}");
    assert!(!everything_shown(&error).contains(SECRET), "{shown}");
}

/// Redlock nodes that need a password, given none: the connect fails with
/// NOAUTH and where the password goes, rather than every call later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_nodes_without_their_password_fail_the_connect() {
    let nodes: Vec<Server> = (0..3)
        .map(|_| Server::tcp(&["--requirepass", SECRET]))
        .collect();
    let urls: Vec<String> = nodes.iter().map(|n| n.url_as("redis", "")).collect();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let error = LockClient::builder()
        .node_timeout(Duration::from_millis(500))
        .redlock(&urls)
        .await
        .expect_err("no node takes a client without its password");
    let shown = error.to_string();
    assert!(matches!(error, LockError::Connect(_)), "{error:?}");
    assert!(shown.contains("NOAUTH"), "{shown}");
    assert!(shown.contains("redis://user:password@"), "{shown}");
}

/// How many times `fragment` occurs in `text`, ignoring case.
fn occurrences(text: &str, fragment: &str) -> usize {
    text.to_lowercase()
        .matches(&fragment.to_lowercase())
        .count()
}

/// A wrong password, several times (the connect's two connections race,
/// and each meets it its own way: `AUTH` or `HELLO`): the message names the
/// failure once, not the redis error's kind and description again inside
/// its own detail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_is_said_once() {
    let server = Server::tcp(&["--requirepass", SECRET]);
    for userinfo in [format!(":{WRONG}@"), format!("default:{WRONG}@")] {
        for _ in 0..3 {
            let error = connect_error(&server.url_as("redis", &userinfo)).await;
            let shown = error.to_string();
            assert!(shown.contains("WRONGPASS"), "{shown}");
            for fragment in ["AuthenticationFailed", "authentication failed", "WRONGPASS"] {
                assert!(occurrences(&shown, fragment) <= 1, "{fragment}: {shown}");
            }
            // The server's words, not redis-rs's name for an error code it
            // has no kind for.
            assert!(!shown.contains("Extension"), "{shown}");
        }
    }
}

/// An ACL user: its password works; a wrong one fails at connect without
/// showing either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_user() {
    let server = Server::tcp(&[]);
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("locker")
        .arg("on")
        .arg(format!(">{SECRET}"))
        .arg("allkeys")
        .arg("allchannels")
        .arg("+@all")
        .query(&mut server.connection_as(""))
        .expect("ACL SETUSER");
    let url = server.url_as("redis", &format!("locker:{SECRET}@"));
    let a = LockClient::connect(&url).await.expect("connect as locker");
    lock_once(&a).await;

    let wrong = connect_error(&server.url_as("redis", &format!("locker:{WRONG}@"))).await;
    let shown = everything_shown(&wrong);
    assert!(wrong.to_string().contains("WRONGPASS"), "{shown}");
    assert!(!shown.contains(WRONG) && !shown.contains(SECRET), "{shown}");
}

/// A URL that fails to parse is never echoed: its password does not reach
/// the error, from `connect`, a lazy connect's first call, `redlock`,
/// `sentinel` or `cluster`.
#[tokio::test]
async fn a_url_that_fails_to_parse_shows_no_password() {
    const SECRET: &str = "S3cretPw-q7x9";
    let urls = [
        format!("unix:///tmp/lock-test-none.sock?db=x&pass={SECRET}"),
        format!("unix:///tmp/lock-test-none.sock?protocol=nine&pass={SECRET}"),
        format!("redis://user:{SECRET}@127.0.0.1:1/x"),
        format!("redis://:{SECRET}@127.0.0.1:1/?protocol=nine"),
        format!("rediss://user:{SECRET}@[::1:1/"),
    ];
    for url in &urls {
        let quick = || LockClient::builder().connect_timeout(Duration::from_millis(200));
        let shown = |what: &str, error: LockError| {
            let text = format!(
                "{error} / {error:?} / {:?}",
                std::error::Error::source(&error)
            );
            assert!(
                !text.contains(SECRET),
                "{what} of {url} shows the password: {text}"
            );
        };
        shown(
            "connect",
            quick().connect(url).await.expect_err("no server"),
        );
        let lazy = quick().lazy_connect(true).connect(url).await;
        if let Ok(client) = lazy {
            let call = client
                .run_locked("k", LockOptions::new(), async { Ok::<_, LockError>(()) })
                .await;
            shown("a lazy call", call.expect_err("no server"));
        } else if let Err(error) = lazy {
            shown("lazy connect", error);
        }
        let three = [url.as_str(), "redis://127.0.0.1:2/", "redis://127.0.0.1:3/"];
        shown(
            "redlock",
            quick().redlock(three).await.expect_err("no server"),
        );
        shown(
            "sentinel",
            quick().sentinel([url], "m").await.expect_err("no server"),
        );
        shown(
            "cluster",
            quick().cluster([url]).await.expect_err("no server"),
        );
    }
}

/// A URL that asks redis-rs to skip the TLS certificate check (`#insecure`)
/// is refused, naming the fix, on every constructor.
#[tokio::test]
async fn a_url_that_turns_certificate_checks_off_is_refused() {
    let url = "rediss://127.0.0.1:1/#insecure";
    let refused = |error: LockError| {
        let text = error.to_string();
        assert!(
            text.contains("#insecure") && text.contains("tls_ca_file"),
            "{text}"
        );
    };
    refused(LockClient::connect(url).await.expect_err("refused"));
    refused(LockClient::cluster([url]).await.expect_err("refused"));
    refused(LockClient::sentinel([url], "m").await.expect_err("refused"));
    let three = [url, "redis://127.0.0.1:2/", "redis://127.0.0.1:3/"];
    refused(LockClient::redlock(three).await.expect_err("refused"));
}
