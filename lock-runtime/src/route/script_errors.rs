//! Errors raised inside a script, read by their own code on every server
//! family.
//!
//! Redis 7 and Valkey answer an error that `redis.call` raised inside a
//! script with that error's own code (`-READONLY ...`). Redis 6.2 wraps it:
//! `-ERR Error running script (call to f_<sha>): @user_script:1:
//! @user_script: 1: -READONLY You can't write against a read only
//! replica.` Read as it is, its code is `ERR`, and every rule that looks at
//! the code (a demoted master's `READONLY` starts Sentinel's follower; a
//! `LOCKLAYOUT` is another program's value; retryable or not) would miss
//! it. So a script's error is unwrapped to the inner code before anything
//! reads it.

use redis::{RedisError, Value};

/// `error` with the code of the error it wraps, when it is Redis 6.2's
/// `ERR Error running script ... -CODE message`; otherwise as it is.
pub(crate) fn unwrapped(error: RedisError) -> RedisError {
    if error.code() != Some("ERR") {
        return error;
    }
    let Some(inner) = wrapped(error.detail().unwrap_or_default()) else {
        return error;
    };
    match redis::parse_redis_value(format!("-{inner}\r\n").as_bytes()) {
        Ok(Value::ServerError(inner)) => inner.into(),
        _ => error,
    }
}

/// The `CODE message` inside a 6.2 script error's detail, if it has one.
fn wrapped(detail: &str) -> Option<&str> {
    if !detail.starts_with("Error running script") {
        return None;
    }
    let inner = detail[detail.find(": -")? + 3..].trim_end();
    let code = inner.split(' ').next()?;
    let is_code = !code.is_empty()
        && code
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
    (is_code && !inner.contains(['\r', '\n'])).then_some(inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server_error(line: &str) -> RedisError {
        match redis::parse_redis_value(format!("-{line}\r\n").as_bytes()) {
            Ok(Value::ServerError(error)) => error.into(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_wrapped_script_error_reads_by_its_own_code() {
        let wrapped = server_error(
            "ERR Error running script (call to f_ee5bed0f6963e93a14eebfb64f07c299c1b4313f): \
             @user_script:1: @user_script: 1: -READONLY You can't write against a read only replica.",
        );
        let error = unwrapped(wrapped);
        assert_eq!(error.code(), Some("READONLY"));
        assert!(error.to_string().contains("read only replica"), "{error}");
        let layout = unwrapped(server_error(
            "ERR Error running script (call to f_0): @user_script:9: -LOCKLAYOUT the value is not a lock",
        ));
        assert_eq!(layout.code(), Some("LOCKLAYOUT"));
    }

    #[test]
    fn other_errors_are_left_as_they_are() {
        for line in [
            "ERR unknown command `ssubscribe`",
            "ERR Error running script (call to f_0): @user_script:1: Unknown Redis command called from Lua script",
            "NOPERM this user has no permissions to run the 'evalsha' command",
            "READONLY You can't write against a read only replica.",
        ] {
            let error = unwrapped(server_error(line));
            assert_eq!(error.to_string(), server_error(line).to_string());
        }
    }
}
