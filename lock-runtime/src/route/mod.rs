//! Where a lock kind's script calls run: one Redis node, the master found
//! through Sentinel, the slot's master on Redis Cluster, or each of a
//! quorum of independent masters (Redlock); the embedded backend
//! (`crate::embedded`) is a route too. Which of them a client has is
//! `crate::backend`'s business.
//!
//! A route knows nothing of lock kinds. It answers: which connection runs a
//! script call for a key ([`Route::run`]), how a write waits for replicas
//! ([`Route::run_synced`]: `WAIT` on the same connection), which keys one
//! script call may carry ([`Route::batches`]), how release notices reach
//! this client ([`Route::subscribe`], [`Notices`]), and, inside each
//! deployment, when the topology changed.

mod batch;
pub(crate) mod cluster;
pub(crate) mod evalsha;
pub(crate) mod local;
pub(crate) mod node;
pub(crate) mod redlock;
mod replay;
mod replicas;
mod script_errors;
pub(crate) mod sentinel;
pub(crate) mod target;

use std::future::Future;
use std::sync::LazyLock;
use std::time::Duration;

use ::redis::aio::MultiplexedConnection;
use ::redis::{Cmd, FromRedisValue, RedisError, Script, ToRedisArgs, Value};
use tokio::runtime;

use crate::error::{LockError, NodeFailure};

/// Why a backend could not answer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BackendError {
    /// The one Redis node failed.
    #[error(transparent)]
    Redis(RedisError),
    /// Too few Redlock nodes answered to reach a quorum.
    #[error("{reached} of the {needed} Redis nodes needed answered; {}", NodeFailure::list(.failures))]
    NoQuorum {
        needed: usize,
        reached: usize,
        failures: Vec<NodeFailure>,
    },
}

impl BackendError {
    /// The caller's error for this failure on the lock `key`, at `node`
    /// (the node that failed, without credentials: see
    /// [`Backend::error_on_key`](crate::backend::Backend::error_on_key)).
    pub(crate) fn on_key(self, key: &str, node: &str) -> LockError {
        match self {
            BackendError::Redis(source) => LockError::Backend {
                key: key.to_owned(),
                node: node.to_owned(),
                source,
            },
            BackendError::NoQuorum {
                needed,
                reached,
                failures,
            } => LockError::NoQuorum {
                key: key.to_owned(),
                needed,
                reached,
                failures,
            },
        }
    }

    /// Whether the server answered that the lock's key holds something that
    /// is not a lock of this layout (`LOCKLAYOUT`, or `WRONGTYPE`).
    pub(crate) fn is_foreign(&self) -> bool {
        match self {
            BackendError::Redis(e) => matches!(e.code(), Some("LOCKLAYOUT" | "WRONGTYPE")),
            BackendError::NoQuorum { .. } => false,
        }
    }

    /// Whether the request may still have run (or may yet run) on the
    /// server: a timeout, a dropped connection, too few Redlock nodes.
    pub(crate) fn outcome_unknown(&self) -> bool {
        match self {
            BackendError::Redis(e) => {
                e.is_timeout() || e.is_io_error() || e.is_connection_dropped()
            }
            BackendError::NoQuorum { .. } => true,
        }
    }
}

impl From<RedisError> for BackendError {
    fn from(error: RedisError) -> Self {
        BackendError::Redis(error)
    }
}

/// The connection that one call's requests take, chosen once per call: a
/// release sent while the call's acquire is in flight must follow it on the
/// same connection.
#[derive(Clone)]
pub(crate) enum Lane {
    /// The client's connection (and every connection of other backends).
    Home,
    /// The connection driven by the caller's runtime (see
    /// [`local::LocalConnections`]).
    Local(runtime::Id, MultiplexedConnection),
}

/// One script call, ready to send: an `EVALSHA` of `script` whose first
/// key is `key` (the key that routes it). A lock kind's operation (acquire,
/// release, renew a batch) is one such value; a route sends it as it is.
pub(crate) struct ScriptCall<'a> {
    pub script: &'static Script,
    pub key: &'a str,
    pub cmd: Cmd,
    /// A release of a hold of this lease: a route that can fail over keeps
    /// it for that long, to send it again to a new master (see
    /// `route/replay.rs`), whether it runs it by [`Route::run`] or, for a
    /// release that keeps a hold until its end, [`Route::run_synced`].
    pub replay: Option<Duration>,
    /// Where a route may send it in one call with others queued at the
    /// same moment (see [`Coalesce`]); `None` sends it alone.
    pub coalesce: Option<Coalesce>,
}

