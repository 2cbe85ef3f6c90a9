//! The client: one backend, its background thread, its watchdog and waiters.

use std::fmt::{self, Write as _};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::backend::cluster::ClusterBackend;
use crate::backend::memory::MemoryBackend;
use crate::backend::redis::{self as redis_backend, RedisBackend, RedisConfig};
use crate::backend::redlock::{Node, RedlockBackend};
use crate::backend::{Backend, BackendError};
use crate::error::LockError;
use crate::io::Io;
use crate::options::LockOptions;
use crate::owner_id::ClientTag;
use crate::replica_sync::ReplicaSync;
use crate::subscriptions::Subscriptions;
use crate::wakeup::Waiters;
use crate::watchdog::{self, Registry};

/// A handle to one lock backend: cheap to clone, shared by all its clones.
///
/// Create one at start-up with [`LockClient::connect`] (Redis) or
/// [`LockClient::in_memory`] (this process only), or with
/// [`LockClient::builder`] to change the defaults, and install it with
/// [`crate::init`] for the attribute to use.
///
/// Each client owns a small background thread that runs its watchdog, the
/// drivers of its two Redis connections and the releases of locks whose
/// futures were dropped. It stops when the last clone is dropped.
#[derive(Clone)]
pub struct LockClient {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    /// Who the client is: its random id, the prefix of every owner id of
    /// this client, and where it keeps its locks.
    pub tag: Arc<ClientTag>,
    /// Numbers the client's acquisitions (and their owner ids).
    lock_ids: AtomicU64,
    pub prefix: Box<str>,
    pub lease: Duration,
    pub wait: Duration,
    /// See [`LockClientBuilder::clock_drift_factor`].
    pub drift_factor: f64,
    /// See [`LockClientBuilder::sync_replicas`].
    pub sync_replicas: Option<ReplicaSync>,
    pub backend: Backend,
    pub waiters: Arc<Waiters>,
    pub registry: Arc<Registry>,
    pub io: Io,
}

impl fmt::Debug for LockClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let backend = match self.inner.backend {
            Backend::Redis(_) => "redis",
            Backend::Redlock(_) => "redlock",
            Backend::Cluster(_) => "cluster",
            Backend::Memory(_) => "memory",
        };
        f.debug_struct("LockClient")
            .field("id", &self.inner.tag.id)
            .field("backend", &backend)
            .field("prefix", &self.inner.prefix)
            .finish_non_exhaustive()
    }
}

/// Options of a [`LockClient`], with their defaults.
#[derive(Debug, Clone)]
pub struct LockClientBuilder {
    prefix: String,
    lease: Duration,
    wait: Duration,
    connect_timeout: Duration,
    command_timeout: Duration,
    node_timeout: Duration,
    drift_factor: f64,
    renewal_batch: usize,
    on_current_runtime: bool,
    sync_replicas: Option<ReplicaSync>,
}

impl Default for LockClientBuilder {
    fn default() -> Self {
        LockClientBuilder {
            prefix: "lock:".into(),
            lease: Duration::from_secs(30),
            wait: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(5),
            command_timeout: Duration::from_secs(2),
            node_timeout: Duration::from_millis(100),
            drift_factor: 0.01,
            renewal_batch: 512,
            on_current_runtime: false,
            sync_replicas: None,
        }
    }
}

