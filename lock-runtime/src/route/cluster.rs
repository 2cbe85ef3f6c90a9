//! Redis Cluster: each lock in its key's hash slot, its script calls sent
//! by redis-rs's cluster connection to the slot's master (it follows `MOVED`
//! and `ASK` and refreshes the slot map itself).
//!
//! - **Notices** go out by `SPUBLISH` (sharded pub/sub: to the slot's shard
//!   only, not to every node) and come in by `SSUBSCRIBE` on connections of
//!   our own, one per node (see [`super::notices`]).
//! - **Retries.** The cluster connection sends a command again after a
//!   dropped connection or a redirect, a few times (`RETRIES`). Every script
//!   is harmless when run twice for one acquisition: an acquire that meets
//!   its own owner id answers its token; a second release finds the lock
//!   free and answers "not held" (then reported as such); a renewal resets
//!   the same lease.
//! - **Batches** are one hash slot each (a script cannot touch two slots).
//! - **Replicas**: with `sync_replicas`, see [`super::cluster_replicas`].
//! - **Failovers**: releases of the last lease are sent again to a slot's
//!   new master, and this client's waiters on their keys try again (see
//!   [`super::cluster_failover`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::Slot;
use redis::{Cmd, ConnectionAddr, FromRedisValue, PushInfo, RedisError, Value};
use tokio::runtime::Handle;

use super::cluster_failover::{follow_masters, OnPush};
use super::cluster_replicas::MasterPools;
use super::node::{evalsha, RedisConfig};
use super::notices::ShardedSubscriptions;
use super::replay::ReplayLog;
use super::{Lane, Notices, Route, ScriptCall};
use crate::io::polled_on;
use crate::replica_sync::ReplicaSync;

/// How many times the cluster connection sends a command again after a
/// dropped connection, a redirect (`MOVED`, `ASK`) or `TRYAGAIN` /
/// `CLUSTERDOWN`. Enough to follow a slot move and a failover's first
/// moments; the whole call stays bounded by the command timeout.
const RETRIES: u32 = 6;

/// The shortest and longest pause between two such sends, in ms.
const RETRY_WAIT_MS: (u64, u64) = (10, 250);

/// The cluster's connections and the client's id.
#[derive(Clone)]
pub(crate) struct ClusterBackend {
    commands: ClusterConnection,
    subscriptions: Arc<ShardedSubscriptions>,
    /// Present only with `sync_replicas`: the off switch costs nothing.
    synced: Option<Arc<MasterPools>>,
    /// The releases of the last lease, sent again to a slot's new master.
    replay: Arc<ReplayLog>,
    client_id: Arc<str>,
    home: Handle,
}

/// A cluster client with the options every cluster connection shares:
/// `response` bounds one node's answer and `overall` a whole call with its
/// retries.
pub(crate) fn cluster_client(
    urls: &[String],
    config: &RedisConfig,
    response: Duration,
) -> Result<ClusterClient, RedisError> {
    let builder = ClusterClientBuilder::new(urls.iter().map(String::as_str))
        .connection_timeout(config.connect_timeout)
        .response_timeout(response)
        .overall_response_timeout(Some(response))
        .retries(RETRIES)
        .min_retry_wait(RETRY_WAIT_MS.0)
        .max_retry_wait(RETRY_WAIT_MS.1);
    config.tls.cluster(builder, urls)?.build()
}

