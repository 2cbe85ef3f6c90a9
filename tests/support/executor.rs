//! Where a test of the Lua scripts runs them: a redis-server of its own, or
//! the embedded backend's keyspace (no Redis at all), behind one interface,
//! so that each test body is written once and runs on both (see [`both!`]).
//!
//! An [`Executor`] is a `redis::ConnectionLike` (`Script::invoke(x)`,
//! `redis::cmd(..).query(x)`), lets time pass ([`Executor::pass`]: a sleep
//! on Redis, a move of the keyspace's clock on the embedded one), counts
//! commands (`INFO commandstats`, which both answer) and hears what the
//! scripts publish ([`Executor::subscribe`]).
//!
//! Time: the embedded keyspace's clock stands still between passes (it
//! runs on a runtime whose time is paused), so its leases, TTLs and tokens
//! are exact; Redis's clock runs on its own, so a time it answers is at
//! most the expected one and short of it by at most the real time that
//! passed beyond the passes ([`Executor::assert_ms`]).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use lock_runtime::{EmbeddedConnection, EmbeddedKeyspace, PublishedLog};
use redis::{Cmd, ConnectionLike, FromRedisValue, RedisResult, Value};

use super::RedisServer;

/// Writes each test body `fn name(x: &mut Executor)` as two tests,
/// `name::on_redis` and `name::on_embedded`.
#[macro_export]
macro_rules! both {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[test]
                fn on_redis() {
                    super::$name(&mut $crate::support::executor::Executor::redis());
                }

                #[test]
                fn on_embedded() {
                    super::$name(&mut $crate::support::executor::Executor::embedded());
                }
            }
        )*
    };
}

/// A place that runs the scripts: a redis-server, or an embedded keyspace.
pub struct Executor {
    on: On,
    /// When it was made.
    started: Instant,
    /// The time the test let pass ([`Executor::pass`]).
    passed: Duration,
}

enum On {
    Redis {
        server: Box<RedisServer>,
        con: redis::Connection,
    },
    Embedded {
        keyspace: EmbeddedKeyspace,
        con: EmbeddedConnection,
        /// The runtime whose paused clock the keyspace reads.
        _runtime: tokio::runtime::Runtime,
    },
}

impl Executor {
    /// A redis-server of its own, started now.
    pub fn redis() -> Executor {
        let server = RedisServer::start();
        let con = server.connection();
        Executor::on(On::Redis {
            server: Box::new(server),
            con,
        })
    }

    /// An empty embedded keyspace whose clock moves only by
    /// [`Executor::pass`].
    pub fn embedded() -> Executor {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("a runtime with paused time");
        // Made inside the runtime: the keyspace reads its (paused) clock.
        let keyspace = runtime.block_on(async { EmbeddedKeyspace::new() });
        let con = keyspace.connection();
        Executor::on(On::Embedded {
            keyspace,
            con,
            _runtime: runtime,
        })
    }

    fn on(on: On) -> Executor {
        Executor {
            on,
            started: Instant::now(),
            passed: Duration::ZERO,
        }
    }

