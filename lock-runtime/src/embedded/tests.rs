//! The embedded backend's Lua as a script sees it through a connection:
//! replies, numbers and errors as Redis gives them, the globals refused.

use redis::{RedisResult, Value};

use super::EmbeddedKeyspace;

/// `EVAL source 0`, and its answer as a Redis connection reads it.
fn eval(source: &str) -> RedisResult<Value> {
    let keyspace = EmbeddedKeyspace::new();
    redis::cmd("EVAL")
        .arg(source)
        .arg(0)
        .query(&mut keyspace.connection())
}

#[test]
fn replies_read_as_redis_gives_them() {
    assert_eq!(eval("return 3.7").unwrap(), Value::Int(3));
    assert_eq!(eval("return -3.7").unwrap(), Value::Int(-3));
    assert_eq!(eval("return true").unwrap(), Value::Int(1));
    assert_eq!(eval("return false").unwrap(), Value::Nil);
    assert_eq!(
        eval("return redis.call('get', 'none')").unwrap(),
        Value::Nil
    );
    assert_eq!(
        eval("return {1, 'a', nil, 2}").unwrap(),
        Value::Array(vec![Value::Int(1), Value::BulkString(b"a".to_vec())]),
    );
    assert_eq!(
        eval("return redis.call('set', 'k', 'v')").unwrap(),
        Value::Okay
    );
    assert_eq!(
        eval("return redis.status_reply('FINE')").unwrap(),
        Value::SimpleString("FINE".into()),
    );
    let error = eval("return redis.error_reply('LOCKKIND k is another kind')").unwrap_err();
    assert_eq!(error.code(), Some("LOCKKIND"));
}

#[test]
fn commands_see_numbers_as_redis_writes_them_and_errors_as_redis_raises_them() {
    // %.17g: integers as integers, 0.1 with its seventeen digits.
    let written = "redis.call('set', 'a', 5000) redis.call('set', 'b', 0.1) \
                   return {redis.call('get', 'a'), redis.call('get', 'b')}";
    assert_eq!(
        eval(written).unwrap(),
        Value::Array(vec![
            Value::BulkString(b"5000".to_vec()),
            Value::BulkString(b"0.10000000000000001".to_vec()),
        ]),
    );
    // pcall gives the error as {err=...}; call raises it, and the
    // script's answer is that error, by its own code.
    let caught = "redis.call('set', 's', 'v') \
                  local r = redis.pcall('hget', 's', 'f') return r.err";
    let text = eval(caught).unwrap();
    assert!(
        matches!(&text, Value::BulkString(t) if t.starts_with(b"WRONGTYPE")),
        "{text:?}"
    );
    let raised = eval("redis.call('set', 's', 'v') return redis.call('hget', 's', 'f')");
    assert_eq!(raised.unwrap_err().code(), Some("WRONGTYPE"));
}

#[test]
fn a_script_that_touches_a_global_fails_as_on_redis_7() {
    // Redis 7.0's words for each.
    for (source, words) in [
        ("leaked = 1 return 1", "Attempt to modify a readonly table"),
        (
            "return undefined_name",
            "Script attempted to access nonexistent global variable 'undefined_name'",
        ),
    ] {
        let error = eval(source).unwrap_err();
        assert!(error.to_string().contains(words), "{source}: {error}");
    }
    let unknown: RedisResult<Value> = redis::cmd("EVALSHA")
        .arg("0123456789012345678901234567890123456789")
        .arg(0)
        .query(&mut EmbeddedKeyspace::new().connection());
    assert_eq!(unknown.unwrap_err().code(), Some("NOSCRIPT"));
}
