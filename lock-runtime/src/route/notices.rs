//! Sharded pub/sub on Redis Cluster: the client's release channels, each
//! subscribed by `SSUBSCRIBE` on the node that serves its slot.
//!
//! redis-rs's cluster connection can subscribe too, but it forgets a
//! channel that the server drops when its slot moves (the server's
//! `sunsubscribe`). So this module keeps its own channels: one RESP3
//! connection per node, one channel per `SSUBSCRIBE` (a command may not span
//! slots), and for each channel the node it is subscribed on. A channel is
//! subscribed again elsewhere when its node's connection drops (a killed or
//! failed-over master) or when the server drops it (its slot moved). The
//! node of a slot is learned from the cluster itself: a node that does not
//! serve the slot answers `MOVED` with the one that does.
//!
//! The client's push handler sees every message, confirmation and
//! disconnection, as on one node: a disconnection wakes every waiter, and a
//! (re)subscription's confirmation wakes the key's line, so a release
//! published while the channel moved is not missed.

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::sync::{Arc, Weak};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::cluster_routing::Slot;
use redis::{
    AsyncConnectionConfig, Client, ConnectionAddr, ConnectionInfo, ProtocolVersion, PushInfo,
    PushKind, RedisError, Value,
};
use tokio::sync::{mpsc, Mutex};

use super::node::RedisConfig;

/// How often a channel whose node went away is tried again, and the pause
/// between tries; after that its waiters rely on the holder's expiry until
/// the subscription task asks for it again.
const RESUBSCRIBE_TRIES: u32 = 40;
const RESUBSCRIBE_PAUSE: Duration = Duration::from_millis(250);

/// `MOVED` hops followed from one node for one channel.
const HOPS: usize = 3;

/// What the push handlers tell the resubscription task.
enum Event {
    /// The connection to this node dropped.
    NodeLost(Arc<str>),
    /// The server dropped this channel (its slot moved away).
    Dropped(Box<str>),
}

type OnPush = Arc<dyn Fn(PushInfo) + Send + Sync>;

/// The client's sharded subscriptions.
pub(crate) struct ShardedSubscriptions {
    state: Mutex<State>,
    /// The first seed's connection settings (credentials, TLS), used for
    /// every node with the node's address.
    base: ConnectionInfo,
    /// The seeds' addresses: where to ask when a slot's node is not known.
    seeds: Vec<Arc<str>>,
    config: AsyncConnectionConfig,
    on_push: OnPush,
    events: mpsc::UnboundedSender<Event>,
}

#[derive(Default)]
struct State {
    /// Each wanted channel and the node it is subscribed on (`None`: not
    /// subscribed now).
    channels: HashMap<Box<str>, Option<Arc<str>>>,
    /// The subscription connection of each node, by `host:port`.
    nodes: HashMap<Arc<str>, MultiplexedConnection>,
    /// The node last found serving each slot.
    slots: HashMap<Slot, Arc<str>>,
    /// Nodes that failed to connect or answer: asked last, so that a node
    /// that is down (or frozen, which costs a connect timeout) delays only
    /// what no other node can do.
    failed: HashSet<Arc<str>>,
}

