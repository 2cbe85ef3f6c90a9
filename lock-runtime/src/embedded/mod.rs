//! The embedded backend: the very Lua scripts the Redis deployments send,
//! run in an embedded Lua 5.1 (`lua.rs`) on an in-memory keyspace that
//! answers the commands they call as Redis does (`keyspace.rs`).
//!
//! It is a route like the others: a script call reaches it as an `EVALSHA`
//! (an unknown SHA-1 answers `NOSCRIPT`, and the route loads the script's
//! text with `SCRIPT LOAD`, as on Redis), so a lock kind's code runs on it
//! unchanged. What it does that Redis does not: its time is an epoch taken
//! at creation plus the elapsed time of the creating runtime's clock
//! (tokio's, so paused test time drives its leases), read once per command;
//! a message a script publishes goes, once the script has run, to every
//! client on the keyspace, through the same handler that reads pushes from
//! Redis (so a client skips its own plain notices, and a fair release wakes
//! the waiter it names); it answers inside the caller's poll.

mod args;
pub(crate) mod clock;
mod door;
mod keyspace;
mod lua;
mod shards;
#[cfg(any(test, feature = "embedded-test-door"))]
mod test_door;
#[cfg(test)]
mod tests;

use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{SystemTime, UNIX_EPOCH};

use redis::{Cmd, FromRedisValue, PushInfo, PushKind, RedisError, Value};
use tokio::time::Instant;

#[cfg(any(test, feature = "embedded-test-door"))]
pub use door::EmbeddedConnection;
#[cfg(any(test, feature = "embedded-test-door"))]
pub use test_door::{PublishedLog, StoredValue};

use self::clock::Clock;
use self::keyspace::Published;
use self::shards::Shards;
use crate::replica_sync::ReplicaSync;
use crate::route::evalsha::evalsha;
use crate::route::{Lane, Notices, Route, ScriptCall};

/// What a client on an embedded keyspace is told of each message published
/// there (see [`crate::subscriptions::push_handler`]).
type Listener = dyn Fn(PushInfo) + Send + Sync;

/// An in-memory keyspace that runs the lock scripts: the embedded backend's
/// store. [`LockClient::in_memory`](crate::LockClient::in_memory) makes one
/// of its own; several clients can share one
/// ([`LockClientBuilder::in_memory_shared`](crate::LockClientBuilder::in_memory_shared)),
/// as several processes share a Redis, so that they contend for its locks
/// and wake each other's waiters. Cloning it gives another handle to the
/// same keyspace.
#[derive(Clone)]
pub struct EmbeddedKeyspace {
    inner: Arc<Inner>,
}

struct Inner {
    shards: Shards,
    clock: Clock,
    /// The keyspace's time at creation, in microseconds since the epoch.
    epoch_us: u64,
    /// The clock's reading at creation.
    base: Instant,
    /// What the test door moved the time by, in microseconds.
    offset_us: std::sync::atomic::AtomicI64,
    listeners: Mutex<Vec<Weak<Listener>>>,
}

impl std::fmt::Debug for EmbeddedKeyspace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedKeyspace").finish_non_exhaustive()
    }
}

impl Default for EmbeddedKeyspace {
    fn default() -> Self {
        Self::new()
    }
}

impl EmbeddedKeyspace {
    /// An empty keyspace, on the clock of the current tokio runtime (the
    /// system's when there is none): a runtime with paused time
    /// (`#[tokio::test(start_paused = true)]`) drives its leases.
    ///
    /// # Panics
    /// If Lua cannot allocate a state (out of memory), at the first call.
    pub fn new() -> Self {
        Self::on_clock(Clock::current())
    }

    /// An empty keyspace on `clock`.
    pub(crate) fn on_clock(clock: Clock) -> Self {
        let epoch_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
        let base = clock.now();
        EmbeddedKeyspace {
            inner: Arc::new(Inner {
                shards: Shards::new(),
                clock,
                epoch_us,
                base,
                offset_us: Default::default(),
                listeners: Mutex::default(),
            }),
        }
    }

    /// The keyspace's time now, in microseconds since the epoch.
    fn now_us(&self) -> u64 {
        let elapsed = self
            .inner
            .clock
            .now()
            .saturating_duration_since(self.inner.base);
        let elapsed = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        let offset = self
            .inner
            .offset_us
            .load(std::sync::atomic::Ordering::Relaxed);
        self.inner
            .epoch_us
            .saturating_add(elapsed)
            .saturating_add_signed(offset)
    }

