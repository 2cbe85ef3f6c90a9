//! Fencing tokens: how a protected store refuses a holder that lost its lock.
//!
//! A lease-based lock cannot stop a holder that pauses (a long stall, a
//! stopped process, a slow call) from waking after its lease and writing as
//! if it still held the lock. The remedy is a fencing token: every
//! acquisition of a key (not a re-entry) gets a number strictly greater than
//! every number given earlier for that key, and the store that the lock
//! protects refuses writes that carry a smaller number than one it has seen.
//!
//! On Redis the acquire script decides the token: the larger of the kept
//! token + 1 and the server time in microseconds. Tokens cannot run ahead of
//! that clock (a key is not taken more than once a microsecond), so they keep
//! increasing across expiries, across a restart of a Redis without
//! persistence and across a restart that brings back an older snapshot, as
//! long as the server clock does not step back (run NTP with slewing, not
//! stepping). On Redlock the largest of the granting nodes' tokens is written
//! back to a quorum before the body runs, so any later quorum answers a
//! larger one (see the README). On the embedded backend it is a counter.
//!
//! # Checking the token in the store
//! The store records the highest token it has seen, and accepts an operation
//! only if its token is at least that. Reads that a write depends on must
//! record the token too: otherwise a paused old holder could still write
//! between a new holder's read and its write. In Redis, for example:
//!
//! ```lua
//! -- fenced_read.lua: KEYS[1] value, KEYS[2] highest token; ARGV[1] token
//! local seen = tonumber(redis.call('get', KEYS[2]) or '0')
//! if tonumber(ARGV[1]) < seen then return redis.error_reply('STALE token') end
//! redis.call('set', KEYS[2], ARGV[1])
//! return redis.call('get', KEYS[1])
//!
//! -- fenced_write.lua: KEYS[1] value, KEYS[2] highest token; ARGV[1] token, ARGV[2] value
//! local seen = tonumber(redis.call('get', KEYS[2]) or '0')
//! if tonumber(ARGV[1]) < seen then return 0 end
//! redis.call('set', KEYS[2], ARGV[1])
//! redis.call('set', KEYS[1], ARGV[2])
//! return 1
//! ```
//!
//! A SQL store does the same with a token column:
//! `UPDATE account SET balance = $1, token = $2 WHERE id = $3 AND token <= $2`,
//! and treats zero updated rows as a refusal.

use crate::ownership;

/// The fencing token of the lock of the innermost locked call whose body is
/// running (the lock it took, or the one it re-entered), or `None` outside a
/// locked body.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_runtime::LockError> {
/// use lock_runtime::{distributed_lock, LockClient, LockError};
///
/// #[distributed_lock(key = "account:<id>")]
/// async fn deposit(id: u64) -> Result<u64, LockError> {
///     let token = lock_runtime::fencing_token().expect("inside a locked body");
///     // store.write_if_token_at_least(token, ...)
///     Ok(token)
/// }
///
/// lock_runtime::init(LockClient::in_memory())?;
/// let first = deposit(1).await?;
/// let second = deposit(1).await?;
/// assert!(second > first);
/// assert_eq!(lock_runtime::fencing_token(), None);
/// # Ok(())
/// # }
/// ```
pub fn fencing_token() -> Option<u64> {
    ownership::innermost_held().map(|held| held.token)
}

/// The fencing token of the lock `key` (as written in the attribute or
/// given to `run_locked`, without the client's prefix) if the running body
/// holds it; `None` otherwise.
pub fn fencing_token_of(key: &str) -> Option<u64> {
    ownership::held_user_key(key).map(|held| held.token)
}