impl ShardedSubscriptions {
    /// Prepares the subscriptions (no connection yet) and starts the task
    /// that moves channels when their node goes away; it ends with the
    /// returned value.
    pub(crate) fn start(
        urls: &[String],
        config: &RedisConfig,
        on_push: impl Fn(PushInfo) + Send + Sync + 'static,
    ) -> Result<Arc<Self>, RedisError> {
        let infos = urls
            .iter()
            .map(|url| Ok(config.tls.client(url)?.get_connection_info().clone()))
            .collect::<Result<Vec<_>, RedisError>>()?;
        let seeds = infos.iter().filter_map(|i| address(i.addr())).collect();
        let first = infos.into_iter().next().ok_or_else(|| {
            RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "no cluster node given",
            ))
        })?;
        let settings = first
            .redis_settings()
            .clone()
            .set_protocol(ProtocolVersion::RESP3);
        let (events, queue) = mpsc::unbounded_channel();
        let this = Arc::new(ShardedSubscriptions {
            state: Mutex::new(State::default()),
            base: first.set_redis_settings(settings),
            seeds,
            config: AsyncConnectionConfig::new()
                .set_connection_timeout(Some(config.connect_timeout))
                .set_response_timeout(Some(config.command_timeout)),
            on_push: Arc::new(on_push),
            events,
        });
        tokio::spawn(follow(queue, Arc::downgrade(&this)));
        Ok(this)
    }

    /// Subscribes to `key`'s channel on the node that serves its slot.
    pub(crate) async fn subscribe(&self, key: &str) -> Result<(), RedisError> {
        let mut state = self.state.lock().await;
        match self.subscribe_somewhere(&mut state, key).await {
            Ok(node) => {
                state.channels.insert(key.into(), Some(node));
                Ok(())
            }
            Err(error) => {
                // The subscription task asks again while somebody waits.
                state.channels.remove(key);
                Err(error)
            }
        }
    }

    /// Stops listening on `key`'s channel.
    pub(crate) async fn unsubscribe(&self, key: &str) -> Result<(), RedisError> {
        let mut state = self.state.lock().await;
        let Some(Some(node)) = state.channels.remove(key) else {
            return Ok(());
        };
        let Some(mut con) = state.nodes.get(&node).cloned() else {
            return Ok(());
        };
        redis::cmd("SUNSUBSCRIBE")
            .arg(key)
            .query_async::<Value>(&mut con)
            .await
            .map(drop)
    }

    /// Subscribes `key` on the node of its slot: the one last seen serving
    /// it, else each seed in turn, following `MOVED` answers. The node it
    /// is subscribed on.
    async fn subscribe_somewhere(
        &self,
        state: &mut State,
        key: &str,
    ) -> Result<Arc<str>, RedisError> {
        let slot = Slot::for_key(key);
        let mut starts: Vec<Arc<str>> = state.slots.get(&slot).cloned().into_iter().collect();
        for node in self.seeds.iter().chain(state.nodes.keys()) {
            if !starts.contains(node) {
                starts.push(node.clone());
            }
        }
        // Stable: the slot's last node, then the seeds, keep their order.
        starts.sort_by_key(|node| state.failed.contains(node));
        let mut last = None;
        // Nodes that failed in this call: a redirect to one of them ends
        // the search (a frozen master costs one timeout, not one per seed).
        let mut failed_now: Vec<Arc<str>> = Vec::new();
        for start in starts {
            let mut node = start;
            for _ in 0..HOPS {
                if failed_now.contains(&node) {
                    break;
                }
                match self.ssubscribe_on(state, &node, key).await {
                    Ok(()) => {
                        state.failed.remove(&node);
                        state.slots.insert(slot, node.clone());
                        return Ok(node);
                    }
                    Err(error) => {
                        if let Some((to, _)) = error.redirect_node() {
                            node = to.into();
                            continue;
                        }
                        if error.is_io_error()
                            || error.is_connection_refusal()
                            || error.is_connection_dropped()
                            || error.is_timeout()
                        {
                            state.nodes.remove(&node);
                            state.failed.insert(node.clone());
                            failed_now.push(node);
                        }
                        last = Some(error);
                        break;
                    }
                }
            }
        }
        Err(last.unwrap_or_else(|| {
            RedisError::from((
                redis::ErrorKind::Io,
                "no cluster node took the subscription",
            ))
        }))
    }

    /// `SSUBSCRIBE key` on `node`, connecting to it first if needed.
    async fn ssubscribe_on(
        &self,
        state: &mut State,
        node: &Arc<str>,
        key: &str,
    ) -> Result<(), RedisError> {
        let mut con = match state.nodes.get(node) {
            Some(con) => con.clone(),
            None => {
                let con = self.connect(node).await?;
                state.nodes.insert(node.clone(), con.clone());
                con
            }
        };
        redis::cmd("SSUBSCRIBE")
            .arg(key)
            .query_async::<Value>(&mut con)
            .await
            .map(drop)
    }

    /// A RESP3 connection to `node` (`host:port`) that reports its pushes.
    async fn connect(&self, node: &Arc<str>) -> Result<MultiplexedConnection, RedisError> {
        let (host, port) = node
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h.to_owned(), p.parse().ok()?)))
            .ok_or_else(|| {
                RedisError::from((
                    redis::ErrorKind::Parse,
                    "a cluster node's address has no port",
                    node.to_string(),
                ))
            })?;
        let addr = match self.base.addr() {
            ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => ConnectionAddr::TcpTls {
                host,
                port,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => ConnectionAddr::Tcp(host, port),
        };
        let client = Client::open(self.base.clone().set_addr(addr))?;
        let (on_push, events, name) = (self.on_push.clone(), self.events.clone(), node.clone());
        let config = self.config.clone().set_push_sender(move |info: PushInfo| {
            match info.kind {
                PushKind::Disconnection => {
                    let _ = events.send(Event::NodeLost(name.clone()));
                }
                PushKind::SUnsubscribe => {
                    if let Some(Value::BulkString(channel)) = info.data.first() {
                        if let Ok(key) = std::str::from_utf8(channel) {
                            let _ = events.send(Event::Dropped(key.into()));
                        }
                    }
                }
                _ => {}
            }
            on_push(info);
            Ok::<(), Infallible>(())
        });
        client
            .get_multiplexed_async_connection_with_config(&config)
            .await
    }

    /// Subscribes again the channels in `moved` that are still wanted and
    /// not subscribed; the ones that fail, again after a pause.
    async fn resubscribe(&self, mut moved: Vec<Box<str>>) {
        for _ in 0..RESUBSCRIBE_TRIES {
            let mut failed = Vec::new();
            for key in moved {
                let mut state = self.state.lock().await;
                if !matches!(state.channels.get(&key), Some(None)) {
                    continue;
                }
                match self.subscribe_somewhere(&mut state, &key).await {
                    Ok(node) => {
                        state.channels.insert(key, Some(node));
                    }
                    Err(error) => {
                        tracing::debug!(%error, key = &*key, "resubscribe failed; retrying");
                        failed.push(key);
                    }
                }
            }
            if failed.is_empty() {
                return;
            }
            moved = failed;
            tokio::time::sleep(RESUBSCRIBE_PAUSE).await;
        }
        tracing::warn!(
            channels = moved.len(),
            "release channels not resubscribed; their waiters rely on the holders' expiry"
        );
    }
}

