//! The script that takes several keys at once (`acquire_all`), step by
//! step, on a redis-server and on the embedded backend's keyspace (each
//! test runs on both, see `both!`): all or nothing, a refusal that gives
//! back what it took and marks the key that refused, a writer that keeps
//! no claim ahead of readers, a retried request, and errors.
mod support;

use redis::{Script, Value};
use support::executor::Executor;

fn script(name: &str) -> Script {
    Script::new(lock_runtime::__private::script_source(name).expect("a script of the library"))
}

/// `acquire_all` on `keys`, key `i` for `owners[i]`, in `mode` (`x`, `r`).
fn acquire_all(
    x: &mut Executor,
    mode: &str,
    keys: &[&str],
    owners: &[&str],
) -> redis::RedisResult<Vec<i64>> {
    let script = script("acquire_all");
    let mut call = script.prepare_invoke();
    for key in keys {
        call.key(*key);
    }
    call.arg(mode).arg(1000).arg(300);
    for owner in owners {
        call.arg(*owner);
    }
    call.invoke(x)
}

fn get(x: &mut Executor, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(x).expect("GET")
}

fn hget(x: &mut Executor, key: &str, field: &str) -> Option<String> {
    redis::cmd("HGET")
        .arg(key)
        .arg(field)
        .query(x)
        .expect("HGET")
}

/// The state letter of the exclusive lock at `key` (`h`, `w`, `f`).
fn state(x: &mut Executor, key: &str) -> Option<String> {
    get(x, key).map(|value| value.split(':').nth(2).unwrap_or_default().to_owned())
}

fn every_key_is_taken_and_a_retry_gets_the_same_tokens(x: &mut Executor) {
    let keys = ["lock:a", "lock:b", "lock:c"];
    let owners = ["o:1", "o:2", "o:3"];
    let first = acquire_all(x, "x", &keys, &owners).expect("acquire_all");
    assert_eq!(first.len(), 4);
    assert_eq!(first[0], 1);
    assert!(first[1..].iter().all(|t| *t > 0), "{first:?}");
    for (key, owner) in keys.iter().zip(owners) {
        let value = get(x, key).expect("held");
        assert!(value.ends_with(&format!(":h:{owner}")), "{value}");
    }
    let again = acquire_all(x, "x", &keys, &owners).expect("acquire_all");
    assert_eq!(again, first, "a retried request keeps each key's token");
}

fn a_refusal_gives_back_what_it_took_and_marks_the_key(x: &mut Executor) {
    let held: Value = script("acquire")
        .key("lock:b")
        .arg("other:1")
        .arg(1000)
        .invoke(x)
        .expect("acquire");
    assert!(matches!(held, Value::Int(t) if t > 0));
    let answer = acquire_all(
        x,
        "x",
        &["lock:a", "lock:b", "lock:c"],
        &["o:1", "o:2", "o:3"],
    )
    .expect("acquire_all");
    assert_eq!(answer[..2], [0, 2], "refused at the second key: {answer:?}");
    x.assert_ms(
        -2 - answer[2],
        std::time::Duration::from_millis(1000),
        "the holder's lease",
    );
    assert_eq!(
        state(x, "lock:a").as_deref().unwrap_or("f"),
        "f",
        "lock:a given back"
    );
    assert_eq!(get(x, "lock:c"), None, "lock:c never taken");
    assert_eq!(
        state(x, "lock:b").as_deref(),
        Some("w"),
        "its release will publish"
    );
}

fn a_writer_that_meets_readers_keeps_no_claim(x: &mut Executor) {
    let reader: Value = script("shared_acquire")
        .key("lock:b")
        .arg("r:1")
        .arg(1000)
        .arg("r")
        .arg(300)
        .arg(0)
        .arg(0)
        .invoke(x)
        .expect("reader");
    assert!(matches!(reader, Value::Array(_)), "{reader:?}");
    let answer = acquire_all(x, "x", &["lock:a", "lock:b"], &["w:1", "w:2"]).expect("acquire_all");
    assert_eq!(
        answer[..2],
        [0, 2],
        "refused at the readers' key: {answer:?}"
    );
    assert_eq!(
        hget(x, "lock:b", "ww"),
        None,
        "no claim ahead of new readers"
    );
    assert_eq!(
        hget(x, "lock:b", "w").as_deref(),
        Some("1"),
        "the readers' release publishes"
    );
    assert_eq!(
        state(x, "lock:a").as_deref().unwrap_or("f"),
        "f",
        "lock:a given back"
    );
    // A new reader is not held back.
    let second = acquire_all(x, "r", &["lock:b", "lock:c"], &["r:2", "r:3"]).expect("readers");
    assert_eq!(second[0], 1, "readers share: {second:?}");
}

fn an_error_gives_back_what_it_took(x: &mut Executor) {
    let () = redis::cmd("SET")
        .arg("lock:b")
        .arg("not a lock")
        .query(x)
        .expect("SET");
    let error =
        acquire_all(x, "x", &["lock:a", "lock:b"], &["o:1", "o:2"]).expect_err("foreign value");
    assert_eq!(error.code(), Some("LOCKLAYOUT"), "{error}");
    assert_eq!(
        state(x, "lock:a").as_deref().unwrap_or("f"),
        "f",
        "lock:a given back"
    );
}

both!(
    every_key_is_taken_and_a_retry_gets_the_same_tokens,
    a_refusal_gives_back_what_it_took_and_marks_the_key,
    a_writer_that_meets_readers_keeps_no_claim,
    an_error_gives_back_what_it_took,
);
