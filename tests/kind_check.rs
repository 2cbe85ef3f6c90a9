//! The client's kind check: two calls that take one key as kinds that
//! cannot share it fail the second at once, even one after the other,
//! naming both calls; kinds that share a key, other keys and re-entries
//! pass; `kind_check(false)` turns it off.
mod support;

use std::panic::Location;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lock_runtime::{distributed_lock, KindFoundBy, LockClient, LockError, LockMode, LockOptions};

fn plain() -> LockOptions {
    LockOptions::new().wait(Duration::from_secs(20))
}

fn read() -> LockOptions {
    plain().mode(LockMode::Read)
}

fn permits(n: u32) -> LockOptions {
    plain().permits(n)
}

fn fair() -> LockOptions {
    plain().fair(true)
}

async fn empty() -> Result<(), LockError> {
    Ok(())
}

/// The places the kind check names, from a `KindMismatch` it found.
fn places(
    error: &LockError,
) -> (
    &'static Location<'static>,
    Option<&'static str>,
    &'static Location<'static>,
) {
    match error {
        LockError::KindMismatch {
            found_by: KindFoundBy::KindCheck(calls),
            ..
        } => (calls.earlier, calls.earlier_label, calls.this_call),
        other => panic!("not the kind check's KindMismatch: {other:?}"),
    }
}

on_both_backends! {
    /// A counted call and then a plain call on one key, one after the
    /// other: the second fails at once with `KindMismatch`, naming the key,
    /// both kinds and where both calls were made, sends no request, and
    /// its body does not run.
    async fn a_plain_call_after_a_counted_one_on_its_key_fails_naming_both(env: Env) {
        let client = &env.client;
        let (first_line, first) = (line!(), client.run_locked("report:7", permits(3), empty()));
        first.await.expect("the first use of the key");
        let commands = env.server.as_ref().map(|s| s.command_calls("evalsha"));
        let ran = AtomicUsize::new(0);
        let body = async {
            ran.fetch_add(1, Ordering::SeqCst);
            Ok::<_, LockError>(())
        };
        let (second_line, second) = (line!(), client.run_locked("report:7", plain(), body));
        let error = second.await.expect_err("a plain lock on a counted key");
        assert_eq!(ran.load(Ordering::SeqCst), 0, "the body ran");
        let after = env.server.as_ref().map(|s| s.command_calls("evalsha"));
        assert_eq!(commands, after, "the check sent a request");

        let (earlier, label, this_call) = places(&error);
        assert_eq!((earlier.file(), earlier.line()), (file!(), first_line));
        assert_eq!((this_call.file(), this_call.line()), (file!(), second_line));
        assert_eq!(label, None);
        let LockError::KindMismatch { key, asked, found, .. } = &error else {
            unreachable!()
        };
        assert_eq!(key, "lock:report:7");
        assert!(asked.contains("plain"), "{asked}");
        assert!(found.contains("permits = 3"), "{found}");
        assert!(!error.is_retryable());
        let text = error.to_string();
        for part in [
            "lock `lock:report:7`",
            "permits = 3",
            "plain",
            &format!("{}:{first_line}", file!()),
            &format!("{}:{second_line}", file!()),
            "whenever they overlap",
            "use one kind per key",
            "kind_check(false)",
        ] {
            assert!(text.contains(part), "`{part}` is not in: {text}");
        }

        // The record keeps the key's kind: the counted call still passes.
        client
            .run_locked("report:7", permits(3), empty())
            .await
            .expect("the key's own kind");
    }
}

#[distributed_lock(key = "doc:<id>", permits = 2, client = client)]
async fn count_doc(client: &LockClient, id: u64) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "doc:<id>", client = client)]
async fn edit_doc(client: &LockClient, id: u64) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "doc:<id>:meta", client = client)]
async fn edit_doc_meta(client: &LockClient, id: String) -> Result<(), LockError> {
    Ok(())
}

/// Two annotated functions whose templates render one key with different
/// kinds: the second call names the first function's template and place.
/// A template that only looks as if it could render the same key
/// (`doc:<id>:meta`) is another key, and passes.
#[tokio::test]
async fn two_annotated_functions_of_two_kinds_on_one_key_are_found() {
    let client = LockClient::in_memory();
    count_doc(&client, 7).await.expect("counted");
    // `doc:7:meta` (a plain lock) is not `doc:7`: no false positive, even
    // for the value "7:meta" rendered into `doc:<id>` elsewhere.
    edit_doc_meta(&client, "7".into())
        .await
        .expect("another key");
    let error = edit_doc(&client, 7)
        .await
        .expect_err("plain on a counted key");
    let (earlier, label, this_call) = places(&error);
    assert_eq!(label, Some("doc:<id>"));
    assert_eq!(earlier.file(), file!());
    assert_eq!(this_call.file(), file!());
    assert!(earlier.line() < this_call.line(), "{earlier} {this_call}");
    let text = error.to_string();
    assert!(text.contains("`doc:<id>`"), "{text}");
    assert!(text.contains(&earlier.to_string()), "{text}");
    assert!(text.contains(&this_call.to_string()), "{text}");
    // Another id is another key.
    edit_doc(&client, 8).await.expect("a plain lock on doc:8");
}

#[distributed_lock(key = "queue:<name>", fair = true)]
async fn serve(name: &str) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "queue:<name>", mode = "read")]
async fn peek(name: &str) -> Result<(), LockError> {
    Ok(())
}

