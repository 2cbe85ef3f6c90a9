//! Distributed locks on Redis, as an attribute on async functions.
//!
//! `#[distributed_lock]` turns an async function into a critical section
//! that holds across tasks, processes and machines: the body runs only while
//! this process holds the lock in Redis, a watchdog renews the lease while
//! the body runs, nested locked calls in the same task re-enter instead of
//! deadlocking, and a dropped or panicking call releases the lock at once.
//!
//! ```
//! use lock_runtime::{distributed_lock, LockClient, LockError};
//!
//! #[derive(Debug)]
//! enum AppError {
//!     Lock(LockError),
//!     OutOfStock,
//! }
//!
//! impl From<LockError> for AppError {
//!     fn from(e: LockError) -> Self {
//!         AppError::Lock(e)
//!     }
//! }
//!
//! #[distributed_lock(key = "order:<id>", lease = "30s")]
//! async fn deduct(id: u64, qty: u32) -> Result<u32, AppError> {
//!     // Read, check and write the stock: no other holder of
//!     // `lock:order:<id>` runs this at the same time.
//!     if qty > 10 {
//!         return Err(AppError::OutOfStock);
//!     }
//!     Ok(10 - qty)
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), AppError> {
//!     // Once, at start-up. `LockClient::connect("redis://127.0.0.1/").await?`
//!     // for Redis; the embedded backend needs nothing.
//!     lock_runtime::init(LockClient::in_memory())?;
//!     assert_eq!(deduct(7, 3).await?, 7);
//!     Ok(())
//! }
//! ```
//!
//! # Options
//! The attribute's page, [`distributed_lock`], documents each option with
//! an example.
//! - `key = "order:<id>"` (required, or `keys`): the lock's name. `<name>`
//!   is an argument (anything `Display`; `<name:?>` renders with `Debug`),
//!   `<name.field>` a field of one, `<self.field>` a field of the receiver;
//!   names bound by patterns such as `Path(id): Path<u64>` work too. The
//!   Redis key is the client's prefix (default `lock:`) followed by the
//!   rendered key; the template itself labels the call's span and metrics.
//! - `keys = ["account:<from>", "account:<to>"]`: several keys, taken all
//!   or nothing, instead of `key`; two calls that list the same keys in any
//!   order never deadlock ([guide](guide::several_keys)).
//! - `lease = "30s"`: how long the lock lives in Redis without a renewal
//!   (default: the client's, 30 s; at least 10 ms). Durations are `250ms`,
//!   `30s`, `5m`, `1h`; or any expression of type `Duration` (`LEASE`,
//!   `self.lease`), evaluated at each call.
//! - `wait = "5s"`: how long to wait for a lock that another owner holds;
//!   `"0s"` tries once (default: the client's, 10 s). Then the call returns
//!   [`LockError::Timeout`]. Strings or expressions, as for `lease`.
//! - `renew = false`: do not renew; the body is stopped with
//!   [`LockError::Lost`] when the lease runs out (default `true`).
//! - `hold_at_least = "1m"`: after the body, keep the lock taken until at
//!   least that long after it was acquired, for jobs that run once per
//!   period across a fleet ([guide](guide::scheduled)).
//! - `crate = "path"`: where this crate is, if it was renamed.
//! - `client = &self.locks`: lock on that [`LockClient`] rather than the
//!   global one.
//!
//! # Key templates
//! - Text outside `<...>` is copied as it is, braces included: in Redis
//!   Cluster the part between the first `{` and `}` picks the slot, so
//!   `"{<tenant>}:order:<id>"` keeps a tenant's locks in one slot.
//! - `"order:{id}"` (the format-string habit) is a compile error when `id`
//!   is an argument: it would lock the literal text, one lock for all
//!   orders. Braces around anything else stay literal.
//! - Values are not escaped: `"a:<x>:<y>"` renders `x = "1:2", y = "3"` and
//!   `x = "1", y = "2:3"` as the same `a:1:2:3`. The key stays the plain
//!   string other tools and services name the lock by, no per-call scan is
//!   paid, and a collision only makes two calls exclude each other, never
//!   admits two holders. Put the one value that may hold the separator
//!   last, or write it `<x:?>` (quoted). `"<a><b>"` is refused: it collides
//!   even for numbers.
//!
//! The function must be `async` and return `Result<T, E>` with
//! `E: From<LockError>`; lock failures come back as `Err(E::from(error))`
//! and the body never runs without the lock.
//!
//! # Tracing and metrics
//! Each call has a `distributed_lock` span (fields `key`, `label`, `lease`,
//! `wait`), a child of the span its caller polls it in, with an event per
//! step: `debug` for the lifecycle (acquired, waiting, re-entered, timed
//! out, released, released in the background), `trace` for renewals, `warn`
//! only when a human should look (a lock lost, a renewal or release that
//! failed). Nothing is printed without a subscriber. With the `metrics`
//! feature, each call also records the metrics listed in [`metrics`],
//! labelled by the call's [`LockOptions::label`].
//!
//! # How it works
//! - A lock is a Redis string at `prefix + key`,
//!   `L1:<fence>:<state>:<owner>`, with the lease as its expiry (see
//!   `docs/redis-layout.md` in the repository). Taking, releasing and
//!   renewing are each one Lua script (loaded once, called by `EVALSHA`).
//! - Ownership is the extent of the body: a locked call made inside a
//!   locked body (same task, same client) on the same key re-enters with no
//!   round trip; calls run side by side there on that key take turns; a
//!   nested call that outlives the body stops. A spawned task is another
//!   owner. The rules, with an example, are on [`distributed_lock`].
//! - Waiters line up per key in arrival order within a client; the head of
//!   the line subscribes to the lock's release channel and retries when the
//!   holder's release publishes, or when the holder's lease runs out.
//! - Every acquisition gets a fencing token ([`fencing_token`]) that a
//!   protected store can check to refuse a holder that lost its lock; see
//!   the [fencing guide](guide::fencing) for how, in Lua and SQL.
//! - [`LockClient::redlock`] locks by quorum across N independent Redis
//!   masters, with the same behaviour for the caller.
//! - [`LockClient::sentinel`] locks on the master that Redis Sentinel
//!   names and follows it across failovers;
//!   [`sync_replicas`](LockClientBuilder::sync_replicas) makes each acquire
//!   and renewal wait for replicas, so a failover loses no lock silently.
//! - [`LockClient::cluster`] locks on a Redis Cluster: each lock in its
//!   key's slot, released with sharded pub/sub.
//! - One watchdog task per client renews every held lock at a third of its
//!   lease, batching locks into one script call. A renewal that finds the lock
//!   gone, or a lease that runs out with no successful renewal, stops the body
//!   with [`LockError::Lost`]; so does a release that finds the lock gone or
//!   cannot reach Redis, whatever the body returned.
//!
//! # Operating
//! [`LockClient::inspect`] tells whether a lock is held, by which client
//! (its name, host and pid), for how long and with which fencing token;
//! [`LockClient::held`] lists a client's locks; [`LockClient::force_unlock`]
//! frees a stuck lock and wakes its waiters; [`LockClient::shutdown`] stops a
//! client cleanly. [`LockError::is_retryable`] and its siblings sort errors.
//!
//! # Guides
//! The chapters that span several items, in [`guide`]:
//! - [`guide::deployments`]: which deployment to choose, and what each
//!   guarantees when a server fails.
//! - [`guide::security`]: passwords, ACL rules, TLS.
//! - [`guide::operations`]: the client's options, errors, inspect,
//!   force-unlock, shutdown, the key prefix, upgrading the layout.
//! - [`guide::observability`]: tracing and metrics.
//! - [`guide::safety`]: how it works, the safety model, limits.
//! - [`guide::fencing`]: how a store checks fencing tokens.
//! - [`guide::leader`]: leader election ([`lead`]).
//! - [`guide::performance`]: the benchmarks.
//! - [`guide::testing`]: testing code that uses the attribute.
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod advice;
mod announce;
mod backend;
mod builder;
mod client;
mod election;
#[cfg(feature = "embedded")]
mod embedded;
mod error;
mod fenced_write;
mod fencing;
mod force_unlock;
mod global;
pub mod guide;
mod held;
mod inspect;
mod io;
mod kind;
mod kind_check;
mod lazy;
mod lifecycle;
mod locking;
pub mod metrics;
mod node_name;
mod options;
mod owner_id;
mod ownership;
mod presence;
mod private;
mod replica_sync;
mod route;
mod shutdown;
mod subscriptions;
mod telemetry;
mod tls;
mod turn;
mod wakeup;
mod watchdog;

/// The attribute's documentation examples, run as doctests here, where
/// `lock_runtime` exists.
#[cfg(doctest)]
#[doc = include_str!("../../lock-macros/src/attribute.md")]
struct AttributeDocExamples;

/// The README's examples, run as doctests: each is a whole program.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeDocExamples;

#[doc(hidden)]
pub mod __private {
    pub use crate::private::*;
}

pub use builder::LockClientBuilder;
pub use client::LockClient;
pub use election::{Term, TermEnd};
#[cfg(feature = "embedded")]
#[cfg_attr(docsrs, doc(cfg(feature = "embedded")))]
pub use embedded::EmbeddedKeyspace;
#[cfg(feature = "embedded-test-door")]
#[doc(hidden)]
pub use embedded::{EmbeddedConnection, PublishedLog, StoredValue};
pub use error::{
    FoundBy, HeldBy, KindCheckCalls, KindFoundBy, LockError, LossReason, NodeFailure, WriteRan,
};
pub use fenced_write::{fenced, FencedWrite};
pub use fencing::{fencing_token, fencing_token_of};
pub use global::{client, init, with_client};
pub use inspect::{ClientInfo, HeldInfo, LockHolder, LockInfo};
pub use locking::outcome::Outcome;
// Documented where it is defined (`lock-macros/src/attribute.md`), so that
// rustdoc and IDE hover show the same page.
pub use lock_macros::distributed_lock;
pub use options::{LockMode, LockOptions};
/// The `redis` crate this one is built on: its [`RedisError`](redis::RedisError)
/// is the cause inside [`LockError::Backend`] and [`LockError::Connect`].
pub use redis;

use std::future::Future;

use locking::outcome::{Joined, Told};

/// Runs `body` under the lock `key` on the global client (or, inside
/// [`with_client`], the scoped one): the form for code that cannot use the
/// attribute (a closure, a key computed at run time).
/// Same ownership, renewal and loss rules as the attribute.
///
/// `key` is copied at the call; the client, and its prefix, are picked when
/// the future is first polled, as for an annotated call: a call made before
/// a scope and polled inside it, `with_client(client, run_locked(..))`,
/// locks on `client`. The future is `Send` when `body`, `T` and `E` are.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_runtime::LockError> {
/// use lock_runtime::{LockClient, LockError, LockOptions};
/// # let _ = lock_runtime::init(LockClient::in_memory());
///
/// let account = "acct-1";
/// let key = format!("account:{account}");
/// let balance = lock_runtime::run_locked(&key, LockOptions::new(), async {
///     Ok::<_, LockError>(100)
/// })
/// .await?;
/// assert_eq!(balance, 100);
/// # Ok(())
/// # }
/// ```
///
/// # Errors
/// As [`LockClient::run_locked`], and [`LockError::NotInitialized`] when
/// polled outside any [`with_client`] scope before [`init`].
#[track_caller]
pub fn run_locked<T, E, F>(
    key: &str,
    options: LockOptions,
    body: F,
) -> impl Future<Output = Result<T, E>>
where
    F: Future<Output = Result<T, E>>,
    E: From<LockError>,
{
    // The key is copied now; the client (the scope's, else the global one)
    // and its prefix are picked when the call is first polled.
    let key = private::key_text(key);
    // Where the call was made, for the kind check: the closure below runs
    // at the first poll, elsewhere.
    let at = std::panic::Location::caller();
    lazy::Lazy::new(move || {
        private::run_as::<Joined, _, _, _>(private::key_of_text(key), options, body, at)
    })
}

/// Runs `body` once every key of `keys` is held, all or nothing, on the
/// global client (or, inside [`with_client`], the scoped one): the form of
/// `#[distributed_lock(keys = [...])]` for code that cannot use the
/// attribute. As [`LockClient::run_locked_all`], and lazy as
/// [`run_locked`]: the keys are copied at the call, the client picked when
/// the future is first polled. The future is `Send` when `body`, `T` and
/// `E` are.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_runtime::LockError> {
/// use lock_runtime::{LockClient, LockError, LockOptions};
/// # let _ = lock_runtime::init(LockClient::in_memory());
///
/// let moved = lock_runtime::run_locked_all(["stock:a", "stock:b"], LockOptions::new(), async {
///     Ok::<_, LockError>(3)
/// })
/// .await?;
/// assert_eq!(moved, 3);
/// # Ok(())
/// # }
/// ```
///
/// # Errors
/// As [`LockClient::run_locked_all`], and [`LockError::NotInitialized`]
/// when polled outside any [`with_client`] scope before [`init`].
#[track_caller]
pub fn run_locked_all<T, E, F, I, K>(
    keys: I,
    options: LockOptions,
    body: F,
) -> impl Future<Output = Result<T, E>>
where
    I: IntoIterator<Item = K>,
    K: AsRef<str>,
    F: Future<Output = Result<T, E>>,
    E: From<LockError>,
{
    let keys: Vec<String> = keys
        .into_iter()
        .map(|key| private::key_text(key.as_ref()))
        .collect();
    let at = std::panic::Location::caller();
    lazy::Lazy::new(move || {
        private::run_all_as::<Joined, _, _, _>(private::keys_of_text(keys), options, body, at)
    })
}

/// Runs `body` under the lock `key` on the client in use, lazily, as
/// [`run_locked`], and tells the whole [`Outcome`], as
/// [`LockClient::run_locked_outcome`]. A call polled outside any
/// [`with_client`] scope before [`init`] is [`Outcome::NotRun`] with
/// [`LockError::NotInitialized`].
#[track_caller]
pub fn run_locked_outcome<T, E, F>(
    key: &str,
    options: LockOptions,
    body: F,
) -> impl Future<Output = Outcome<T, E>>
where
    F: Future<Output = Result<T, E>>,
{
    let key = private::key_text(key);
    let at = std::panic::Location::caller();
    lazy::Lazy::new(move || {
        private::run_as::<Told, _, _, _>(private::key_of_text(key), options, body, at)
    })
}

/// Runs `body` once every key of `keys` is held, on the client in use,
/// lazily, as [`run_locked_all`], and tells the whole [`Outcome`], as
/// [`LockClient::run_locked_all_outcome`].
#[track_caller]
pub fn run_locked_all_outcome<T, E, F, I, K>(
    keys: I,
    options: LockOptions,
    body: F,
) -> impl Future<Output = Outcome<T, E>>
where
    I: IntoIterator<Item = K>,
    K: AsRef<str>,
    F: Future<Output = Result<T, E>>,
{
    let keys: Vec<String> = keys
        .into_iter()
        .map(|key| private::key_text(key.as_ref()))
        .collect();
    let at = std::panic::Location::caller();
    lazy::Lazy::new(move || {
        private::run_all_as::<Told, _, _, _>(private::keys_of_text(keys), options, body, at)
    })
}

/// Campaigns for leadership of `key` on the global client (or, inside
/// [`with_client`], the scoped one) until elected, then runs `f(term)`'s
/// future while the term holds, and campaigns again after a loss: as
/// [`LockClient::lead`], and lazy as [`run_locked`]: the key is copied at
/// the call, the client picked when the future is first polled. The future
/// is `Send` when `f`, its futures and `E` are. See [`guide::leader`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_runtime::LockError> {
/// use lock_runtime::{LockClient, LockError, LockOptions};
/// # let _ = lock_runtime::init(LockClient::in_memory());
///
/// lock_runtime::lead("scheduler", LockOptions::new(), |term| async move {
///     // The leader's work, until it returns or the term is lost.
///     let _token = term.token();
///     Ok::<_, LockError>(())
/// })
/// .await?;
/// # Ok(())
/// # }
/// ```
///
/// # Errors
/// As [`LockClient::lead`], and [`LockError::NotInitialized`] when polled
/// outside any [`with_client`] scope before [`init`].
#[track_caller]
pub fn lead<E, F, Fut>(key: &str, options: LockOptions, f: F) -> impl Future<Output = Result<(), E>>
where
    F: FnMut(Term) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: From<LockError>,
{
    let key = private::key_text(key);
    election::lead_in_use(key, options, f, std::panic::Location::caller())
}
