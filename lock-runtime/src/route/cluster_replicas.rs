//! Acquires that wait for replicas on Redis Cluster (`sync_replicas`).
//!
//! The acquire script and `WAIT n timeout` go in one pipeline: the cluster
//! connection routes a pipeline by its first keyed command, so the `WAIT`
//! reaches the lock's master (alone, redis-rs would send it to every
//! master and keep the smallest answer) and counts the replicas that have
//! this connection's writes, the acquire's included. `WAIT` blocks the
//! connection it runs on, so these pipelines take cluster connections of
//! their own, one call at a time each: a few, made at connect and only when
//! `sync_replicas` is on.
//!
//! A call dropped while its synced acquire is in flight sends its release
//! on the client's main cluster connection, which does not queue behind
//! this one: if the acquire lands after that release, the lock stays until
//! its lease ends (nobody renews it).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::future::try_join_all;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{ErrorKind, RedisError, ServerErrorKind};
use tokio::sync::Mutex;

use super::millis;
use super::node::{acquired, ACQUIRE};
use crate::kind::Acquire;
use crate::replica_sync::ReplicaSync;

/// How many synced acquires may run at once.
const CONNECTIONS: usize = 4;

/// The connections for synced acquires.
pub(crate) struct SyncedAcquires {
    connections: Vec<Mutex<ClusterConnection>>,
    next: AtomicUsize,
    sync: ReplicaSync,
}

impl SyncedAcquires {
    /// Connects the pool through `client`, whose response timeout covers
    /// the command timeout and the replicas' timeout.
    pub(crate) async fn connect(
        client: &ClusterClient,
        sync: ReplicaSync,
    ) -> Result<Self, RedisError> {
        let connecting = (0..CONNECTIONS).map(|_| client.get_async_connection());
        let connections = try_join_all(connecting).await?;
        Ok(SyncedAcquires {
            connections: connections.into_iter().map(Mutex::new).collect(),
            next: AtomicUsize::new(0),
            sync,
        })
    }

    /// Takes the lock for `owner` and waits for the replicas: `NotReplicated`
    /// when the lock was taken but fewer replicas than asked have it.
    pub(crate) async fn acquire(
        &self,
        key: &str,
        owner: &str,
        lease: Duration,
    ) -> Result<Acquire, RedisError> {
        let free = self.connections.iter().find_map(|c| c.try_lock().ok());
        let mut con = match free {
            Some(con) => con,
            None => {
                let i = self.next.fetch_add(1, Ordering::Relaxed) % self.connections.len();
                self.connections[i].lock().await
            }
        };
        let mut pipe = redis::pipe();
        pipe.cmd("EVALSHA")
            .arg(ACQUIRE.get_hash())
            .arg(1)
            .arg(key)
            .arg(owner)
            .arg(millis(lease));
        pipe.cmd("WAIT")
            .arg(self.sync.replicas)
            .arg(millis(self.sync.timeout));
        let answer: Result<(i64, usize), _> = pipe.query_async(&mut *con).await;
        let (answer, acked) = match answer {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                ACQUIRE.load_async(&mut *con).await?;
                pipe.query_async(&mut *con).await?
            }
            answer => answer?,
        };
        Ok(match acquired(answer)? {
            Acquire::Acquired(token) if acked < self.sync.replicas => {
                Acquire::NotReplicated { token, acked }
            }
            other => other,
        })
    }
}
