//! Sharded pub/sub on Redis Cluster: the client's release channels, each
//! subscribed by `SSUBSCRIBE` on the master of its slot.
//!
//! redis-rs's cluster connection can subscribe too, but it forgets a
//! channel that the server drops when its slot moves (the server's
//! `sunsubscribe`). So this module keeps its own channels: one RESP3
//! connection per node, one channel per `SSUBSCRIBE` (a command may not span
//! slots), and for each channel the node it is subscribed on. A channel is
//! subscribed again elsewhere when its node's connection drops (a killed or
//! failed-over master) or when the server drops it (its slot moved).
//!
//! The master of a slot is read from the cluster's slot map (`CLUSTER
//! SLOTS`, asked of any reachable node; replicas answer it too), read again
//! after a node is lost, a channel is dropped, or a subscription lands
//! elsewhere than on the map's master. A replica accepts `SSUBSCRIBE` for
//! its master's slots but relays nothing while it syncs, so the master is
//! asked first. Without a map (no node answers it, or the user may not send
//! it), or when the master refuses, the seeds are asked in turn, following
//! `MOVED` answers, as a fallback.
//!
//! The client's push handler sees every message, confirmation and
//! disconnection, as on one node: a disconnection wakes every waiter, and a
//! (re)subscription's confirmation wakes the key's line, so a release
//! published while the channel moved is not missed.
//!
//! A sharded channel is never unsubscribed: no `SUNSUBSCRIBE` is sent. Its
//! confirmation is a `sunsubscribe` push, which redis-rs from 1.8.2 on no
//! longer takes as the reply to a command sent as such (it cannot tell it
//! from the server's own, when a slot moves): the command would wait until
//! its timeout and leave every later command on the connection one reply
//! behind. A channel nobody waits on any more *lapses* instead: it stays
//! subscribed on its connection, where its messages wake nobody, until it is
//! wanted again (subscribing it again is harmless) or the connection is
//! closed. A connection is closed, and its wanted channels subscribed again
//! on a new one, once more channels have lapsed on it than [`LAPSED_MAX`]
//! or than it has wanted ones. Every connection the client closes has its
//! wanted channels subscribed again, so a channel counted on a node is
//! always subscribed on the node's current connection; events of a closed
//! connection (told apart by a generation number) are ignored.

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use redis::aio::MultiplexedConnection;
use redis::{
    AsyncConnectionConfig, ConnectionAddr, ConnectionInfo, ProtocolVersion, PushInfo, PushKind,
    RedisError, Value,
};
use tokio::sync::{mpsc, Mutex};

use super::slots::{node_client, slot_of, SlotMap};
use crate::route::node::RedisConfig;

/// How often a channel whose node went away is tried again, and the pause
/// between tries; after that its waiters rely on the holder's expiry until
/// the subscription task asks for it again.
const RESUBSCRIBE_TRIES: u32 = 40;
const RESUBSCRIBE_PAUSE: Duration = Duration::from_millis(250);

/// `MOVED` hops followed from one node for one channel.
const HOPS: usize = 3;

/// Nodes asked for the slot map in one reading, each bounded by the
/// connect and command timeouts.
const MAP_ASKS: usize = 3;

/// After a reading of the slot map that no node answered, how long the
/// subscriptions do without one before asking again.
const MAP_PAUSE: Duration = Duration::from_secs(1);

/// The lapsed channels a connection keeps (or as many as its wanted ones,
/// if more) before it is remade without them.
const LAPSED_MAX: usize = 64;

/// What the push handlers and the closing of a connection tell the
/// resubscription task.
enum Event {
    /// The connection of this generation to this node dropped.
    NodeLost { node: Arc<str>, generation: u64 },
    /// The server dropped this channel on this node's connection of this
    /// generation (its slot moved away).
    Dropped {
        node: Arc<str>,
        generation: u64,
        key: Box<str>,
    },
    /// Wanted channels whose connection the client closed.
    Orphaned(Vec<Box<str>>),
}

type OnPush = Arc<dyn Fn(PushInfo) + Send + Sync>;

