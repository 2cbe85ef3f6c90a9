//! The client: one backend, its background thread, its watchdog and waiters.

use std::fmt::{self, Write as _};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::announce;
use crate::backend::memory::MemoryBackend;
use crate::backend::redis::RedisConfig;
use crate::backend::sentinel::MasterAuth;
use crate::backend::{Backend, BackendError};
use crate::clock::Clock;
use crate::connect::{self, Connecting, Target};
use crate::error::LockError;
use crate::io::Io;
use crate::node_name::node_name;
use crate::owner_id::ClientTag;
use crate::presence::ClientRecord;
use crate::replica_sync::ReplicaSync;
use crate::subscriptions::Subscriptions;
use crate::tls::TlsOptions;
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
///
/// # Lifecycle
/// A locked call borrows its client, and a release in the background keeps
/// a clone until it is done, so when the last handle is dropped no call of
/// this client holds a lock and no release is pending: the thread, the
/// watchdog and the connections simply stop. The global client
/// ([`crate::init`]) is never dropped, and a process that exits (or is
/// killed) with bodies still running does not release their locks: they stay
/// held in Redis until their leases end, and waiters elsewhere wait that
/// long. Call [`shutdown`](LockClient::shutdown) before the process exits to
/// let running bodies finish, release every lock at once and stop taking new
/// ones. [`LockClientBuilder::lazy_connect`] lets a service start before
/// Redis.
///
/// # Operating
/// [`inspect`](LockClient::inspect) tells whether a lock is held, by which
/// client (name, host, pid), for how long, and its fencing token;
/// [`held`](LockClient::held) lists this client's locks;
/// [`force_unlock`](LockClient::force_unlock) frees a stuck lock and wakes
/// its waiters. Every connection is named
/// ([`LockClientBuilder::client_name`]) for `CLIENT LIST`.
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
    /// The client's name, host and pid, as its registry entry has them.
    pub record: Arc<ClientRecord>,
    pub io: Io,
}

impl fmt::Debug for LockClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let backend = match self.inner.backend {
            Backend::Redis(_) => "redis",
            Backend::Redlock(_) => "redlock",
            Backend::Cluster(_) => "cluster",
            Backend::Memory(_) => "memory",
            Backend::Sentinel(_) => "sentinel",
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
    client_name: Option<String>,
    lazy_connect: bool,
    /// See the TLS options in `tls.rs`.
    pub(crate) tls: TlsOptions,
    master_auth: MasterAuth,
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
            client_name: None,
            lazy_connect: false,
            tls: TlsOptions::default(),
            master_auth: MasterAuth::default(),
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
    /// [`LockError::NotReplicated`].
    ///
    /// Off by default (0 replicas), and off costs nothing: no extra command,
    /// connection or allocation on any call. It is off because it only
    /// helps a master with replicas that can fail over (Sentinel, or a
    /// replica promoted by hand), and there it costs every acquire the
    /// replicas' acknowledgement (a replica round trip, about 0.1 ms on one
    /// machine, more across machines; `timeout` when a replica is down) and
    /// a connection per acquire in flight. Without it, a lock whose write
    /// had not reached a replica when the master failed is gone on the
    /// promoted replica, and a second owner can take it while the first
    /// still runs (until the first one's next renewal reports it `Lost`).
    ///
    /// With it, an acquire and its `WAIT` go in one pipeline on a connection
    /// no other call uses at that moment (`WAIT` counts its own connection's
    /// writes, and blocks it). Renewals wait for the replicas too: a renewal
    /// they did not acknowledge does not extend the lock's validity (it is
    /// retried, and the lock is reported lost when its validity runs out),
    /// so the body never runs on an expiry that a promoted replica would not
    /// know. Keep `timeout` well below a third of the shortest lease: with
    /// a replica down, every renewal batch takes `timeout`. `replicas = 0`
    /// turns it off. Redlock ignores it: its nodes are independent masters.
    pub fn sync_replicas(mut self, replicas: usize, timeout: Duration) -> Self {
        self.sync_replicas = (replicas > 0).then_some(ReplicaSync { replicas, timeout });
        self
    }

    /// The name of every connection the client makes (`CLIENT SETNAME`, so
    /// `CLIENT LIST` tells who is who), also kept in the client's registry
    /// entry that [`LockClient::inspect`] shows for a holder. Default
    /// `lock-runtime:<program>@<host>:<pid>`. Redis takes printable ASCII
    /// without spaces: other characters become `_`. A server that refuses
    /// `CLIENT SETNAME` (ACL without `client|setname`) leaves the
    /// connections unnamed and fails nothing.
    pub fn client_name(mut self, name: impl Into<String>) -> Self {
        self.client_name = Some(name.into());
        self
    }

