//! The embedded keyspace's door for tests (hidden from the docs): a
//! connection that takes any command the keyspace answers (a script call,
//! a raw command, `INFO commandstats`), its time set or moved, what its
//! scripts publish, and what it holds, so that the scripts' tests run on
//! the embedded backend as on a redis-server.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redis::{Cmd, PushInfo, RedisError, RedisFuture, RedisResult, Value};

use super::keyspace::Data;
use super::{micros, EmbeddedKeyspace, Listener};

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

/// A connection to an embedded keyspace, for tests: it answers as a
/// connection to a redis-server does (`redis::ConnectionLike`, blocking
/// and async).
#[doc(hidden)]
#[derive(Clone)]
pub struct EmbeddedConnection {
    keyspace: EmbeddedKeyspace,
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
    /// A connection that runs commands on this keyspace.
    pub fn connection(&self) -> EmbeddedConnection {
        EmbeddedConnection {
            keyspace: self.clone(),
        }
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

impl EmbeddedConnection {
    /// Runs one packed command (RESP, as redis-rs writes it).
    fn packed(&self, bytes: &[u8]) -> RedisResult<Value> {
        let Value::Array(parts) = redis::parse_redis_value(bytes)? else {
            return Err(RedisError::from((
                redis::ErrorKind::Client,
                "not a command",
            )));
        };
        let args: Vec<&[u8]> = parts
            .iter()
            .filter_map(|part| match part {
                Value::BulkString(bytes) => Some(bytes.as_slice()),
                _ => None,
            })
            .collect();
        Ok(self.keyspace.execute(&args))
    }
}

impl redis::ConnectionLike for EmbeddedConnection {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        self.packed(cmd)
    }

    fn req_packed_commands(
        &mut self,
        _cmd: &[u8],
        _offset: usize,
        _count: usize,
    ) -> RedisResult<Vec<Value>> {
        Err(RedisError::from((
            redis::ErrorKind::Client,
            "the embedded backend takes no pipelines",
        )))
    }

    fn req_command(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        Ok(self.keyspace.execute_cmd(cmd))
    }

    fn get_db(&self) -> i64 {
        0
    }

    fn check_connection(&mut self) -> bool {
        true
    }

    fn is_open(&self) -> bool {
        true
    }
}

impl redis::aio::ConnectionLike for EmbeddedConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let reply = self.keyspace.execute_cmd(cmd);
        Box::pin(std::future::ready(Ok(reply)))
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        _pipeline: &'a redis::Pipeline,
        _offset: usize,
        _count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(std::future::ready(Err(RedisError::from((
            redis::ErrorKind::Client,
            "the embedded backend takes no pipelines",
        )))))
    }

    fn get_db(&self) -> i64 {
        0
    }
}