/// How a script call may go out together with others: a connection that
/// has a request in flight queues the calls that come meanwhile, and sends
/// the queue as one call of `script` when the request is answered, so the
/// server pays for one script call per batch (see `route/batch.rs`). A
/// call that comes while nothing is in flight goes out at once, alone.
///
/// `script` takes, per call in order, its key in `KEYS`, and `op`, the
/// count of its arguments and the arguments in `ARGV`; it answers an array
/// of each call's own answer, or its error as a string `CODE message`.
#[derive(Clone, Copy)]
pub(crate) struct Coalesce {
    pub script: &'static LazyLock<Script>,
    /// Which script of the batch runs this call.
    pub op: &'static str,
}

impl<'a> ScriptCall<'a> {
    /// `script` on the one key `key` with `args`, built in one buffer of
    /// about `args_size` bytes more than the fixed part rather than through
    /// `ScriptInvocation`, which allocates every argument on its own: this
    /// is the hot path.
    pub(crate) fn new(
        script: &'static Script,
        key: &'a str,
        args: impl ToRedisArgs,
        args_size: usize,
    ) -> Self {
        let mut cmd = Cmd::with_capacity(7, 96 + key.len() + args_size);
        cmd.arg("EVALSHA")
            .arg(script.get_hash())
            .arg(1)
            .arg(key)
            .arg(args);
        ScriptCall {
            script,
            key,
            cmd,
            replay: None,
            coalesce: None,
        }
    }
}

/// How release notices travel on a route: the release script publishes
/// with the command this names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Notices {
    /// `PUBLISH`, heard by `SUBSCRIBE` on the node.
    Plain,
    /// `SPUBLISH` (sharded pub/sub), heard on the slot's shard only.
    Sharded,
}

/// What every deployment that runs scripts provides; a lock kind's
/// protocol is written once against it.
pub(crate) trait Route: Sync {
    /// Runs `call` on the node that serves its key; `lane` is the call's
    /// connection where the route has more than one (see [`Lane`]).
    fn run<T: FromRedisValue + Send>(
        &self,
        lane: &Lane,
        call: &ScriptCall<'_>,
    ) -> impl Future<Output = Result<T, RedisError>> + Send;

    /// The replicas each write waits for (`sync_replicas`), if any.
    fn sync(&self) -> Option<crate::replica_sync::ReplicaSync>;

    /// Runs `call`, then `WAIT`, on a connection of its own to the node
    /// that serves its key: the answer and how many replicas acknowledged.
    /// The whole exchange, taking the connection included, ends within the
    /// command timeout plus the replicas' timeout. When the caller is gone
    /// before a positive answer comes, `undo` is sent after it on that
    /// connection.
    fn run_synced(
        &self,
        call: ScriptCall<'_>,
        undo: Option<Cmd>,
    ) -> impl Future<Output = Result<(Value, usize), RedisError>> + Send;

    /// The keys, by index, that one script call may carry together: all on
    /// one node, one hash slot each on Cluster.
    fn batches(&self, keys: &[&str]) -> Vec<Vec<usize>>;

    /// The keys, by index, that one script call may carry together when
    /// the call must run as one step on a server (taking several keys at
    /// once): all of them on one node; one hash slot's keys each on
    /// Cluster, in slot order.
    fn script_groups(&self, keys: &[&str]) -> Vec<Vec<usize>> {
        vec![(0..keys.len()).collect()]
    }

    /// How release notices travel.
    fn notices(&self) -> Notices;

    /// Makes sure a release of each of `keys` (at least one) by another
    /// client reaches this one. An error: some may not be subscribed.
    fn subscribe(&self, keys: &[&str]) -> impl Future<Output = Result<(), RedisError>> + Send;

    /// Stops listening for releases of `keys` (at least one).
    fn unsubscribe(&self, keys: &[&str]) -> impl Future<Output = Result<(), RedisError>> + Send;

    /// This client's id, which its release notices carry.
    fn client_id(&self) -> &str;
}

/// Milliseconds for a Redis argument, at least 1.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}