/// The resubscription task: runs while the subscriptions live.
async fn follow(mut queue: mpsc::UnboundedReceiver<Event>, this: Weak<ShardedSubscriptions>) {
    while let Some(event) = queue.recv().await {
        let Some(this) = this.upgrade() else { return };
        let moved: Vec<Box<str>> = {
            let mut state = this.state.lock().await;
            match event {
                Event::NodeLost(node) => {
                    state.nodes.remove(&node);
                    state.slots.retain(|_, n| *n != node);
                    let mut moved = Vec::new();
                    for (key, on) in state.channels.iter_mut() {
                        if on.as_ref() == Some(&node) {
                            *on = None;
                            moved.push(key.clone());
                        }
                    }
                    moved
                }
                Event::Dropped(key) => match state.channels.get_mut(&key) {
                    Some(on @ Some(_)) => {
                        *on = None;
                        state.slots.remove(&Slot::for_key(&*key));
                        vec![key]
                    }
                    _ => Vec::new(),
                },
            }
        };
        if !moved.is_empty() {
            // Each batch on its own task: a node that is slow to come back
            // does not hold up news of another.
            tokio::spawn(async move { this.resubscribe(moved).await });
        }
    }
}

/// `host:port` of a TCP address.
fn address(addr: &ConnectionAddr) -> Option<Arc<str>> {
    match addr {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            Some(format!("{host}:{port}").into())
        }
        _ => None,
    }
}
