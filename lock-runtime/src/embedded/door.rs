//! The embedded keyspace's connection: it takes any command the keyspace
//! answers (a script call, a raw command, `INFO commandstats`) as a
//! connection to a redis-server does. The backend sends its script calls
//! through it; only the `embedded-test-door` feature (`test_door.rs`) lets
//! a caller have one.

use redis::{Cmd, RedisError, RedisFuture, RedisResult, Value};

use super::EmbeddedKeyspace;

/// A connection to an embedded keyspace: it answers as a
/// connection to a redis-server does (`redis::ConnectionLike`, blocking
/// and async).
#[doc(hidden)]
#[derive(Clone)]
pub struct EmbeddedConnection {
    keyspace: EmbeddedKeyspace,
}

impl EmbeddedKeyspace {
    /// A connection that runs commands on this keyspace: the backend's own
    /// way in.
    pub(super) fn door(&self) -> EmbeddedConnection {
        EmbeddedConnection {
            keyspace: self.clone(),
        }
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