    /// Runs one command (a script call included) at the time now, then
    /// hands what it published to the listeners.
    fn execute(&self, args: &[&[u8]]) -> Value {
        let (reply, published) = self.inner.shards.execute(args, self.now_us());
        if !published.is_empty() {
            self.deliver(published);
        }
        reply.unwrap_or_else(|error| lua::server_error(&error))
    }

    /// Runs a command built as for Redis.
    fn execute_cmd(&self, cmd: &Cmd) -> Value {
        let args: Vec<&[u8]> = cmd
            .args_iter()
            .filter_map(|arg| match arg {
                redis::Arg::Simple(bytes) => Some(bytes),
                _ => None,
            })
            .collect();
        self.execute(&args)
    }

    /// Tells every client on the keyspace what was published.
    fn deliver(&self, published: Vec<Published>) {
        let listeners: Vec<Arc<Listener>> = {
            let mut list = self
                .inner
                .listeners
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            list.retain(|l| l.strong_count() > 0);
            list.iter().filter_map(Weak::upgrade).collect()
        };
        for (channel, message, sharded) in published {
            let kind = if sharded {
                PushKind::SMessage
            } else {
                PushKind::Message
            };
            for listener in &listeners {
                listener(PushInfo {
                    kind: kind.clone(),
                    data: vec![
                        Value::BulkString(channel.clone()),
                        Value::BulkString(message.clone()),
                    ],
                });
            }
        }
    }

    /// Adds a listener, told of every message published from now on for as
    /// long as it lives.
    fn listen(&self, listener: &Arc<Listener>) {
        self.inner
            .listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Arc::downgrade(listener));
    }
}

/// The embedded backend as one client's route.
#[derive(Clone)]
pub(crate) struct EmbeddedBackend {
    keyspace: EmbeddedKeyspace,
    client_id: Arc<str>,
    /// This client's listener, kept alive as long as the client.
    _listener: Arc<Listener>,
}

impl EmbeddedBackend {
    /// A client `client_id` on `keyspace`; `on_push` reads what scripts
    /// publish there, as the client's push handler reads Redis's pushes.
    pub(crate) fn new(
        keyspace: EmbeddedKeyspace,
        client_id: Arc<str>,
        on_push: impl Fn(PushInfo) + Send + Sync + 'static,
    ) -> Self {
        let listener: Arc<Listener> = Arc::new(on_push);
        keyspace.listen(&listener);
        EmbeddedBackend {
            keyspace,
            client_id,
            _listener: listener,
        }
    }
}

impl Route for EmbeddedBackend {
    async fn run<T: FromRedisValue + Send>(
        &self,
        _lane: &Lane,
        call: &ScriptCall<'_>,
    ) -> Result<T, RedisError> {
        evalsha(call.script, &call.cmd, &mut self.keyspace.door()).await
    }

    fn sync(&self) -> Option<ReplicaSync> {
        None
    }

    async fn run_synced(
        &self,
        call: ScriptCall<'_>,
        _undo: Option<Cmd>,
    ) -> Result<(Value, usize), RedisError> {
        let answer = evalsha(call.script, &call.cmd, &mut self.keyspace.door()).await?;
        Ok((answer, 0))
    }

    /// One batch per shard, so that a renewal runs on one shard's Lua
    /// state (a script over several shards' keys is correct, but holds
    /// them all).
    fn batches(&self, keys: &[&str]) -> Vec<Vec<usize>> {
        let mut by_shard: std::collections::BTreeMap<usize, Vec<usize>> = Default::default();
        for (i, key) in keys.iter().enumerate() {
            by_shard
                .entry(shards::shard_of(key.as_bytes()))
                .or_default()
                .push(i);
        }
        by_shard.into_values().collect()
    }

    fn notices(&self) -> Notices {
        Notices::Plain
    }

    async fn subscribe(&self, _keys: &[&str]) -> Result<(), RedisError> {
        Ok(())
    }

    async fn unsubscribe(&self, _keys: &[&str]) -> Result<(), RedisError> {
        Ok(())
    }

    fn client_id(&self) -> &str {
        &self.client_id
    }
}