impl LockClientBuilder {
    /// The text put before every rendered key to form the Redis key
    /// (default `"lock:"`).
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The lease of locks that do not set one (default 30 s).
    pub fn default_lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How long locks that do not set `wait` wait for a held lock
    /// (default 10 s).
    pub fn default_wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// How long connecting (and reconnecting) to Redis may take (default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long one Redis command may take before it fails (default 2 s).
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout;
        self
    }

    /// How long each Redlock node may take to answer one operation
    /// (default 100 ms); keep it far below the lease.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// The share of a lease kept off the lock's validity for clock drift
    /// between this process and the servers (default 0.01): a lock taken at
    /// `t` is trusted until `t + lease - (lease x factor + 2 ms)`. Taken
    /// between 0 and 0.5 (above that, most of every lease would be margin);
    /// a factor that is not a number keeps the default.
    pub fn clock_drift_factor(mut self, factor: f64) -> Self {
        if !factor.is_nan() {
            self.drift_factor = factor.clamp(0.0, 0.5);
        }
        self
    }

    /// The most locks that the watchdog renews with one script call
    /// (default 512; at least 1).
    ///
    /// The watchdog renews the locks that fall due together in one call,
    /// which blocks Redis for every other client while it runs: about 1 ms
    /// per 512 locks (some 1.7 µs per lock on redis-server 7.0). A client
    /// holding more locks than this at once sends one more call per period
    /// for each further batch. Raise it to send one call per period however
    /// many locks are held, if Redis can afford the longer pause.
    pub fn renewal_batch_size(mut self, locks: usize) -> Self {
        self.renewal_batch = locks.max(1);
        self
    }

    /// Runs the client's connections, watchdog and background releases on
    /// the tokio runtime that builds the client, instead of on a thread of
    /// the client's own.
    ///
    /// The client then needs no thread of its own, and no extra connection
    /// per runtime: a default client gives each current-thread runtime that
    /// keeps calling it a connection driven by that runtime, so that its
    /// round trips skip the hop to the client's thread (about 40 µs per
    /// call), while its watchdog stays on its own thread. But this client
    /// stops working when its runtime shuts down, so use it only for a
    /// client that lives no longer than its runtime (not for a global client
    /// shared by many `#[tokio::test]` runtimes). Without a current runtime (for example
    /// [`in_memory`](Self::in_memory) called outside one) the client uses
    /// its own thread. The runtime needs its timer (`enable_time`, which
    /// `#[tokio::main]` turns on): the watchdog runs on it. A default client
    /// needs nothing of the caller's runtime: a call that waits uses the
    /// client's own timer.
    pub fn on_current_runtime(mut self) -> Self {
        self.on_current_runtime = true;
        self
    }

    /// After each acquire, waits until `replicas` replicas of the lock's
    /// master have its write (`WAIT`), for at most `timeout`; if fewer do,
    /// the lock is released and the call fails with
    /// [`LockError::NotReplicated`]. Off by default (0 replicas).
    pub fn sync_replicas(mut self, replicas: usize, timeout: Duration) -> Self {
        self.sync_replicas = (replicas > 0).then_some(ReplicaSync { replicas, timeout });
        self
    }

    fn io(&self) -> std::io::Result<Io> {
        match self.on_current_runtime.then(Io::current_runtime).flatten() {
            Some(io) => Ok(io),
            None => Io::start_thread(),
        }
    }

    /// Connects to one Redis node: `redis://host:port/db`, `rediss://...`
    /// (TLS, with the feature `tls-rustls` or `tls-native-tls`) or
    /// `unix:///path/to/redis.sock`. Needs Redis 6 or later (RESP3 carries
    /// the release notifications).
    ///
    /// # Errors
    /// [`LockError::Connect`] when the URL is invalid or Redis cannot be
    /// reached within the connect timeout.
    pub async fn connect(self, url: &str) -> Result<LockClient, LockError> {
        self.connect_to(Target::One(url.to_owned())).await
    }

    /// Connects to N independent Redis masters (N >= 3, typically 3, 5 or
    /// 7) and locks by quorum (Redlock): a lock is held when N/2 + 1 nodes
    /// granted it within its lease. Everything else (the attribute, re-entry,
    /// renewal, `wait`, loss, cancellation, fencing tokens) works as with one
    /// node.
    ///
    /// Nodes that are down now are connected to later, by themselves; a
    /// quorum must answer now.
    ///
    /// # Errors
    /// [`LockError::Connect`] with fewer than 3 URLs, an invalid URL, or
    /// when fewer than a quorum of nodes answer within the connect timeout;
    /// its message names each failed node.
    pub async fn redlock(self, urls: &[&str]) -> Result<LockClient, LockError> {
        if urls.len() < 3 {
            return Err(LockError::Connect(redis::RedisError::from((
                redis::ErrorKind::Client,
                "Redlock needs at least 3 independent Redis nodes",
            ))));
        }
        let mut seen = Vec::with_capacity(urls.len());
        for url in urls {
            let node = node_name(url);
            if seen.contains(&node) {
                return Err(LockError::Connect(redis::RedisError::from((
                    redis::ErrorKind::InvalidClientConfig,
                    "a Redlock node is given twice: every node must be a different Redis, \
                     or one node could make a quorum alone",
                    node.to_string(),
                ))));
            }
            seen.push(node);
        }
        let urls = urls.iter().map(|u| (*u).to_owned()).collect();
        self.connect_to(Target::Quorum(urls)).await
    }

    /// Connects to a Redis Cluster (Redis 7 or later) through any of its
    /// nodes (`redis://host:port`; give several, in case one is down). Each
    /// lock lives in its key's hash slot and is decided by that slot's
    /// master; releases wake waiters by sharded pub/sub. A `{...}` in a key
    /// makes only its content count for the slot, as everywhere in Redis
    /// Cluster.
    ///
    /// # Errors
    /// [`LockError::Connect`] when no URL is given, a URL is invalid, no
    /// node answers within the connect timeout, or the nodes are not a
    /// cluster (the message then says so, and which constructor to use).
    pub async fn cluster(self, urls: &[&str]) -> Result<LockClient, LockError> {
        if urls.is_empty() {
            return Err(LockError::Connect(redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "no Redis Cluster node given",
            ))));
        }
        let urls = urls.iter().map(|u| (*u).to_owned()).collect();
        self.connect_to(Target::Cluster(urls)).await
    }

    async fn connect_to(self, target: Target) -> Result<LockClient, LockError> {
        let place = target.place();
        let io = self.io().map_err(|e| LockError::Connect(e.into()))?;
        let id = new_client_id();
        let waiters = Arc::new(Waiters::default());
        let on_push = {
            let waiters = waiters.clone();
            let id = id.clone();
            move |info: redis::PushInfo| {
                if info.kind == redis::PushKind::Disconnection {
                    // Releases published while disconnected are lost: let
                    // every waiter try again.
                    waiters.wake_all();
                } else if let Some(channel) = redis_backend::subscribed(&info) {
                    // Subscribed (again, after a reconnect): a release before
                    // now was not heard, so the head should try.
                    waiters.wake_release(channel, 0);
                } else if let Some(released) = redis_backend::released(&info) {
                    // This client's own releases woke its waiters already.
                    if released.client != id.as_bytes() {
                        waiters.wake_release(released.key, released.token);
                    }
                }
            }
        };
        let connect_timeout = self.connect_timeout;
        let config = RedisConfig {
            connect_timeout,
            command_timeout: self.command_timeout,
            retries: 2,
        };
        // A Redlock node that is down must cost at most its timeout, and
        // fail at once when it refuses connections.
        let node_config = RedisConfig {
            connect_timeout: self.node_timeout,
            command_timeout: self.node_timeout,
            retries: 0,
        };
        let (node_timeout, drift_factor) = (self.node_timeout, self.drift_factor);
        let sync_replicas = self.sync_replicas;
        // Eager connections; connections of the callers' runtimes unless the
        // client already runs on the caller's runtime.
        let modes = (false, !self.on_current_runtime);
        let client_id = id.clone();
        let connecting = io.spawn(async move {
            let connecting = async {
                match target {
                    Target::One(url) => {
                        let backend =
                            RedisBackend::connect(&url, &config, client_id, on_push, modes).await?;
                        Ok(Backend::Redis(backend))
                    }
                    Target::Quorum(urls) => {
                        let mut nodes = Vec::with_capacity(urls.len());
                        for url in urls {
                            let id = client_id.clone();
                            let on_push = on_push.clone();
                            let backend = RedisBackend::connect(
                                &url,
                                &node_config,
                                id,
                                on_push,
                                (true, false),
                            )
                            .await?;
                            let name = node_name(&url);
                            nodes.push(Node { name, backend });
                        }
                        let redlock = RedlockBackend::new(nodes, node_timeout, drift_factor);
                        redlock.check().await?;
                        Ok(Backend::Redlock(redlock))
                    }
                    Target::Cluster(urls) => {
                        let backend = ClusterBackend::connect(
                            &urls,
                            &config,
                            client_id,
                            on_push,
                            sync_replicas,
                        )
                        .await?;
                        Ok(Backend::Cluster(backend))
                    }
                }
            };
            match tokio::time::timeout(connect_timeout, connecting).await {
                Ok(result) => result,
                Err(_) => Err(BackendError::Redis(redis::RedisError::from((
                    redis::ErrorKind::Io,
                    "connect timed out",
                )))),
            }
        });
        let backend = match connecting.await {
            Ok(result) => result.map_err(connect_error)?,
            Err(join) => {
                let message = if join.is_panic() {
                    "connect panicked"
                } else {
                    "connect cancelled"
                };
                return Err(LockError::Connect(redis::RedisError::from((
                    redis::ErrorKind::Client,
                    message,
                ))));
            }
        };
        Ok(self.finish((id, place), backend, waiters, io))
    }

    /// The embedded backend: the same semantics inside this process.
    ///
    /// # Panics
    /// If the operating system refuses to start the client's background
    /// thread.
    pub fn in_memory(self) -> LockClient {
        let io = self
            .io()
            .expect("lock-runtime: cannot start the client's background thread");
        let backend = Backend::Memory(MemoryBackend::default());
        let id = new_client_id();
        let ids = (id.clone(), id.as_ref().into());
        self.finish(ids, backend, Arc::new(Waiters::default()), io)
    }

    fn finish(
        self,
        (id, place): (Arc<str>, Box<str>),
        backend: Backend,
        waiters: Arc<Waiters>,
        io: Io,
    ) -> LockClient {
        let registry = Registry::new(waiters.clone());
        let watchdog = watchdog::run(registry.clone(), backend.clone(), self.renewal_batch);
        io.spawn_until_closed(watchdog);
        if backend.subscribes() {
            let subscriptions = Subscriptions::start(&io, backend.clone(), &waiters);
            waiters.on_change(move |key| subscriptions.changed(key));
        }
        let inner = Arc::new(Inner {
            tag: Arc::new(ClientTag { id, place }),
            lock_ids: AtomicU64::new(0),
            prefix: self.prefix.into(),
            lease: self.lease,
            wait: self.wait,
            drift_factor: self.drift_factor,
            sync_replicas: self.sync_replicas,
            backend,
            waiters,
            registry,
            io,
        });
        LockClient { inner }
    }
}