    /// Connects on first use instead of at [`connect`](Self::connect) /
    /// [`redlock`](Self::redlock), for services that may start before
    /// Redis (default `false`).
    ///
    /// `connect` then returns at once (only a malformed URL fails it).
    /// Every call connects if needed; until Redis answers, a call fails at
    /// once with a [`LockError::Backend`] (Redlock: [`LockError::NoQuorum`])
    /// whose [`is_retryable`](LockError::is_retryable) is true: it does not
    /// wait for Redis within its `wait`, which is for a lock held by
    /// somebody else. Once Redis is up, calls work with no other step.
    /// [`sentinel`](Self::sentinel) and [`cluster`](Self::cluster) always
    /// connect at once: they must learn where the masters are.
    pub fn lazy_connect(mut self, lazy: bool) -> Self {
        self.lazy_connect = lazy;
        self
    }

    /// The credentials of the master that [`sentinel`](Self::sentinel)
    /// finds (the sentinels give its address only): an ACL user, or `None`
    /// for `requirepass`, and its password. Each sentinel's own credentials
    /// go in its URL. Not set by default: the master needs none.
    pub fn sentinel_master_auth(mut self, username: Option<&str>, password: &str) -> Self {
        self.master_auth = MasterAuth {
            username: username.map(str::to_owned),
            password: Some(password.to_owned()),
        };
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
    /// the release notifications). With `tls-rustls`, the first `rediss://`
    /// connect installs rustls's `ring` crypto provider as the process
    /// default if none is installed: an application with its own provider
    /// installs it before connecting. The node must be a master outside a
    /// cluster.
    ///
    /// # Errors
    /// [`LockError::Connect`] when the URL is invalid, Redis cannot be
    /// reached within the connect timeout, refuses the client (a wrong
    /// password, TLS) or is a replica, a sentinel or a Cluster node; its
    /// message names the node (without credentials) and the cause.
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

    /// Connects to the master named `master_name` that the sentinels at
    /// `sentinel_urls` (`redis://[user:password@]host:port`, each asked in
    /// turn until one answers) watch, and follows it across failovers.
    ///
    /// A request that fails with a connection error, a timeout or
    /// `READONLY` (a demoted master) makes the client ask the sentinels
    /// again, every 200 ms, until they name a new master; the client then
    /// moves its connections and subscriptions there and wakes its waiters.
    /// The failed request is not retried; requests made during the switch
    /// fail with [`LockError::Backend`]. Set the master's credentials with
    /// [`sentinel_master_auth`](Self::sentinel_master_auth). With
    /// [`sync_replicas`](Self::sync_replicas), a lock the failover would
    /// lose is reported lost, never held by two owners; without it, see
    /// [what a failover does to a held lock](crate::guide::deployments#what-a-failover-does-to-a-held-lock).
    ///
    /// # Errors
    /// [`LockError::Connect`] with no sentinel URL, an invalid URL, when no
    /// sentinel names a master `master_name` (the message names it and each
    /// sentinel's answer), or when the master cannot be reached within the
    /// connect timeout.
    pub async fn sentinel(
        self,
        sentinel_urls: &[&str],
        master_name: &str,
    ) -> Result<LockClient, LockError> {
        if sentinel_urls.is_empty() {
            return Err(LockError::Connect(redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "Sentinel needs at least one sentinel URL",
            ))));
        }
        let urls = sentinel_urls.iter().map(|u| (*u).to_owned()).collect();
        let master = master_name.to_owned();
        self.connect_to(Target::Sentinel(urls, master)).await
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
        let record = Arc::new(ClientRecord::new(
            &self.prefix,
            &id,
            self.client_name.as_deref(),
        ));
        let waiters = Arc::new(Waiters::default());
        let on_push = connect::push_handler(waiters.clone(), id.clone(), record.clone());
        let connect_timeout = self.connect_timeout;
        let tls = self.tls.load().map_err(LockError::Connect)?;
        let config = RedisConfig {
            connect_timeout,
            command_timeout: self.command_timeout,
            retries: 2,
            client_name: Some(record.name.clone()),
            tls: tls.clone(),
            sync_replicas: self.sync_replicas,
        };
        // A Redlock node that is down must cost at most its timeout, and
        // fail at once when it refuses connections.
        let node_config = RedisConfig {
            connect_timeout: self.node_timeout,
            command_timeout: self.node_timeout,
            retries: 0,
            client_name: Some(record.name.clone()),
            tls,
            sync_replicas: None,
        };
        let lazy = self.lazy_connect;
        let connecting = Connecting {
            target,
            config,
            node_config,
            client_id: id.clone(),
            on_push,
            lazy,
            // Connections of the callers' runtimes, unless the client
            // already runs on the caller's runtime.
            local: !self.on_current_runtime,
            node_timeout: self.node_timeout,
            drift_factor: self.drift_factor,
            master_auth: self.master_auth.clone(),
        };
        let waited_on = place.clone();
        let connecting = io.spawn(async move {
            match tokio::time::timeout(connect_timeout, connecting.backend()).await {
                Ok(result) => result,
                Err(_) => Err(BackendError::Redis(redis::RedisError::from((
                    redis::ErrorKind::Io,
                    "connect timed out",
                    format!("{waited_on}, after {connect_timeout:?}"),
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
        if !lazy {
            // Named and registered before the client is handed out, so that
            // an operator sees it at once; a failure here fails nothing.
            let (to, of) = (backend.clone(), record.clone());
            let announce =
                io.spawn(
                    async move { tokio::time::timeout(connect_timeout, to.announce(&of)).await },
                );
            if !matches!(announce.await, Ok(Ok(Ok(())))) {
                tracing::debug!("could not name the connections or write the registry entry");
                // The client's presence task tries again at once.
                record.again.notify_one();
            }
        }
        Ok(self.finish((id, place), backend, waiters, io, record))
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
        let backend = Backend::Memory(MemoryBackend::new(Clock::of(io.handle().clone())));
        let id = new_client_id();
        let ids = (id.clone(), id.as_ref().into());
        let record = Arc::new(ClientRecord::new(
            &self.prefix,
            &id,
            self.client_name.as_deref(),
        ));
        self.finish(ids, backend, Arc::new(Waiters::default()), io, record)
    }

    fn finish(
        self,
        (id, place): (Arc<str>, Box<str>),
        backend: Backend,
        waiters: Arc<Waiters>,
        io: Io,
        record: Arc<ClientRecord>,
    ) -> LockClient {
        let announced = !self.lazy_connect;
        let registry = Registry::new(waiters.clone());
        let watchdog = watchdog::run(registry.clone(), backend.clone(), self.renewal_batch);
        io.spawn_until_closed(watchdog);
        if backend.subscribes() {
            let subscriptions = Subscriptions::start(&io, backend.clone(), &waiters);
            waiters.on_change(move |key| subscriptions.changed(key));
            announce::start(&io, backend.clone(), record.clone(), announced);
        }
        let inner = Arc::new(Inner {
            tag: Arc::new(ClientTag {
                id,
                place,
                life: Default::default(),
            }),
            lock_ids: AtomicU64::new(0),
            prefix: self.prefix.into(),
            lease: self.lease,
            wait: self.wait,
            drift_factor: self.drift_factor,
            sync_replicas: self.sync_replicas,
            backend,
            waiters,
            registry,
            record,
            io,
        });
        LockClient { inner }
    }
}

/// TLS options; they apply to every connection the client makes (the node,
/// each Redlock node). They need `rediss://` URLs and the feature
/// `tls-rustls` (or `tls-native-tls`).
impl LockClientBuilder {
    /// Trusts the CA certificates in `pem` (one or more PEM certificates)
    /// for the servers' certificates, instead of the platform's roots.
    pub fn tls_ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls.set_ca_pem(pem.into());
        self
    }

    /// As [`tls_ca_pem`](Self::tls_ca_pem), read from the file at `path`
    /// when the client connects; a file that cannot be read fails the
    /// connect with [`LockError::Connect`](crate::LockError::Connect)
    /// naming it.
    pub fn tls_ca_file(mut self, path: impl AsRef<Path>) -> Self {
        self.tls.set_ca_file(path.as_ref().to_owned());
        self
    }

    /// Presents the client certificate `cert` (PEM, the certificate then
    /// any intermediates) with its private key `key` (PEM) to servers that
    /// ask for one (mutual TLS, `tls-auth-clients yes`).
    pub fn tls_client_cert_pem(
        mut self,
        cert: impl Into<Vec<u8>>,
        key: impl Into<Vec<u8>>,
    ) -> Self {
        self.tls.set_client_cert_pem(cert.into(), key.into());
        self
    }

    /// As [`tls_client_cert_pem`](Self::tls_client_cert_pem), read from the
    /// files at `cert` and `key` when the client connects; a file that
    /// cannot be read fails the connect with
    /// [`LockError::Connect`](crate::LockError::Connect) naming it.
    pub fn tls_client_cert_files(mut self, cert: impl AsRef<Path>, key: impl AsRef<Path>) -> Self {
        self.tls
            .set_client_cert_files(cert.as_ref().to_owned(), key.as_ref().to_owned());
        self
    }
}

/// The client a locked call runs on: borrowed (the caller's, or the global
/// one), or owned (a scoped one, see [`crate::with_client`]).
pub(crate) enum ClientRef<'a> {
    Borrowed(&'a LockClient),
    Owned(LockClient),
}

impl<'a> ClientRef<'a> {
    /// The same client for a step of the call that is boxed apart from it:
    /// the same borrow, or a clone of the owned client (one reference
    /// count).
    pub(crate) fn lend(&self) -> ClientRef<'a> {
        match self {
            ClientRef::Borrowed(client) => ClientRef::Borrowed(client),
            ClientRef::Owned(client) => ClientRef::Owned(client.clone()),
        }
    }
}

impl std::ops::Deref for ClientRef<'_> {
    type Target = LockClient;

    fn deref(&self) -> &LockClient {
        match self {
            ClientRef::Borrowed(client) => client,
            ClientRef::Owned(client) => client,
        }
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

    /// Connects to the master `master_name` through the sentinels at
    /// `sentinel_urls` with the default options; see
    /// [`LockClientBuilder::sentinel`].
    ///
    /// # Errors
    /// As [`LockClientBuilder::sentinel`].
    pub async fn sentinel(
        sentinel_urls: &[&str],
        master_name: &str,
    ) -> Result<LockClient, LockError> {
        Self::builder().sentinel(sentinel_urls, master_name).await
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
