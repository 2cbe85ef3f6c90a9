//! The embedded keyspace's door for tests (hidden from the docs, and only
//! with the `embedded-test-door` feature, which the workspace's tests
//! enable and no default build has): a connection that runs any command or
//! script, the keyspace's time set or moved, what its scripts publish, and
//! what it holds, so that the scripts' tests run on the embedded backend as
//! on a redis-server. A build without it has no way to run a script of the
//! caller's own.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redis::{PushInfo, Value};

use super::door::EmbeddedConnection;
use super::keyspace::Data;
use super::{EmbeddedKeyspace, Listener};

/// A published message: its channel and its text.
type Message = (Vec<u8>, Vec<u8>);

/// What a key of the embedded keyspace holds.
#[doc(hidden)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoredValue {
    /// A string.
    Str(Vec<u8>),
    /// A hash's fields, in the order the keyspace keeps them.
    Hash(Vec<(Vec<u8>, Vec<u8>)>),
    /// A list's items, first to last.
    List(Vec<Vec<u8>>),
}

/// The messages published on an embedded keyspace since this log was made,
/// as `(channel, message)`.
#[doc(hidden)]
pub struct PublishedLog {
    messages: Arc<Mutex<Vec<Message>>>,
    _listener: Arc<Listener>,
}

impl PublishedLog {
    /// Takes the messages logged so far.
    pub fn take(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        std::mem::take(&mut self.messages.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

#[doc(hidden)]
impl EmbeddedKeyspace {
    /// A connection that runs any command on this keyspace.
    pub fn connection(&self) -> EmbeddedConnection {
        self.door()
    }

    /// The keyspace's time, in microseconds since the epoch.
    pub fn time_us(&self) -> u64 {
        self.now_us()
    }

    /// Sets the keyspace's time to `unix_us` (microseconds since the
    /// epoch); it runs on from there.
    pub fn set_time_us(&self, unix_us: u64) {
        let now = self.now_us();
        let by =
            i64::try_from(unix_us).unwrap_or(i64::MAX) - i64::try_from(now).unwrap_or(i64::MAX);
        self.shift(by);
    }

    /// Moves the keyspace's time forward by `by`.
    pub fn advance(&self, by: Duration) {
        self.shift(micros(by));
    }

    /// A log of what scripts publish from now on.
    pub fn published_log(&self) -> PublishedLog {
        let messages: Arc<Mutex<Vec<Message>>> = Arc::default();
        let log = messages.clone();
        let listener: Arc<Listener> = Arc::new(move |info: PushInfo| {
            if let [Value::BulkString(channel), Value::BulkString(message)] = info.data.as_slice() {
                log.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push((channel.clone(), message.clone()));
            }
        });
        self.listen(&listener);
        PublishedLog {
            messages,
            _listener: listener,
        }
    }

    /// Every live key, what it holds and when it expires (milliseconds
    /// since the epoch; `None`: never).
    pub fn dump(&self) -> BTreeMap<Vec<u8>, (StoredValue, Option<u64>)> {
        self.inner
            .shards
            .dump(self.now_us())
            .into_iter()
            .map(|(key, (data, expires))| {
                let value = match data {
                    Data::Str(s) => StoredValue::Str(s),
                    Data::Hash(fields) => StoredValue::Hash(fields),
                    Data::List(items) => StoredValue::List(items),
                };
                (key, (value, expires))
            })
            .collect()
    }
}

impl EmbeddedKeyspace {
    /// Moves the keyspace's time by `by_us` microseconds.
    fn shift(&self, by_us: i64) {
        self.inner
            .offset_us
            .fetch_add(by_us, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Microseconds of `d`, saturating.
fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}