/// What a client connects to.
enum Target {
    One(String),
    Quorum(Vec<String>),
    Cluster(Vec<String>),
}

impl Target {
    /// Where the locks live: the node, or the Redlock nodes in order.
    fn place(&self) -> Box<str> {
        match self {
            Target::One(url) => node_name(url).as_ref().into(),
            Target::Quorum(urls) | Target::Cluster(urls) => {
                let mut nodes: Vec<Arc<str>> = urls.iter().map(|u| node_name(u)).collect();
                nodes.sort();
                nodes.join(",").into()
            }
        }
    }
}

/// A node's address and database without credentials, for error messages
/// (and to tell nodes apart).
fn node_name(url: &str) -> Arc<str> {
    match redis::Client::open(url) {
        Ok(client) => {
            let info = client.get_connection_info();
            match info.redis_settings().db() {
                0 => info.addr().to_string().into(),
                db => format!("{}/{db}", info.addr()).into(),
            }
        }
        Err(_) => url.split('@').next_back().unwrap_or_default().into(),
    }
}

/// The error of a failed connect.
fn connect_error(error: BackendError) -> LockError {
    match error {
        BackendError::Redis(error) => LockError::Connect(error),
        quorum @ BackendError::NoQuorum { .. } => LockError::Connect(redis::RedisError::from((
            redis::ErrorKind::Io,
            "too few Redlock nodes answered",
            quorum.to_string(),
        ))),
    }
}

