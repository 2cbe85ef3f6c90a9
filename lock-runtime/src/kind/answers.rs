//! How the acquire scripts' answers read, for every kind, and the error of
//! a call that met another kind's lock.

use std::time::Duration;

use redis::{RedisError, Value};

use super::{Acquire, Ended, Kind, Release};
use crate::error::{KindFoundBy, LockError};
use crate::route::BackendError;

/// The meaning of an acquire script's answer:
/// - an integer: the exclusive lock's token (> 0), or -2 - the holder's
///   TTL (-1: no expiry);
/// - `{token, room}`: a shared kind's grant;
/// - `{-2 - ttl}`: not taken, and a place in a line kept (a writer's
///   claim);
/// - `{-2 - ttl, held}`: the same for a fair waiter, with the holder's
///   lease left in milliseconds;
/// - for a `timed` claim (`hold_at_least`, the exclusive lock), a grant is
///   `{token, now_ms}`, with the node's time in ms.
pub(crate) fn acquired(answer: Value, timed: bool) -> Result<Acquire, RedisError> {
    match answer {
        Value::Int(n @ 1..) if timed => Err(unexpected(format!("{n}, without the node's time"))),
        Value::Int(n) => exclusive(n),
        Value::Array(items) => match items.as_slice() {
            [Value::Int(token @ 1..), Value::Int(now @ 1..)] if timed => Ok(Acquire::Timed {
                token: token.unsigned_abs(),
                since: Box::new([now.unsigned_abs()]),
            }),
            [Value::Int(token @ 1..), Value::Int(room)] => Ok(Acquire::Shared {
                token: token.unsigned_abs(),
                room: *room == 1,
            }),
            [Value::Int(n @ ..=-1)] => Ok(Acquire::Queued {
                ttl: ttl(*n),
                holder_ttl: ttl(*n),
            }),
            [Value::Int(n @ ..=-1), Value::Int(held @ 0..)] => Ok(Acquire::Queued {
                ttl: ttl(*n),
                holder_ttl: Some(Duration::from_millis(held.unsigned_abs())),
            }),
            _ => Err(unexpected(format!("{items:?}"))),
        },
        other => Err(unexpected(format!("{other:?}"))),
    }
}

/// The exclusive lock's integer answer.
pub(crate) fn exclusive(answer: i64) -> Result<Acquire, RedisError> {
    match answer {
        1.. => Ok(Acquire::Acquired(answer.unsigned_abs())),
        ..=-1 => Ok(Acquire::Held(ttl(answer))),
        0 => Err(unexpected("0, which is not a fencing token".into())),
    }
}

/// The meaning of release.lua's answer: 1 freed; -2 freed by this
/// owner's own earlier release (this one was sent again), so freed too;
/// -3 freed by an operator; -4, or `{-4, fence}` with the fence of the
/// owner that holds it now, taken; -1 gone with nothing naming who freed
/// it (a shared kind's release answers -1 too).
pub(crate) fn released(answer: Value, key: &str) -> Result<Release, RedisError> {
    Ok(match answer {
        Value::Int(1 | -2) => Release::Freed,
        Value::Int(-1) => Release::NotHeld(Ended::Gone),
        Value::Int(-3) => Release::NotHeld(Ended::ForceUnlocked),
        Value::Int(-4) => Release::NotHeld(Ended::Taken),
        Value::Array(items) => match items.as_slice() {
            [Value::Int(-4), Value::Int(fence)] => {
                tracing::debug!(
                    key,
                    holder_fence = fence,
                    "the release found another owner holding the lock"
                );
                Release::NotHeld(Ended::Taken)
            }
            _ => return Err(unexpected_release(format!("{items:?}"))),
        },
        other => return Err(unexpected_release(format!("{other:?}"))),
    })
}

fn unexpected_release(found: String) -> RedisError {
    RedisError::from((
        redis::ErrorKind::Parse,
        "a release script answered something that is no release answer",
        found,
    ))
}

/// The TTL in a refusal, -2 - ttl (-1: no expiry).
fn ttl(answer: i64) -> Option<Duration> {
    (answer <= -2).then(|| Duration::from_millis((-2 - answer).unsigned_abs()))
}

fn unexpected(found: String) -> RedisError {
    RedisError::from((
        redis::ErrorKind::Parse,
        "an acquire script answered something that is no acquire answer",
        found,
    ))
}

/// The caller's error when `error` says that `key` is live as another kind
/// than `asked` (`LOCKKIND`, on the node or on any Redlock node).
pub(crate) fn kind_mismatch(error: &BackendError, key: &str, asked: Kind) -> Option<LockError> {
    let found = |e: &RedisError| -> Option<String> {
        if e.code() != Some("LOCKKIND") {
            return None;
        }
        let detail = e.detail().unwrap_or_default();
        let rest = detail.strip_prefix(key).unwrap_or(detail);
        let rest = rest.strip_prefix(" is ").unwrap_or(rest);
        Some(rest.split("; asked for").next().unwrap_or(rest).to_owned())
    };
    let found = match error {
        BackendError::Redis(e) => found(e),
        BackendError::NoQuorum { failures, .. } => failures.iter().find_map(|f| found(&f.error)),
    }?;
    Some(LockError::KindMismatch {
        key: key.to_owned(),
        asked: asked.name(),
        found,
        found_by: KindFoundBy::Backend,
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use redis::Value;

    use super::acquired;
    use crate::kind::Acquire;

    #[test]
    fn a_timed_grant_reads_the_node_time_and_nothing_else_changes() {
        let pair = || Value::Array(vec![Value::Int(7), Value::Int(1_700_000_000_123)]);
        let timed = Acquire::Timed {
            token: 7,
            since: Box::new([1_700_000_000_123]),
        };
        assert_eq!(acquired(pair(), true).ok(), Some(timed));
        // Without `timed`, the same shape is a shared kind's grant.
        assert!(matches!(
            acquired(pair(), false),
            Ok(Acquire::Shared { token: 7, .. })
        ));
        // A timed claim's refusal reads as any refusal; a bare token is no
        // answer to it.
        let refused = acquired(Value::Int(-2 - 300), true).ok();
        assert_eq!(
            refused,
            Some(Acquire::Held(Some(Duration::from_millis(300))))
        );
        assert!(acquired(Value::Int(7), true).is_err());
        assert_eq!(
            acquired(Value::Int(7), false).ok(),
            Some(Acquire::Acquired(7))
        );
    }
}