    /// Which one it is, for messages.
    pub fn name(&self) -> &'static str {
        match self.on {
            On::Redis { .. } => "redis-server",
            On::Embedded { .. } => "embedded",
        }
    }

    /// Whether its clock stands still between passes, so that times are
    /// exact (the embedded keyspace).
    pub fn exact(&self) -> bool {
        matches!(self.on, On::Embedded { .. })
    }

    /// The embedded keyspace, if it is one.
    pub fn keyspace(&self) -> Option<&EmbeddedKeyspace> {
        match &self.on {
            On::Embedded { keyspace, .. } => Some(keyspace),
            On::Redis { .. } => None,
        }
    }

    /// Lets `by` pass: a sleep on Redis, the clock moved on the embedded
    /// keyspace.
    pub fn pass(&mut self, by: Duration) {
        match &self.on {
            On::Redis { .. } => std::thread::sleep(by),
            On::Embedded { keyspace, .. } => keyspace.advance(by),
        }
        self.passed += by;
    }

    /// The real time that passed beyond the passes (zero on the embedded
    /// keyspace): how much earlier than the test's reckoning a lease may
    /// end on Redis.
    pub fn drift(&self) -> Duration {
        match self.on {
            On::Redis { .. } => self.started.elapsed().saturating_sub(self.passed),
            On::Embedded { .. } => Duration::ZERO,
        }
    }

    /// Asserts that a time in ms the scripts answered (a TTL, a lease
    /// left) is `expected`: exactly on the embedded keyspace; on Redis at
    /// most `expected` and short of it by at most the drift (and 2 ms of
    /// rounding either way).
    pub fn assert_ms(&self, actual: i64, expected: Duration, what: &str) {
        let expected = i64::try_from(expected.as_millis()).expect("ms");
        if self.exact() {
            assert_eq!(actual, expected, "{what} on {}", self.name());
            return;
        }
        let slack = i64::try_from(self.drift().as_millis()).expect("ms") + 2;
        assert!(
            actual <= expected + 2 && actual >= expected - slack,
            "{what} on {}: {actual} ms, expected {expected} ms (- at most {slack} ms)",
            self.name()
        );
    }

    /// How many times `command` ran since the last [`Executor::reset_stats`]
    /// (scripts' calls included), as `INFO commandstats` counts them.
    pub fn command_calls(&mut self, command: &str) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(self)
            .expect("INFO commandstats");
        lock_testkit::calls_in(&info, command)
    }

    /// Resets the command counts (`CONFIG RESETSTAT`).
    pub fn reset_stats(&mut self) {
        let () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query(self)
            .expect("CONFIG RESETSTAT");
    }

    /// Hears what is published on `channel` from now on.
    pub fn subscribe(&self, channel: &str) -> Subscriber {
        let from = match &self.on {
            On::Redis { server, .. } => {
                let mut con = server.connection();
                redis::cmd("SUBSCRIBE")
                    .arg(channel)
                    .exec(&mut con)
                    .expect("SUBSCRIBE");
                con.set_read_timeout(Some(Duration::from_secs(10)))
                    .expect("read timeout");
                From::Redis(con)
            }
            On::Embedded { keyspace, .. } => {
                From::Embedded(keyspace.published_log(), VecDeque::new())
            }
        };
        Subscriber {
            channel: channel.to_owned(),
            from,
        }
    }

    fn connection(&mut self) -> &mut dyn ConnectionLike {
        match &mut self.on {
            On::Redis { con, .. } => con,
            On::Embedded { con, .. } => con,
        }
    }
}

impl ConnectionLike for Executor {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        self.connection().req_packed_command(cmd)
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        self.connection().req_packed_commands(cmd, offset, count)
    }

    fn req_command(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        self.connection().req_command(cmd)
    }

    fn get_db(&self) -> i64 {
        0
    }

    fn check_connection(&mut self) -> bool {
        self.connection().check_connection()
    }

    fn is_open(&self) -> bool {
        true
    }
}

/// What is published on one channel: a subscribed connection on Redis, the
/// keyspace's log on the embedded one.
pub struct Subscriber {
    channel: String,
    from: From,
}

enum From {
    Redis(redis::Connection),
    /// The log, and the messages on this channel taken from it but not yet
    /// read.
    Embedded(PublishedLog, VecDeque<String>),
}

impl Subscriber {
    /// The next message published on the channel: waited for up to 10 s on
    /// Redis; on the embedded keyspace a script's messages are out when it
    /// returns, so one must be there.
    pub fn next(&mut self) -> String {
        match &mut self.from {
            From::Redis(con) => {
                let value = con.recv_response().expect("a published message");
                let data = match value {
                    Value::Push { data, .. } | Value::Array(data) => data,
                    other => panic!("not a message: {other:?}"),
                };
                let [kind, channel, message] = data.as_slice() else {
                    panic!("not a message: {data:?}");
                };
                let text = |v: &Value| String::from_redis_value_ref(v).expect("text");
                assert_eq!(text(kind), "message");
                assert_eq!(text(channel), self.channel);
                text(message)
            }
            From::Embedded(log, pending) => {
                for (channel, message) in log.take() {
                    if channel == self.channel.as_bytes() {
                        pending.push_back(String::from_utf8(message).expect("text"));
                    }
                }
                pending
                    .pop_front()
                    .unwrap_or_else(|| panic!("nothing published on {}", self.channel))
            }
        }
    }
}