/// The client's sharded subscriptions.
pub(crate) struct ShardedSubscriptions {
    state: Mutex<State>,
    /// The first seed's connection settings (credentials, TLS), used for
    /// every node with the node's address.
    base: ConnectionInfo,
    /// The seeds' addresses: where to ask when a slot's master is not known.
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
    nodes: HashMap<Arc<str>, NodeConnection>,
    /// The generation of the last connection tried.
    generation: u64,
    /// The nodes found without sharded pub/sub (Redis 6.2: `SSUBSCRIBE` is
    /// an unknown command), where channels are subscribed by `SUBSCRIBE`;
    /// found again once a node's connection is remade.
    plain: HashSet<Arc<str>>,
    /// The slots' masters as last read; `None`: to be read again before
    /// the next subscription.
    masters: Option<SlotMap>,
    /// When a reading of the slot map last found no node to answer it.
    unanswered: Option<Instant>,
    /// Nodes that failed to connect or answer: asked last, so that a node
    /// that is down (or frozen, which costs a connect timeout) delays only
    /// what no other node can do.
    failed: HashSet<Arc<str>>,
}

/// A node's subscription connection.
struct NodeConnection {
    con: MultiplexedConnection,
    /// Tells this connection's events from those of an earlier one to the
    /// same node.
    generation: u64,
    /// The sharded channels no longer wanted but still subscribed here.
    lapsed: HashSet<Box<str>>,
}

impl State {
    /// Whether `generation` is the current connection to `node`.
    fn is_current(&self, node: &Arc<str>, generation: u64) -> bool {
        self.nodes
            .get(node)
            .is_some_and(|connection| connection.generation == generation)
    }

    /// Closes the connection to `node`, if any (the server ends its
    /// subscriptions there). The wanted channels that were on it, now
    /// counted as not subscribed.
    fn close(&mut self, node: &Arc<str>) -> Vec<Box<str>> {
        if self.nodes.remove(node).is_none() {
            return Vec::new();
        }
        self.plain.remove(node);
        let mut orphaned = Vec::new();
        for (key, on) in self.channels.iter_mut() {
            if on.as_ref() == Some(node) {
                *on = None;
                orphaned.push(key.clone());
            }
        }
        orphaned
    }
}

