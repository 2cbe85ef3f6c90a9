//! Connecting a [`LockClientBuilder`]'s client: each deployment's
//! constructor, the connect itself, and the client's background work.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use super::LockClientBuilder;
use crate::announce;
use crate::backend::connect::{Connecting, Target};
use crate::backend::Backend;
use crate::client::{Inner, LockClient};
#[cfg(feature = "embedded")]
use crate::embedded::clock::Clock;
#[cfg(feature = "embedded")]
use crate::embedded::{EmbeddedBackend, EmbeddedKeyspace};
use crate::error::LockError;
use crate::io::Io;
use crate::kind_check::KindCheck;
use crate::node_name::node_name;
use crate::owner_id::ClientTag;
use crate::presence::ClientRecord;
use crate::route::node::RedisConfig;
use crate::route::BackendError;
use crate::subscriptions::{self, Subscriptions};
use crate::wakeup::Waiters;
use crate::watchdog::{self, Registry};

/// The deployments.
impl LockClientBuilder {
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
    pub async fn redlock<I>(self, urls: I) -> Result<LockClient, LockError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let urls = owned(urls);
        if urls.len() < 3 {
            return Err(LockError::Connect(redis::RedisError::from((
                redis::ErrorKind::Client,
                "Redlock needs at least 3 independent Redis nodes",
            ))));
        }
        let mut seen = Vec::with_capacity(urls.len());
        for url in &urls {
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
    pub async fn sentinel<I>(
        self,
        sentinel_urls: I,
        master_name: &str,
    ) -> Result<LockClient, LockError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let urls = owned(sentinel_urls);
        if urls.is_empty() {
            return Err(LockError::Connect(redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "Sentinel needs at least one sentinel URL",
            ))));
        }
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
    pub async fn cluster<I>(self, urls: I) -> Result<LockClient, LockError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let urls = owned(urls);
        if urls.is_empty() {
            return Err(LockError::Connect(redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "no Redis Cluster node given",
            ))));
        }
        self.connect_to(Target::Cluster(urls)).await
    }
}

/// Refuses a URL whose fragment is `#insecure`: redis-rs reads it as "do
/// not verify the server's certificate" (with `tls-native-tls`, or another
/// crate of the build enabling `redis/tls-rustls-insecure`), which a URL
/// from configuration must not turn on silently.
fn refuse_insecure(target: &Target) -> Result<(), LockError> {
    let urls = match target {
        Target::One(url) => std::slice::from_ref(url),
        Target::Quorum(urls) | Target::Cluster(urls) | Target::Sentinel(urls, _) => urls,
    };
    if urls.iter().any(|url| url.ends_with("#insecure")) {
        return Err(LockError::Connect(redis::RedisError::from((
            redis::ErrorKind::InvalidClientConfig,
            "a URL ends with #insecure, which turns off the check of the server's TLS \
             certificate: remove it, and trust the server's CA with \
             LockClientBuilder::tls_ca_file (or tls_ca_pem) instead",
        ))));
    }
    Ok(())
}

/// The URLs given (any iterator of strings: `&[&str]`, `&Vec<String>`, an
/// array), as the client keeps them.
fn owned<I>(urls: I) -> Vec<String>
where
    I: IntoIterator,
    I::Item: AsRef<str>,
{
    urls.into_iter().map(|u| u.as_ref().to_owned()).collect()
}

/// The embedded backend.
impl LockClientBuilder {
    /// The embedded backend: every lock kind inside this process, on a
    /// keyspace of its own, decided by the same Lua scripts the Redis
    /// deployments send (run in an embedded Lua 5.1; see the deployments
    /// guide). For tests and single-process programs; share a keyspace
    /// between clients with [`in_memory_shared`](Self::in_memory_shared).
    ///
    /// # Panics
    /// If the operating system refuses to start the client's background
    /// thread.
    #[cfg(feature = "embedded")]
    #[cfg_attr(docsrs, doc(cfg(feature = "embedded")))]
    pub fn in_memory(self) -> LockClient {
        let io = self
            .io()
            .expect("lock-runtime: cannot start the client's background thread");
        let keyspace = EmbeddedKeyspace::on_clock(Clock::of(io.handle().clone()));
        self.on_keyspace(keyspace, io)
    }