fn new_client_id() -> Arc<str> {
    uuid::Uuid::new_v4().simple().to_string().into()
}

impl LockClient {
    /// A builder to change the key prefix, default lease and wait, and the
    /// timeouts.
    pub fn builder() -> LockClientBuilder {
        LockClientBuilder::default()
    }

    /// Connects to N independent Redis masters with the default options;
    /// see [`LockClientBuilder::redlock`].
    ///
    /// # Errors
    /// As [`LockClientBuilder::redlock`].
    pub async fn redlock(urls: &[&str]) -> Result<LockClient, LockError> {
        Self::builder().redlock(urls).await
    }

    /// Connects to a Redis Cluster with the default options; see
    /// [`LockClientBuilder::cluster`].
    ///
    /// # Errors
    /// As [`LockClientBuilder::cluster`].
    pub async fn cluster(urls: &[&str]) -> Result<LockClient, LockError> {
        Self::builder().cluster(urls).await
    }

    /// Connects to one Redis node with the default options; see
    /// [`LockClientBuilder::connect`].
    ///
    /// # Errors
    /// [`LockError::Connect`] when the URL is invalid or Redis cannot be
    /// reached within the connect timeout.
    pub async fn connect(url: &str) -> Result<LockClient, LockError> {
        Self::builder().connect(url).await
    }

