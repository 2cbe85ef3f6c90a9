//! Redis Cluster: each lock in its key's hash slot, its script calls sent
//! by redis-rs's cluster connection to the slot's master (it follows `MOVED`
//! and `ASK` and refreshes the slot map itself).
//!
//! - **Notices** go out by `SPUBLISH` (sharded pub/sub: to the slot's shard
//!   only, not to every node) and come in by `SSUBSCRIBE` on connections of
//!   our own, one per node (see [`pubsub`]).
//! - **Retries.** The cluster connection sends a command again after a
//!   dropped connection or a redirect, a few times (`RETRIES`). Every script
//!   is harmless when run twice for one acquisition: an acquire that meets
//!   its own owner id answers its token; a second release finds the lock
//!   free and answers "not held" (then reported as such); a renewal resets
//!   the same lease.
//! - **Batches** are one hash slot each (a script cannot touch two slots).
//! - **Replicas**: with `sync_replicas`, see [`replicas`].
//! - **A slot's master changing** (`MOVED`, `ASK`, `TRYAGAIN`,
//!   `CLUSTERDOWN` after those retries, a dead master's refused
//!   connections): a call that takes keys sends its request again until
//!   its wait ends (see [`follow`]).
//! - **Failovers**: releases of the last lease are sent again to a slot's
//!   new master, and this client's waiters on their keys try again (see
//!   [`failover`]). A release that failed unanswered (the cluster down for
//!   a moment during a failover) is sent again the same way, on any slot.

mod check;
mod failover;
mod follow;
mod pubsub;
mod replicas;
mod slots;

pub(crate) use follow::Following;
pub(crate) use slots::slot_of;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::{
    Cmd, ConnectionAddr, ConnectionInfo, ErrorKind, FromRedisValue, PushInfo, RedisError, Value,
};
use tokio::runtime::Handle;
use tokio::sync::{Semaphore, SemaphorePermit};

use super::evalsha::evalsha;
use super::node::RedisConfig;
use super::replay::ReplayLog;
use super::{Lane, Notices, Route, ScriptCall};
use crate::io::polled_on;
use crate::replica_sync::ReplicaSync;
use failover::{follow_masters, LastMap, Masters, OnPush, Shared, Unsent};
use pubsub::ShardedSubscriptions;
use replicas::MasterPools;

/// How many times the cluster connection sends a command again after a
/// dropped connection, a redirect (`MOVED`, `ASK`) or `TRYAGAIN` /
/// `CLUSTERDOWN`. Enough to follow a slot move and a failover's first
/// moments; the whole call stays bounded by the command timeout.
const RETRIES: u32 = 6;

/// The most script calls of one client in flight on the cluster
/// connection at once. A burst of calls beyond it waits its turn in the
/// client rather than in the connection's queue, where the command timeout
/// would run out for calls the servers never saw (and the calls given back
/// after those timeouts would add to the burst). A call waits while others
/// get their turns; it fails as timed out, unsent, only when no call got a
/// turn for a command timeout (see [`ClusterBackend::turn`]).
const MOST_IN_FLIGHT: usize = 256;

/// The most command timeouts a call waits for its turn in all, however
/// busy the connection.
const MOST_TURN_WAITS: u32 = 30;

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
    /// The slots of releases that failed unanswered, whose releases the
    /// follower sends again.
    unsent: Arc<Unsent>,
    /// The slot map read last, to name a failed key's master.
    last_map: Arc<LastMap>,
    client_id: Arc<str>,
    home: Handle,
    /// Turns to send a script call (see [`MOST_IN_FLIGHT`]), and how long
    /// a call may wait for one.
    turns: Arc<Semaphore>,
    /// How many turns were given, to tell a queue that moves from one
    /// that does not.
    given: Arc<AtomicU64>,
    command_timeout: Duration,
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
            Err(error) => return Err(check::explain(urls, error).await),
        };
        let on_push: OnPush = Arc::new(on_push);
        let push = on_push.clone();
        let subscriptions = ShardedSubscriptions::start(urls, config, move |info| push(info))?;
        let base = seed_info(urls, config)?;
        let timeouts = (config.connect_timeout, config.command_timeout);
        let synced = sync.map(|sync| Arc::new(MasterPools::new(sync, base.clone(), timeouts)));
        let replay = Arc::new(ReplayLog::new());
        let last_map = Arc::new(LastMap::default());
        let unsent = Arc::new(Unsent::default());
        let seed_host = match base.addr() {
            ConnectionAddr::Tcp(host, _) | ConnectionAddr::TcpTls { host, .. } => host.clone(),
            _ => String::new(),
        };
        let shared = Shared {
            log: Arc::downgrade(&replay),
            last: last_map.clone(),
            unsent: unsent.clone(),
            masters: Masters::new(base, timeouts),
        };
        tokio::spawn(follow_masters(shared, commands.clone(), seed_host, on_push));
        Ok(ClusterBackend {
            commands,
            subscriptions,
            synced,
            replay,
            unsent,
            last_map,
            client_id,
            home: Handle::current(),
            turns: Arc::new(Semaphore::new(MOST_IN_FLIGHT)),
            given: Arc::default(),
            command_timeout: config.command_timeout,
        })
    }

    /// Runs `cmd` routed by its key, on the client's cluster connection.
    pub(crate) async fn query<T: FromRedisValue>(&self, cmd: &Cmd) -> Result<T, RedisError> {
        let mut con = self.commands.clone();
        polled_on(&self.home, cmd.query_async(&mut con)).await
    }

    /// The node that a request on `key`, which failed with `error`, went
    /// to, as a caller's error names it: the node a redirect (`MOVED`,
    /// `ASK`) or a missing connection names, where redis-rs says; else the
    /// master of the key's hash slot in the slot map read last (a refused
    /// connection, a timeout, a server's error); else that slot, with
    /// `place` (the seeds).
    pub(crate) fn failed_node(&self, key: &str, error: &RedisError, place: &str) -> String {
        let slot = slot_of(key.as_bytes());
        failed_node(error, (slot, || self.last_map.master_of(slot)), place)
    }

    /// This route for one call that takes keys until `until`, the end of
    /// its wait: see [`Following`].
    pub(crate) fn following(&self, until: tokio::time::Instant) -> Following<'_> {
        Following::new(self, until)
    }

    /// Makes sure a release of each of `keys` reaches this client:
    /// `SSUBSCRIBE` on the node that serves the key's slot.
    pub(crate) async fn subscribe(&self, keys: &[&str]) -> Result<(), RedisError> {
        polled_on(&self.home, self.subscriptions.subscribe(keys)).await
    }

    pub(crate) async fn unsubscribe(&self, keys: &[&str]) -> Result<(), RedisError> {
        polled_on(&self.home, self.subscriptions.unsubscribe(keys)).await
    }
}