impl ClusterBackend {
    /// Connects to the cluster through `urls` (any of its nodes). `on_push`
    /// sees every sharded message, subscription confirmation and
    /// disconnection of the subscription connections.
    pub(crate) async fn connect(
        urls: &[String],
        config: &RedisConfig,
        client_id: Arc<str>,
        on_push: impl Fn(PushInfo) + Send + Sync + 'static,
        sync: Option<ReplicaSync>,
    ) -> Result<Self, RedisError> {
        let connected = match cluster_client(urls, config, config.command_timeout) {
            Ok(client) => client.get_async_connection().await,
            Err(error) => Err(error),
        };
        let commands = match connected {
            Ok(commands) => commands,
            Err(error) => return Err(super::cluster_check::explain(urls, error).await),
        };
        let on_push: OnPush = Arc::new(on_push);
        let push = on_push.clone();
        let subscriptions = ShardedSubscriptions::start(urls, config, move |info| push(info))?;
        let synced = match (sync, urls.first()) {
            (Some(sync), Some(seed)) => {
                let base = config.tls.client(seed)?.get_connection_info().clone();
                let timeouts = (config.connect_timeout, config.command_timeout);
                Some(Arc::new(MasterPools::new(sync, base, timeouts)))
            }
            _ => None,
        };
        let replay = Arc::new(ReplayLog::new());
        let seed_host = urls
            .first()
            .and_then(|url| config.tls.client(url).ok())
            .map(|client| match client.get_connection_info().addr() {
                ConnectionAddr::Tcp(host, _) | ConnectionAddr::TcpTls { host, .. } => host.clone(),
                _ => String::new(),
            })
            .unwrap_or_default();
        let log = Arc::downgrade(&replay);
        let follow = follow_masters(log, commands.clone(), seed_host, on_push);
        tokio::spawn(follow);
        Ok(ClusterBackend {
            commands,
            subscriptions,
            synced,
            replay,
            client_id,
            home: Handle::current(),
        })
    }

    /// Runs `cmd` routed by its key, on the client's cluster connection.
    pub(crate) async fn query<T: FromRedisValue>(&self, cmd: &Cmd) -> Result<T, RedisError> {
        let mut con = self.commands.clone();
        polled_on(&self.home, cmd.query_async(&mut con)).await
    }

    /// Makes sure a release of `key` reaches this client: `SSUBSCRIBE` on
    /// the node that serves the key's slot.
    pub(crate) async fn subscribe(&self, key: &str) -> Result<(), RedisError> {
        polled_on(&self.home, self.subscriptions.subscribe(key)).await
    }

    pub(crate) async fn unsubscribe(&self, key: &str) -> Result<(), RedisError> {
        polled_on(&self.home, self.subscriptions.unsubscribe(key)).await
    }
}

impl Route for ClusterBackend {
    /// The script is loaded on the slot's master first if that node lacks
    /// it (a new master after a failover).
    async fn run<T: FromRedisValue + Send>(
        &self,
        _lane: &Lane,
        call: &ScriptCall<'_>,
    ) -> Result<T, RedisError> {
        if let Some(lease) = call.replay {
            // Kept before it is sent: a failover after the send finds it.
            self.replay.record(call, lease);
        }
        let mut con = self.commands.clone();
        polled_on(&self.home, evalsha(call.script, &call.cmd, &mut con)).await
    }

    fn sync(&self) -> Option<ReplicaSync> {
        self.synced.as_ref().map(|synced| synced.sync())
    }

    async fn run_synced(
        &self,
        call: ScriptCall<'_>,
        undo: Option<Cmd>,
    ) -> Result<(Value, usize), RedisError> {
        let Some(synced) = &self.synced else {
            return Ok((self.run(&Lane::Home, &call).await?, 0));
        };
        let routed = (call.script, call.key);
        synced
            .run(&self.home, &self.commands, routed, (call.cmd, undo))
            .await
    }

    fn batches(&self, keys: &[&str]) -> Vec<Vec<usize>> {
        let mut slots: HashMap<Slot, Vec<usize>> = HashMap::new();
        for (i, key) in keys.iter().enumerate() {
            slots.entry(Slot::for_key(key)).or_default().push(i);
        }
        slots.into_values().collect()
    }

    fn notices(&self) -> Notices {
        Notices::Sharded
    }

    async fn subscribe(&self, key: &str) -> Result<(), RedisError> {
        ClusterBackend::subscribe(self, key).await
    }

    async fn unsubscribe(&self, key: &str) -> Result<(), RedisError> {
        ClusterBackend::unsubscribe(self, key).await
    }

    fn client_id(&self) -> &str {
        &self.client_id
    }
}