/// The channels: what the cluster route asks for, and their resubscription.
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

    /// Subscribes to every key's channel on the master of its slot: the
    /// keys whose master the slot map names by commands sent side by side
    /// on that node's connection (one channel each, as a sharded subscribe
    /// may not span slots); the others, and those that fail there, one
    /// after another as [`subscribe_one`](Self::subscribe_one) does. An
    /// error: the first of those.
    pub(crate) async fn subscribe(&self, keys: &[&str]) -> Result<(), RedisError> {
        let mut state = self.state.lock().await;
        if state.masters.is_none() {
            self.read_masters(&mut state).await;
        }
        let mut rest = Vec::new();
        let mut by_node: HashMap<Arc<str>, Vec<&str>> = HashMap::new();
        for &key in keys {
            let slot = slot_of(key.as_bytes());
            match state.masters.as_ref().and_then(|map| map.master_of(slot)) {
                Some(node) if !state.failed.contains(node) => {
                    by_node.entry(node.clone()).or_default().push(key);
                }
                _ => rest.push(key),
            }
        }
        for (node, keys) in by_node {
            rest.extend(self.subscribe_side_by_side(&mut state, &node, &keys).await);
        }
        let mut first = None;
        for key in rest {
            if let Err(error) = self.subscribe_one(&mut state, key).await {
                first.get_or_insert(error);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Subscribes to each of `keys` on `node`, the master of their slots,
    /// by commands sent side by side on its connection; the keys that
    /// failed.
    async fn subscribe_side_by_side<'k>(
        &self,
        state: &mut State,
        node: &Arc<str>,
        keys: &[&'k str],
    ) -> Vec<&'k str> {
        let Ok(con) = self.connection(state, node).await else {
            return keys.to_vec();
        };
        let command = if state.plain.contains(node) {
            "SUBSCRIBE"
        } else {
            "SSUBSCRIBE"
        };
        let answers = join_all(keys.iter().map(|key| {
            let mut con = con.clone();
            async move {
                redis::cmd(command)
                    .arg(*key)
                    .query_async::<Value>(&mut con)
                    .await
            }
        }))
        .await;
        let mut failed = Vec::new();
        for (&key, answer) in keys.iter().zip(answers) {
            if answer.is_err() {
                failed.push(key);
                continue;
            }
            if let Some(connection) = state.nodes.get_mut(node) {
                connection.lapsed.remove(key);
            }
            state.channels.insert(key.into(), Some(node.clone()));
        }
        failed
    }

    /// Subscribes to `key`'s channel on the master of its slot.
    async fn subscribe_one(&self, state: &mut State, key: &str) -> Result<(), RedisError> {
        match self.subscribe_somewhere(state, key).await {
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

    /// Stops listening on the channels of `keys`. An error: the first.
    pub(crate) async fn unsubscribe(&self, keys: &[&str]) -> Result<(), RedisError> {
        let mut state = self.state.lock().await;
        let mut by_node: HashMap<Arc<str>, Vec<&str>> = HashMap::new();
        for &key in keys {
            if let Some(Some(node)) = state.channels.remove(key) {
                by_node.entry(node).or_default().push(key);
            }
        }
        let mut first = None;
        for (node, keys) in by_node {
            if let Err(error) = self.unsubscribe_on(&mut state, &node, &keys).await {
                first.get_or_insert(error);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Closes the connection to `node`, if any, and has its wanted channels
    /// subscribed again.
    fn close(&self, state: &mut State, node: &Arc<str>) {
        let orphaned = state.close(node);
        if !orphaned.is_empty() {
            let _ = self.events.send(Event::Orphaned(orphaned));
        }
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

/// Where a channel goes: the slot's master, by the slot map, else by the
/// seeds and `MOVED`.
impl ShardedSubscriptions {
    /// Subscribes `key` on the master of its slot, as the slot map says;
    /// else on the first node, from the seeds on, that takes it (following
    /// `MOVED` answers). The node it is subscribed on.
    async fn subscribe_somewhere(
        &self,
        state: &mut State,
        key: &str,
    ) -> Result<Arc<str>, RedisError> {
        let slot = slot_of(key.as_bytes());
        let master = self.master_of(state, slot).await;
        let node = self
            .subscribe_from(state, key, master.iter().cloned().collect())
            .await?;
        if master.as_ref() == Some(&node) {
            return Ok(node);
        }
        // A node the map does not name as the slot's master (no map, an
        // old one, or the master refused): maybe a replica, which relays
        // nothing while it syncs. Read the map again and move there.
        state.masters = None;
        let node = self.move_to_master(state, key, slot, node).await;
        // Reading the map there may have found the node lost and closed
        // its connection, and the channel with it.
        if !state.nodes.contains_key(&node) {
            return Err(RedisError::from((
                redis::ErrorKind::Io,
                "the subscription's node was lost",
            )));
        }
        Ok(node)
    }

    /// Subscribes `key` on the first node of `first`, the seeds and the
    /// known nodes (failed ones last) that takes it, following up to `HOPS`
    /// `MOVED` answers from each.
    async fn subscribe_from(
        &self,
        state: &mut State,
        key: &str,
        first: Vec<Arc<str>>,
    ) -> Result<Arc<str>, RedisError> {
        let mut last = None;
        // Nodes that failed in this call: a redirect to one of them ends
        // the search (a frozen master costs one timeout, not one per seed).
        let mut failed_now: Vec<Arc<str>> = Vec::new();
        for start in self.candidates(state, first) {
            let mut node = start;
            for _ in 0..HOPS {
                if failed_now.contains(&node) {
                    break;
                }
                match self.ssubscribe_on(state, &node, key).await {
                    Ok(()) => {
                        state.failed.remove(&node);
                        return Ok(node);
                    }
                    Err(error) => {
                        if let Some((to, _)) = error.redirect_node() {
                            // The map (if any) is old.
                            state.masters = None;
                            node = to.into();
                            continue;
                        }
                        if is_lost(&error) {
                            self.close(state, &node);
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

    /// Moves `key`'s channel from `node` to the slot's master, if a fresh
    /// slot map names another one that has not failed and it takes the
    /// channel. The node the channel is on.
    async fn move_to_master(
        &self,
        state: &mut State,
        key: &str,
        slot: u16,
        node: Arc<str>,
    ) -> Arc<str> {
        let Some(master) = self.master_of(state, slot).await else {
            return node;
        };
        if master == node || state.failed.contains(&master) {
            return node;
        }
        match self.ssubscribe_on(state, &master, key).await {
            Ok(()) => {
                if let Err(error) = self.unsubscribe_on(state, &node, &[key]).await {
                    tracing::debug!(%error, key, "unsubscribe from a non-master failed");
                }
                master
            }
            Err(error) => {
                tracing::debug!(%error, key, "subscribe on the slot's master failed");
                if is_lost(&error) {
                    self.close(state, &master);
                    state.failed.insert(master);
                }
                node
            }
        }
    }
}

/// The slot map: which node is each slot's master, and whom to ask.
impl ShardedSubscriptions {
    /// The master of `slot` in the slot map, read first if there is none.
    async fn master_of(&self, state: &mut State, slot: u16) -> Option<Arc<str>> {
        if state.masters.is_none() {
            self.read_masters(state).await;
        }
        state.masters.as_ref()?.master_of(slot).cloned()
    }

    /// Reads the slot map from the first of up to `MAP_ASKS` nodes (the
    /// connected ones, then the seeds; failed ones last) that answers it.
    /// Not again within `MAP_PAUSE` of a reading that no node answered.
    async fn read_masters(&self, state: &mut State) {
        if state.unanswered.is_some_and(|at| at.elapsed() < MAP_PAUSE) {
            return;
        }
        let connected = state.nodes.keys().cloned().collect();
        for node in self.candidates(state, connected).into_iter().take(MAP_ASKS) {
            let answer = match self.connection(state, &node).await {
                Ok(mut con) => SlotMap::read(&mut con, &node).await,
                Err(error) => Err(error),
            };
            match answer {
                Ok(map) if !map.is_empty() => {
                    state.masters = Some(map);
                    state.unanswered = None;
                    return;
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::debug!(%error, node = &*node, "no slot map from a cluster node");
                    if is_lost(&error) {
                        self.close(state, &node);
                        state.failed.insert(node);
                    }
                }
            }
        }
        state.unanswered = Some(Instant::now());
    }

    /// `first`, then the seeds, then the other known nodes, each once;
    /// nodes that failed last, each part keeping its order.
    fn candidates(&self, state: &State, first: Vec<Arc<str>>) -> Vec<Arc<str>> {
        let mut nodes = first;
        for node in self.seeds.iter().chain(state.nodes.keys()) {
            if !nodes.contains(node) {
                nodes.push(node.clone());
            }
        }
        nodes.sort_by_key(|node| state.failed.contains(node));
        nodes
    }
}

/// The connections, one per node.
impl ShardedSubscriptions {
    /// `SSUBSCRIBE key` on `node`, connecting to it first if needed (a
    /// channel lapsed there is wanted again); on a node without sharded
    /// pub/sub, `SUBSCRIBE key` (the releases there publish by `PUBLISH`,
    /// which reaches every node).
    async fn ssubscribe_on(
        &self,
        state: &mut State,
        node: &Arc<str>,
        key: &str,
    ) -> Result<(), RedisError> {
        let mut con = self.connection(state, node).await?;
        if !state.plain.contains(node) {
            let sharded = redis::cmd("SSUBSCRIBE")
                .arg(key)
                .query_async::<Value>(&mut con)
                .await;
            match sharded {
                Err(error) if is_unknown_command(&error) => {
                    tracing::debug!(node = &**node, "no sharded pub/sub there: SUBSCRIBE");
                    state.plain.insert(node.clone());
                }
                Ok(_) => {
                    if let Some(connection) = state.nodes.get_mut(node) {
                        connection.lapsed.remove(key);
                    }
                    return Ok(());
                }
                Err(error) => return Err(error),
            }
        }
        redis::cmd("SUBSCRIBE")
            .arg(key)
            .query_async::<Value>(&mut con)
            .await
            .map(drop)
    }

    /// Stops listening on the channels of `keys` on `node`, if the client
    /// has a connection there: `UNSUBSCRIBE` of each, side by side, where
    /// it has no sharded pub/sub (its confirmation is the command's reply
    /// in every redis-rs version); else the channels lapse (see the
    /// module's doc), and the connection is closed if that makes too many
    /// lapsed ones. An error: the first.
    async fn unsubscribe_on(
        &self,
        state: &mut State,
        node: &Arc<str>,
        keys: &[&str],
    ) -> Result<(), RedisError> {
        let Some(connection) = state.nodes.get_mut(node) else {
            return Ok(());
        };
        if state.plain.contains(node) {
            let con = connection.con.clone();
            let answers = join_all(keys.iter().map(|key| {
                let mut con = con.clone();
                async move {
                    redis::cmd("UNSUBSCRIBE")
                        .arg(*key)
                        .query_async::<Value>(&mut con)
                        .await
                }
            }))
            .await;
            return answers
                .into_iter()
                .find(Result::is_err)
                .map_or(Ok(()), |e| e.map(drop));
        }
        connection
            .lapsed
            .extend(keys.iter().map(|key| Box::from(*key)));
        let lapsed = connection.lapsed.len();
        if lapsed <= LAPSED_MAX {
            return Ok(());
        }
        let wanted = state
            .channels
            .values()
            .filter(|on| on.as_ref() == Some(node))
            .count();
        if lapsed > wanted {
            tracing::debug!(
                node = &**node,
                lapsed,
                wanted,
                "remaking a subscription connection"
            );
            self.close(state, node);
        }
        Ok(())
    }

    /// The connection to `node`, made first if there is none.
    async fn connection(
        &self,
        state: &mut State,
        node: &Arc<str>,
    ) -> Result<MultiplexedConnection, RedisError> {
        if let Some(connection) = state.nodes.get(node) {
            return Ok(connection.con.clone());
        }
        // Used up even if the connection fails: a failed connection's
        // events never name a later one.
        state.generation += 1;
        let generation = state.generation;
        let con = self.connect(node, generation).await?;
        let connection = NodeConnection {
            con: con.clone(),
            generation,
            lapsed: HashSet::new(),
        };
        state.nodes.insert(node.clone(), connection);
        Ok(con)
    }

    /// A RESP3 connection to `node` (`host:port`) that reports its pushes,
    /// its events tagged with `generation`.
    async fn connect(
        &self,
        node: &Arc<str>,
        generation: u64,
    ) -> Result<MultiplexedConnection, RedisError> {
        let client = node_client(&self.base, node)?;
        let (on_push, events, name) = (self.on_push.clone(), self.events.clone(), node.clone());
        let config = self.config.clone().set_push_sender(move |info: PushInfo| {
            match info.kind {
                PushKind::Disconnection => {
                    let node = name.clone();
                    let _ = events.send(Event::NodeLost { node, generation });
                }
                PushKind::SUnsubscribe => {
                    if let Some(Value::BulkString(channel)) = info.data.first() {
                        if let Ok(key) = std::str::from_utf8(channel) {
                            let _ = events.send(Event::Dropped {
                                node: name.clone(),
                                generation,
                                key: key.into(),
                            });
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
}

/// The resubscription task: runs while the subscriptions live.
async fn follow(mut queue: mpsc::UnboundedReceiver<Event>, this: Weak<ShardedSubscriptions>) {
    while let Some(event) = queue.recv().await {
        let Some(this) = this.upgrade() else { return };
        let moved: Vec<Box<str>> = {
            let mut state = this.state.lock().await;
            match event {
                // A connection the client closed had its channels moved then.
                Event::NodeLost { node, generation } if state.is_current(&node, generation) => {
                    // A failover, maybe: the next subscription reads the
                    // slot map again.
                    state.masters = None;
                    state.close(&node)
                }
                Event::Dropped {
                    node,
                    generation,
                    key,
                } if state.is_current(&node, generation) => {
                    if let Some(connection) = state.nodes.get_mut(&node) {
                        connection.lapsed.remove(&key);
                    }
                    // Only a channel still counted on that node: one moved
                    // to its master by `move_to_master` lapsed on the old
                    // node.
                    match state.channels.get_mut(&key) {
                        Some(on) if on.as_ref() == Some(&node) => {
                            *on = None;
                            state.masters = None;
                            vec![key]
                        }
                        _ => Vec::new(),
                    }
                }
                Event::NodeLost { .. } | Event::Dropped { .. } => Vec::new(),
                Event::Orphaned(keys) => keys,
            }
        };
        if !moved.is_empty() {
            // Each batch on its own task: a node that is slow to come back
            // does not hold up news of another.
            tokio::spawn(async move { this.resubscribe(moved).await });
        }
    }
}

/// Whether `error` says the node is unreachable or gone (rather than that
/// it refused the command).
fn is_lost(error: &RedisError) -> bool {
    error.is_io_error()
        || error.is_connection_refusal()
        || error.is_connection_dropped()
        || error.is_timeout()
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

/// Whether the server did not know the command (`SSUBSCRIBE` on Redis 6.2).
fn is_unknown_command(error: &RedisError) -> bool {
    error.code() == Some("ERR")
        && error
            .detail()
            .is_some_and(|detail| detail.starts_with("unknown command"))
}