impl ClusterBackend {
    /// A turn to send a script call (see [`MOST_IN_FLIGHT`]), waited for
    /// while other calls get theirs; when none did for a command timeout
    /// (or after [`MOST_TURN_WAITS`] of them), a timeout error, which
    /// callers take as a call whose outcome is unknown though it was not
    /// sent.
    async fn turn(&self) -> Result<SemaphorePermit<'_>, RedisError> {
        for _ in 0..MOST_TURN_WAITS {
            let given = self.given.load(Ordering::Relaxed);
            let turn = polled_on(
                &self.home,
                tokio::time::timeout(self.command_timeout, self.turns.acquire()),
            );
            match turn.await {
                Ok(Ok(turn)) => {
                    self.given.fetch_add(1, Ordering::Relaxed);
                    return Ok(turn);
                }
                Ok(Err(_)) => break,
                Err(_) if self.given.load(Ordering::Relaxed) == given => break,
                Err(_) => continue,
            }
        }
        Err(RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "timed out: the request waited behind {MOST_IN_FLIGHT} others of this client, \
                 none answered within {:?}, and was not sent",
                self.command_timeout
            ),
        )))
    }

    /// After a script call that failed with `error` if any: a release (of
    /// the key `released`) that was not answered (see [`unanswered`]) is
    /// owed, and the follower sends it again (with the other releases of
    /// its slot) until it lands.
    fn owe_if_unanswered(&self, released: Option<&str>, error: Option<&RedisError>) {
        if let (Some(key), Some(error)) = (released, error) {
            if unanswered(error) {
                self.unsent.mark(slot_of(key.as_bytes()));
            }
        }
    }
}

/// Whether a request that failed with `error` may not have run, or ran
/// and its answer was lost: the cluster refused it for now (a slot's master
/// changing, a node loading or read-only), or the connection failed or
/// timed out. A script's own error (a foreign value at the key, an ACL
/// refusal) is an answer.
fn unanswered(error: &RedisError) -> bool {
    error.is_io_error()
        || error.is_timeout()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || error.kind() == ErrorKind::ClusterConnectionNotFound
        || matches!(
            error.code(),
            Some(
                "MOVED"
                    | "ASK"
                    | "TRYAGAIN"
                    | "CLUSTERDOWN"
                    | "LOADING"
                    | "MASTERDOWN"
                    | "READONLY"
                    | "BUSY"
                    | "NOSCRIPT"
            )
        )
}

/// The first seed's connection settings (credentials, TLS), which the
/// client's own connections to one node take, with that node's address.
fn seed_info(urls: &[String], config: &RedisConfig) -> Result<ConnectionInfo, RedisError> {
    let seed = urls.first().ok_or_else(|| {
        RedisError::from((
            ErrorKind::InvalidClientConfig,
            "no Redis Cluster node given",
        ))
    })?;
    Ok(config.tls.client(seed)?.get_connection_info().clone())
}

