//! Redis Cluster: locks of layout 1 (see `docs/redis-layout.md`), each in
//! its key's hash slot, sent by redis-rs's cluster connection to the slot's
//! master (it follows `MOVED` and `ASK` and refreshes the slot map itself).
//!
//! - **Scripts** are the single-node ones, called by EVALSHA on the lock key,
//!   except that the release publishes with `SPUBLISH` (sharded pub/sub: the
//!   notice goes to the slot's shard only, not to every node).
//! - **Retries.** The cluster connection sends a command again after a
//!   dropped connection or a redirect, a few times (`RETRIES`). Every script
//!   is harmless when run twice for one acquisition: an acquire that meets
//!   its own owner id answers its token; a second release finds the lock
//!   free and answers "not held" (then reported as such); a renewal resets
//!   the same lease.
//! - **Renewals** are split by slot (a script cannot touch two slots); the
//!   slots' calls go out at once, and one slot's failure leaves only its
//!   locks unknown.
//! - **Wake-ups** come by `SSUBSCRIBE` on connections of our own, one per
//!   node (see [`super::cluster_pubsub`]).
//! - **Replicas**: with `sync_replicas`, see [`super::cluster_replicas`].

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use futures_util::future::join_all;
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::Slot;
use redis::{Cmd, FromRedisValue, PushInfo, RedisError, Script, ToRedisArgs};
use tokio::runtime::Handle;

use super::cluster_replicas::SyncedAcquires;
use super::millis;
use super::node::{acquired, evalsha, evalsha_cmd, released_answer, RedisConfig, ACQUIRE, RENEW};
use super::notices::ShardedSubscriptions;
use crate::io::polled_on;
use crate::kind::sources;
use crate::kind::{Acquire, Release, RenewItem, Renewal};
use crate::replica_sync::ReplicaSync;

/// The release script with `SPUBLISH` for `PUBLISH`: the channel, named
/// like the lock key, is in the lock's slot, so the script may publish on
/// it, and only the slot's shard hears it.
static RELEASE_SHARDED: LazyLock<Script> = LazyLock::new(|| {
    let source = sources::RELEASE;
    let publish = "redis.pcall('publish', key,";
    assert!(source.contains(publish));
    Script::new(&source.replace(publish, "redis.pcall('spublish', key,"))
});

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
    synced: Option<Arc<SyncedAcquires>>,
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
        let subscriptions = ShardedSubscriptions::start(urls, config, on_push)?;
        let synced = match sync {
            Some(sync) => {
                // Each answer may take the command timeout plus the
                // replicas' timeout.
                let response = config.command_timeout.saturating_add(sync.timeout);
                let client = cluster_client(urls, config, response)?;
                Some(Arc::new(SyncedAcquires::connect(&client, sync).await?))
            }
            None => None,
        };
        Ok(ClusterBackend {
            commands,
            subscriptions,
            synced,
            client_id,
            home: Handle::current(),
        })
    }

    pub(crate) async fn acquire(
        &self,
        key: &str,
        owner: &str,
        lease: Duration,
    ) -> Result<Acquire, RedisError> {
        if let Some(synced) = &self.synced {
            return polled_on(&self.home, synced.acquire(key, owner, lease)).await;
        }
        let answer = self
            .eval(&ACQUIRE, key, (owner, millis(lease)), owner.len() + 20)
            .await?;
        acquired(answer)
    }

    pub(crate) async fn release(
        &self,
        key: &str,
        owner: &str,
        token: u64,
    ) -> Result<Release, RedisError> {
        let args = (owner, &*self.client_id, token);
        let size = owner.len() + self.client_id.len() + 20;
        let freed: i64 = self.eval(&RELEASE_SHARDED, key, args, size).await?;
        Ok(released_answer(freed))
    }

    /// Runs `cmd` routed by its key, on the client's cluster connection.
    pub(crate) async fn query<T: FromRedisValue>(&self, cmd: &Cmd) -> Result<T, RedisError> {
        let mut con = self.commands.clone();
        polled_on(&self.home, cmd.query_async(&mut con)).await
    }

    /// Calls `script` on `key` by EVALSHA, routed by the key to its slot's
    /// master; the script is loaded there first if that node lacks it (a
    /// new master after a failover).
    pub(crate) async fn eval<T: FromRedisValue>(
        &self,
        script: &Script,
        key: &str,
        args: impl ToRedisArgs,
        args_size: usize,
    ) -> Result<T, RedisError> {
        let cmd = evalsha_cmd(script, key, args, args_size);
        let mut con = self.commands.clone();
        polled_on(&self.home, evalsha(script, &cmd, &mut con)).await
    }

    /// Renewed or gone, per item. The items are grouped by hash slot, one
    /// script call per slot, all sent at once; a slot whose call fails
    /// leaves its items unknown and the others go on.
    pub(crate) async fn renew(&self, items: &[RenewItem<'_>]) -> Vec<Renewal> {
        let mut slots: HashMap<Slot, Vec<usize>> = HashMap::new();
        for (i, item) in items.iter().enumerate() {
            slots.entry(Slot::for_key(item.key)).or_default().push(i);
        }
        let calls = slots.into_values().map(|indexes| {
            let mut call = RENEW.prepare_invoke();
            for &i in &indexes {
                let item = &items[i];
                call.key(item.key).arg(item.owner).arg(millis(item.lease));
            }
            let mut con = self.commands.clone();
            async move {
                let answer: Result<Vec<i64>, RedisError> = call.invoke_async(&mut con).await;
                (indexes, answer)
            }
        });
        let answers = polled_on(&self.home, join_all(calls)).await;
        let mut found = vec![Renewal::Unknown; items.len()];
        for (indexes, answer) in answers {
            match answer {
                Ok(renewed) if renewed.len() == indexes.len() => {
                    for (i, r) in indexes.into_iter().zip(renewed) {
                        found[i] = if r == 1 {
                            Renewal::Renewed
                        } else {
                            Renewal::Gone
                        };
                    }
                }
                Ok(_) => tracing::warn!("renewal answered the wrong count; retrying"),
                Err(error) => {
                    tracing::warn!(%error, locks = indexes.len(), "lock renewal of one slot failed; retrying");
                }
            }
        }
        found
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

#[cfg(test)]
mod tests {
    #[test]
    fn the_sharded_release_publishes_by_spublish() {
        let plain = redis::Script::new(crate::kind::sources::RELEASE);
        assert!(super::RELEASE_SHARDED.get_hash() != plain.get_hash());
    }
}