/// The same through the client in use (here a scoped one): the places are
/// the annotated functions'.
#[tokio::test]
async fn annotated_functions_on_the_client_in_use_are_found() {
    let client = LockClient::in_memory();
    let error = lock_runtime::with_client(client, async {
        serve("mail").await.expect("fair");
        peek("mail").await.expect_err("a reader on a fair key")
    })
    .await;
    let (earlier, label, this_call) = places(&error);
    assert_eq!(label, Some("queue:<name>"));
    assert_eq!((earlier.file(), this_call.file()), (file!(), file!()));
    assert!(earlier.line() < this_call.line(), "{earlier} {this_call}");
}

/// Every pair of kinds that cannot share a key, one call after the other
/// on one client, is found; the error names both kinds.
#[tokio::test]
async fn every_pair_of_kinds_that_cannot_share_a_key_is_found() {
    let client = LockClient::in_memory();
    let pairs = [
        (permits(2), plain(), "permits = 2", "plain"),
        (plain(), permits(2), "plain", "permits = 2"),
        (read(), permits(2), "mode = \"read\"", "permits = 2"),
        (permits(2), permits(3), "permits = 2", "permits = 3"),
        (fair(), plain(), "fair = true", "plain"),
        (plain(), fair(), "plain", "fair = true"),
        (read(), fair(), "mode = \"read\"", "fair = true"),
        (fair(), permits(1), "fair = true", "permits = 1"),
    ];
    for (i, (first, second, first_name, second_name)) in pairs.into_iter().enumerate() {
        let key = format!("pair:{i}");
        client
            .run_locked(&key, first, empty())
            .await
            .expect("first");
        let error = client
            .run_locked(&key, second, empty())
            .await
            .expect_err("another kind");
        let LockError::KindMismatch { asked, found, .. } = &error else {
            panic!("{error}");
        };
        assert!(found.contains(first_name), "{i}: {found}");
        assert!(asked.contains(second_name), "{i}: {asked}");
        places(&error);
    }
}

/// What may share a key passes: readers, writers and plain calls (one
/// read-write lock), the same count, fair with fair, other keys, and a
/// nested call that re-enters the lock around it by the re-entry rules.
#[tokio::test]
async fn kinds_that_share_a_key_and_re_entries_pass() {
    let client = LockClient::in_memory();
    for options in [
        read(),
        plain(),
        plain().mode(LockMode::Write),
        read(),
        plain(),
    ] {
        client
            .run_locked("rw", options, empty())
            .await
            .expect("read-write");
    }
    for _ in 0..3 {
        client
            .run_locked("api", permits(4), empty())
            .await
            .expect("counted");
        client
            .run_locked("line", fair(), empty())
            .await
            .expect("fair");
    }
    // A counted call nested in a plain hold of its key re-enters it (no
    // request, no second kind taken): not a use of the key as permits.
    client
        .run_locked("rw", plain(), async {
            client.run_locked("rw", permits(4), empty()).await
        })
        .await
        .expect("a re-entry");
    client
        .run_locked("rw", plain(), empty())
        .await
        .expect("still read-write");
    // Many calls at once, of one kind.
    let call = || client.run_locked("api", permits(4), empty());
    let (a, b, c) = tokio::join!(call(), call(), call());
    for result in [a, b, c] {
        result.expect("counted, side by side");
    }
}

/// The check is per client: another client's calls are not compared.
#[tokio::test]
async fn another_client_is_not_compared() {
    let one = LockClient::in_memory();
    let other = LockClient::in_memory();
    one.run_locked("shared", permits(2), empty())
        .await
        .expect("one");
    other
        .run_locked("shared", plain(), empty())
        .await
        .expect("other");
}

/// `kind_check(false)`: one key taken as two kinds one after the other
/// passes, as a free key takes any kind.
#[tokio::test]
async fn the_check_turned_off_lets_sequential_kinds_pass() {
    let client = LockClient::builder().kind_check(false).in_memory();
    client
        .run_locked("phase", permits(2), empty())
        .await
        .expect("counted");
    client
        .run_locked("phase", plain(), empty())
        .await
        .expect("plain");
    client
        .run_locked("phase", fair(), empty())
        .await
        .expect("fair");
}

/// The check is on by default in debug builds (where tests run), and off
/// in release builds.
#[tokio::test]
async fn the_check_is_on_by_default_in_debug_builds() {
    let client = LockClient::in_memory();
    client
        .run_locked("default", permits(2), empty())
        .await
        .expect("counted");
    let second = client.run_locked("default", plain(), empty()).await;
    assert_eq!(second.is_err(), cfg!(debug_assertions), "{second:?}");
}

/// A call over several keys that the check refuses on one key took none of
/// them, and leaves no record on the others: a later call of another kind
/// on a key it did not take is not blamed on it.
#[tokio::test]
async fn a_refused_call_over_several_keys_records_none_of_them() {
    let client = LockClient::builder().kind_check(true).in_memory();
    client
        .run_locked("b", permits(2), empty())
        .await
        .expect("b taken counted");
    let refused = client.run_locked_all(["a", "b"], plain(), empty()).await;
    match &refused {
        Err(LockError::KindMismatch { key, .. }) => assert!(key.ends_with('b'), "{key}"),
        other => panic!("the plain call over a and b was not refused: {other:?}"),
    }
    // `a` was never taken: a counted call on it is the key's first use.
    let counted = client.run_locked("a", permits(2), empty()).await;
    assert!(
        counted.is_ok(),
        "blamed on a call that took nothing: {counted:?}"
    );
}