    /// The embedded backend with the default options; see
    /// [`LockClientBuilder::in_memory`].
    pub fn in_memory() -> LockClient {
        Self::builder().in_memory()
    }

    /// Runs `body` while holding the lock `key` (the prefix is added), with
    /// the same ownership, renewal and loss rules as the attribute.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_runtime::LockError> {
    /// use lock_runtime::{LockClient, LockError, LockOptions};
    ///
    /// let client = LockClient::in_memory();
    /// let user = 42;
    /// let n = client
    ///     .run_locked(&format!("user:{user}"), LockOptions::new(), async {
    ///         Ok::<_, LockError>(1)
    ///     })
    ///     .await?;
    /// assert_eq!(n, 1);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// `Err(E::from(e))` for every [`LockError`] `e`: the lock was not taken
    /// within `wait` ([`LockError::Timeout`]), the backend failed, or the lock
    /// was lost while `body` ran ([`LockError::Lost`]; `body` was dropped
    /// there). Otherwise what `body` returned.
    pub fn run_locked<'a, T, E, F>(
        &'a self,
        key: &str,
        options: LockOptions,
        body: F,
    ) -> impl std::future::Future<Output = Result<T, E>> + 'a
    where
        F: std::future::Future<Output = Result<T, E>> + 'a,
        E: From<LockError> + 'a,
        T: 'a,
    {
        // Not an `async fn`: the key is rendered now, and the body's future
        // is not held a second time by an extra layer.
        let key = self.full_key(format_args!("{key}"));
        crate::locking::run(self, key, options, body)
    }

    /// How many locks this client's watchdog is renewing now.
    pub fn renewing(&self) -> usize {
        self.inner.registry.renewing()
    }

    /// The backend key for a rendered key: the prefix, then the key.
    pub(crate) fn full_key(&self, key: fmt::Arguments<'_>) -> String {
        let prefix = &*self.inner.prefix;
        let mut full = String::with_capacity(prefix.len() + 32);
        full.push_str(prefix);
        // Writing to a String cannot fail.
        let _ = full.write_fmt(key);
        full
    }

    /// A number for a new acquisition, unique within the client: its owner
    /// id is `OwnerId::new(&inner.tag.id, n)`.
    pub(crate) fn new_lock_id(&self) -> u64 {
        self.inner.lock_ids.fetch_add(1, Ordering::Relaxed)
    }
}