    /// The embedded backend on `keyspace`, which other clients may share:
    /// they contend for its locks as clients of one Redis do, and a release
    /// by one wakes the others' waiters. The keyspace's time is the clock
    /// of the runtime it was made on (see [`EmbeddedKeyspace::new`]).
    ///
    /// # Panics
    /// If the operating system refuses to start the client's background
    /// thread.
    #[cfg(feature = "embedded")]
    #[cfg_attr(docsrs, doc(cfg(feature = "embedded")))]
    pub fn in_memory_shared(self, keyspace: &EmbeddedKeyspace) -> LockClient {
        let io = self
            .io()
            .expect("lock-runtime: cannot start the client's background thread");
        self.on_keyspace(keyspace.clone(), io)
    }

    #[cfg(feature = "embedded")]
    fn on_keyspace(self, keyspace: EmbeddedKeyspace, io: Io) -> LockClient {
        let id = new_client_id();
        let waiters = Arc::new(Waiters::default());
        let record = Arc::new(ClientRecord::new(
            &self.locks.prefix,
            &id,
            self.runtime.client_name.as_deref(),
        ));
        let on_push = subscriptions::push_handler(waiters.clone(), id.clone(), record.clone());
        let backend = Backend::Embedded(EmbeddedBackend::new(keyspace, id.clone(), on_push));
        let ids = (id.clone(), id.as_ref().into());
        self.finish(ids, backend, waiters, io, record)
    }
}

/// Connecting, and the client's background work.
impl LockClientBuilder {
    fn io(&self) -> std::io::Result<Io> {
        match self
            .runtime
            .on_current_runtime
            .then(Io::current_runtime)
            .flatten()
        {
            Some(io) => Ok(io),
            None => Io::start_thread(),
        }
    }

    async fn connect_to(self, target: Target) -> Result<LockClient, LockError> {
        refuse_insecure(&target)?;
        let place = target.place();
        let io = self.io().map_err(|e| LockError::Connect(e.into()))?;
        let id = new_client_id();
        let record = Arc::new(ClientRecord::new(
            &self.locks.prefix,
            &id,
            self.runtime.client_name.as_deref(),
        ));
        let waiters = Arc::new(Waiters::default());
        let on_push = subscriptions::push_handler(waiters.clone(), id.clone(), record.clone());
        let connect_timeout = self.timeouts.connect;
        let tls = self.tls.load().map_err(LockError::Connect)?;
        let config = RedisConfig {
            connect_timeout,
            command_timeout: self.timeouts.command,
            retries: 2,
            client_name: Some(record.name.clone()),
            tls: tls.clone(),
            sync_replicas: self.replicas,
            coalesce: !self.runtime.calls_alone,
        };
        // A Redlock node that is down must cost at most its timeout, and
        // fail at once when it refuses connections.
        let node_config = RedisConfig {
            connect_timeout: self.redlock.node_timeout,
            command_timeout: self.redlock.node_timeout,
            retries: 0,
            client_name: Some(record.name.clone()),
            tls,
            sync_replicas: None,
            coalesce: !self.runtime.calls_alone,
        };
        let lazy = self.runtime.lazy_connect;
        let connecting = Connecting {
            target,
            config,
            node_config,
            client_id: id.clone(),
            on_push,
            lazy,
            // Connections of the callers' runtimes, unless the client
            // already runs on the caller's runtime.
            local: !self.runtime.on_current_runtime,
            node_timeout: self.redlock.node_timeout,
            drift_factor: self.locks.drift_factor,
            master_auth: self.sentinel.clone(),
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

    fn finish(
        self,
        (id, place): (Arc<str>, Box<str>),
        backend: Backend,
        waiters: Arc<Waiters>,
        io: Io,
        record: Arc<ClientRecord>,
    ) -> LockClient {
        let announced = !self.runtime.lazy_connect;
        let registry = Registry::new(waiters.clone());
        let watchdog = watchdog::run(registry.clone(), backend.clone(), self.locks.renewal_batch);
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
            prefix: self.locks.prefix.into(),
            lease: self.locks.lease,
            wait: self.locks.wait,
            drift_factor: self.locks.drift_factor,
            sync_replicas: self.replicas,
            kind_check: self.locks.kind_check.then(KindCheck::default),
            backend,
            waiters,
            registry,
            record,
            io,
        });
        LockClient { inner }
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
