//! Replica-synced writes (`sync_replicas`): a script call (an acquire, a
//! renewal batch, a release that keeps a hold until its end) and
//! `WAIT n timeout` in one pipeline, on one node: the
//! node of a single-node client, the current Sentinel master, or each
//! Cluster master (one pool per master, so that one master's slow replica
//! delays only the calls on that master).
//!
//! `WAIT` counts the writes of its own connection and blocks that connection
//! until the replicas answer, so it must follow the write on the same
//! connection, and no other call may share that connection meanwhile. Each
//! synced request takes a connection of its own from a small pool (made on
//! demand, a few kept idle), never the client's shared one. None of this
//! exists when `sync_replicas` is off.
//!
//! Each request runs in a task of its own on the client's runtime: if the
//! caller is dropped (or stops waiting) while an acquire's pipeline is on
//! the wire, the task releases a lock it took on that same connection, so
//! the release cannot overtake the acquire.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{
    AsyncConnectionConfig, Client, Cmd, ErrorKind, FromRedisValue, RedisError, Script,
    ServerErrorKind, Value,
};
use tokio::runtime::Handle;
use tokio::sync::oneshot;

use super::millis;
use super::script_errors::unwrapped;
use crate::io::polled_on;
use crate::replica_sync::ReplicaSync;

/// Idle synced connections kept for later requests; more are made when
/// more requests run at once, and closed after them.
const IDLE_KEPT: usize = 16;

/// What `sync_replicas` needs on one node: how many replicas, and the
/// connections that carry the synced requests.
pub(crate) struct Replicated {
    pub sync: ReplicaSync,
    client: Client,
    /// The response timeout covers the command timeout and the WAIT.
    config: AsyncConnectionConfig,
    /// The longest a caller waits for one synced request, taking its
    /// connection included: the command timeout plus the replicas' timeout.
    bound: Duration,
    idle: Mutex<Vec<MultiplexedConnection>>,
    /// The scripts this client has loaded on the node (by their SHA-1).
    loaded: Mutex<Vec<&'static str>>,
}

impl Replicated {
    /// The synced connections to the node `client` opens, with the
    /// client's connect and command timeouts.
    pub(crate) fn new(sync: ReplicaSync, client: Client, timeouts: (Duration, Duration)) -> Self {
        let (connect, command) = timeouts;
        let bound = command.saturating_add(sync.timeout);
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(connect.min(bound)))
            .set_response_timeout(Some(bound));
        Replicated {
            sync,
            client,
            config,
            bound,
            idle: Mutex::new(Vec::new()),
            loaded: Mutex::new(Vec::new()),
        }
    }

    /// Whether this client has loaded `script` on the node.
    fn has_loaded(&self, script: &'static Script) -> bool {
        let loaded = self.loaded.lock().unwrap_or_else(PoisonError::into_inner);
        loaded.contains(&script.get_hash())
    }

    /// A connection that no other call uses until it is given back.
    async fn take(&self) -> Result<MultiplexedConnection, RedisError> {
        let idle = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        match idle {
            Some(con) => Ok(con),
            None => {
                self.client
                    .get_multiplexed_async_connection_with_config(&self.config)
                    .await
            }
        }
    }

    fn give_back(&self, con: MultiplexedConnection) {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < IDLE_KEPT {
            idle.push(con);
        }
    }

    /// `cmd` (an EVALSHA of `script`) then `WAIT`, in one pipeline on `con`:
    /// the script's answer and how many replicas acknowledged. The script is
    /// loaded first the first time this client sends it to the node: a
    /// `NOSCRIPT` answer comes only after the `WAIT` behind it, which lasts
    /// the replicas' timeout when they are away, and the script would run
    /// that late (a release past the lease of the hold it keeps). After a
    /// `NOSCRIPT` all the same (the node lost its scripts), the script is
    /// loaded and the pipeline sent again.
    async fn with_wait<T: FromRedisValue>(
        &self,
        script: &'static Script,
        cmd: &Cmd,
        con: &mut MultiplexedConnection,
    ) -> Result<(T, usize), RedisError> {
        if !self.has_loaded(script) {
            script.load_async(con).await?;
            let mut loaded = self.loaded.lock().unwrap_or_else(PoisonError::into_inner);
            if !loaded.contains(&script.get_hash()) {
                loaded.push(script.get_hash());
            }
        }
        let mut pipe = redis::pipe();
        pipe.add_command(cmd.clone())
            .cmd("WAIT")
            .arg(self.sync.replicas)
            .arg(millis(self.sync.timeout));
        // Errors are kept per command, so the script's own (`LOCKLAYOUT`,
        // `NOSCRIPT`) keeps its code.
        pipe.ignore_errors();
        let mut answer = pipe.query_async::<(Value, Value)>(con).await?;
        if matches!(&answer.0, Value::ServerError(e) if e.kind() == Some(ServerErrorKind::NoScript))
        {
            script.load_async(con).await?;
            answer = pipe.query_async(con).await?;
        }
        let (reply, acked) = answer;
        let reply = redis::from_redis_value(reply.extract_error().map_err(unwrapped)?)?;
        let acked: usize = redis::from_redis_value(acked.extract_error()?)?;
        Ok((reply, acked))
    }

    /// Runs `cmd` (an EVALSHA of `script`) and `WAIT` on a connection of
    /// its own, in a task on the client's runtime (`home`): the script's
    /// answer and the replicas that acknowledged. The caller waits at most
    /// [`bound`](Self::bound), taking the connection included. If the
    /// caller is gone when a granting answer (a positive integer, or an
    /// array: a shared kind's grant or a place in a line) comes, `undo` is
    /// sent after it on the same connection.
    pub(crate) async fn run(
        self: &Arc<Self>,
        home: &Handle,
        script: &'static Script,
        cmd: Cmd,
        undo: Option<Cmd>,
    ) -> Result<(Value, usize), RedisError> {
        let (answer_tx, answer_rx) = oneshot::channel();
        let this = self.clone();
        home.spawn(async move {
            let mut con = match this.take().await {
                Ok(con) => con,
                Err(error) => {
                    let _ = answer_tx.send(Err(error));
                    return;
                }
            };
            let answer = this.with_wait::<Value>(script, &cmd, &mut con).await;
            let reusable = answer.is_ok();
            if let (Err(Ok((Value::Int(1..) | Value::Array(_), _))), Some(undo)) =
                (answer_tx.send(answer), undo)
            {
                let _ = undo.query_async::<Value>(&mut con).await;
            }
            if reusable {
                this.give_back(con);
            }
        });
        let answer = polled_on(home, tokio::time::timeout(self.bound, answer_rx)).await;
        match answer {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(RedisError::from((
                ErrorKind::Io,
                "the client stopped during a replica-synced request",
            ))),
            Err(_) => Err(RedisError::from((
                ErrorKind::Io,
                "no replica-synced answer within the command timeout and the replicas' timeout",
            ))),
        }
    }
}