/// [`ClusterBackend::failed_node`] for a key of hash slot `slot`, whose
/// master in the slot map read last `master` gives.
fn failed_node(
    error: &RedisError,
    (slot, master): (u16, impl FnOnce() -> Option<Arc<str>>),
    place: &str,
) -> String {
    if let Some((node, _)) = error.redirect_node() {
        return node.to_owned();
    }
    if let Some(node) = error.detail() {
        if error.kind() == ErrorKind::ClusterConnectionNotFound {
            return node.to_owned();
        }
    }
    match master() {
        Some(master) => format!("{master} (the master of hash slot {slot} when last read)"),
        None => format!("the master of hash slot {slot} (cluster at {place})"),
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
        let answer = match self.turn().await {
            Ok(_turn) => {
                let mut con = self.commands.clone();
                polled_on(&self.home, evalsha(call.script, &call.cmd, &mut con)).await
            }
            Err(error) => Err(error),
        };
        let released = call.replay.map(|_| call.key);
        self.owe_if_unanswered(released, answer.as_ref().err());
        answer
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
        if let Some(lease) = call.replay {
            // A synced release (one that keeps a hold until its end).
            self.replay.record(&call, lease);
        }
        let routed = (call.script, call.key);
        let answer = synced
            .run(&self.home, &self.commands, routed, (call.cmd, undo))
            .await;
        let released = call.replay.map(|_| call.key);
        self.owe_if_unanswered(released, answer.as_ref().err());
        answer
    }

    fn batches(&self, keys: &[&str]) -> Vec<Vec<usize>> {
        self.script_groups(keys)
    }

    fn script_groups(&self, keys: &[&str]) -> Vec<Vec<usize>> {
        let mut slots: std::collections::BTreeMap<u16, Vec<usize>> = Default::default();
        for (i, key) in keys.iter().enumerate() {
            let slot = slots::slot_of(key.as_bytes());
            slots.entry(slot).or_default().push(i);
        }
        slots.into_values().collect()
    }

    fn notices(&self) -> Notices {
        Notices::Sharded
    }

    async fn subscribe(&self, keys: &[&str]) -> Result<(), RedisError> {
        ClusterBackend::subscribe(self, keys).await
    }

    async fn unsubscribe(&self, keys: &[&str]) -> Result<(), RedisError> {
        ClusterBackend::unsubscribe(self, keys).await
    }

    fn client_id(&self) -> &str {
        &self.client_id
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use redis::{ErrorKind, RedisError};

    use super::failed_node;

    fn server_error(text: &[u8]) -> RedisError {
        let value = redis::parse_redis_value(text).expect("a server error");
        value.extract_error().expect_err("an error")
    }

    #[test]
    fn a_slot_whose_master_is_changing_is_said_so_not_as_the_raw_redirect() {
        let error = |source| crate::error::LockError::Backend {
            key: "lock:order:7".into(),
            node: "10.0.0.2:7002 (the master of hash slot 6332 when last read)".into(),
            source,
        };
        let moved = error(server_error(b"-MOVED 6332 10.0.0.2:7002\r\n"));
        let text = moved.to_string();
        assert!(
            text.contains("the master of hash slot 6332 is changing"),
            "{text}"
        );
        assert!(!text.contains("MOVED"), "{text}");
        assert!(moved.is_retryable());
        for answer in [
            &b"-CLUSTERDOWN The cluster is down\r\n"[..],
            b"-TRYAGAIN Multiple keys request during rehashing of slot\r\n",
            b"-ASK 6332 10.0.0.3:7003\r\n",
        ] {
            let failed = error(server_error(answer));
            let text = failed.to_string();
            assert!(text.contains("is changing"), "{text}");
            assert!(
                !["CLUSTERDOWN", "TRYAGAIN", "ASK "]
                    .iter()
                    .any(|raw| text.contains(raw)),
                "{text}"
            );
            assert!(failed.is_retryable(), "{text}");
        }
    }

    #[test]
    fn an_error_names_the_node_that_failed() {
        let seeds = "10.0.0.4:7003,10.0.0.5:7004";
        let known = || Some(Arc::<str>::from("10.0.0.1:7000"));
        let moved = server_error(b"-MOVED 2463 10.0.0.9:7009\r\n");
        assert_eq!(failed_node(&moved, (2463, known), seeds), "10.0.0.9:7009");
        let ask = server_error(b"-ASK 2463 10.0.0.8:7008\r\n");
        assert_eq!(failed_node(&ask, (2463, known), seeds), "10.0.0.8:7008");
        let refused = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert_eq!(
            failed_node(&refused, (2463, known), seeds),
            "10.0.0.1:7000 (the master of hash slot 2463 when last read)"
        );
        assert_eq!(
            failed_node(&refused, (2463, || None), seeds),
            "the master of hash slot 2463 (cluster at 10.0.0.4:7003,10.0.0.5:7004)"
        );
        let missing = RedisError::from((
            ErrorKind::ClusterConnectionNotFound,
            "Requested connection not found",
            "10.0.0.7:7007".to_owned(),
        ));
        assert_eq!(failed_node(&missing, (2463, known), seeds), "10.0.0.7:7007");
    }
}
