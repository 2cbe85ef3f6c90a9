//! Building a [`LockClient`]: the options, grouped in small structs that
//! the builder holds, and their setters. Connecting with them is in
//! `build.rs`.

mod build;

use std::path::Path;
use std::time::Duration;

use crate::client::LockClient;
use crate::error::LockError;
use crate::replica_sync::ReplicaSync;
use crate::route::sentinel::MasterAuth;
use crate::tls::TlsOptions;

/// Options of a [`LockClient`], with their defaults.
#[derive(Debug, Clone, Default)]
pub struct LockClientBuilder {
    locks: LockDefaults,
    timeouts: Timeouts,
    redlock: RedlockOptions,
    runtime: RuntimeOptions,
    /// See [`sync_replicas`](LockClientBuilder::sync_replicas).
    replicas: Option<ReplicaSync>,
    /// See [`sentinel_master_auth`](LockClientBuilder::sentinel_master_auth).
    sentinel: MasterAuth,
    /// See the TLS options in `tls.rs`.
    tls: TlsOptions,
}

/// What every lock of the client gets unless a call says otherwise.
#[derive(Debug, Clone)]
struct LockDefaults {
    prefix: String,
    lease: Duration,
    wait: Duration,
    drift_factor: f64,
    renewal_batch: usize,
    kind_check: bool,
}

impl Default for LockDefaults {
    fn default() -> Self {
        LockDefaults {
            prefix: "lock:".into(),
            lease: Duration::from_secs(30),
            wait: Duration::from_secs(10),
            drift_factor: 0.01,
            renewal_batch: 256,
            kind_check: cfg!(debug_assertions),
        }
    }
}

/// How long connecting and each command may take.
#[derive(Debug, Clone)]
struct Timeouts {
    connect: Duration,
    command: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(5),
            command: Duration::from_secs(2),
        }
    }
}

/// Redlock's own options.
#[derive(Debug, Clone)]
struct RedlockOptions {
    node_timeout: Duration,
}

impl Default for RedlockOptions {
    fn default() -> Self {
        RedlockOptions {
            node_timeout: Duration::from_millis(100),
        }
    }
}

/// Where the client's background work runs, when it connects, and how its
/// connections are named.
#[derive(Debug, Clone, Default)]
struct RuntimeOptions {
    on_current_runtime: bool,
    lazy_connect: bool,
    client_name: Option<String>,
    /// See [`coalesce`](LockClientBuilder::coalesce) (stored negated, so
    /// that the default is on).
    calls_alone: bool,
}

/// The locks: key prefix, default lease and wait, drift margin, renewal
/// batches.
impl LockClientBuilder {
    /// The text put before every rendered key to form the Redis key
    /// (default `"lock:"`).
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.locks.prefix = prefix.into();
        self
    }

    /// The lease of locks that do not set one (default 30 s).
    pub fn default_lease(mut self, lease: Duration) -> Self {
        self.locks.lease = lease;
        self
    }

    /// How long locks that do not set `wait` wait for a held lock
    /// (default 10 s).
    pub fn default_wait(mut self, wait: Duration) -> Self {
        self.locks.wait = wait;
        self
    }

    /// The share of a lease kept off the lock's validity for clock drift
    /// between this process and the servers (default 0.01): a lock taken at
    /// `t` is trusted until `t + lease - (lease x factor + 2 ms)`. Taken
    /// between 0 and 0.5 (above that, most of every lease would be margin);
    /// a factor that is not a number keeps the default.
    pub fn clock_drift_factor(mut self, factor: f64) -> Self {
        if !factor.is_nan() {
            self.locks.drift_factor = factor.clamp(0.0, 0.5);
        }
        self
    }

    /// The most locks that the watchdog renews with one script call
    /// (default 256; at least 1).
    ///
    /// The watchdog renews the locks that fall due together in one call,
    /// which blocks Redis for every other client while it runs: about
    /// 0.3 ms per 256 locks (some 1.1 µs per lock on redis-server 7.0
    /// holding 100,000 of them; a call carries at most about 64 KiB of keys
    /// and owner ids too, so long keys make smaller calls). A client holding
    /// more locks than this at once sends one more call per period for each
    /// further batch; a call's cost is nearly all per lock, so smaller
    /// batches cost Redis about the same in all. Raise it to send fewer
    /// calls, if Redis can afford the longer pauses.
    pub fn renewal_batch_size(mut self, locks: usize) -> Self {
        self.locks.renewal_batch = locks.max(1);
        self
    }

    /// Whether the client checks that each key is taken as one kind of
    /// lock (default: on in debug builds, off in release builds).
    ///
    /// Two calls that take one key as kinds that cannot share it (a plain
    /// lock and `permits = 3`, say: see the kinds guide,
    /// [`guide::kinds`](crate::guide::kinds)) fail with
    /// [`LockError::KindMismatch`] only when they overlap, which tests that
    /// run them one after another never see. With the check on, the client
    /// remembers the kind each key was last taken with (at least the last
    /// 1,024 distinct keys, at most 2,048), and a call that asks for a kind
    /// that cannot share the key fails at once with `KindMismatch`, found
    /// by [`KindFoundBy::KindCheck`](crate::KindFoundBy::KindCheck), which
    /// names both calls' places in the source; the call sends no request.
    /// Readers and writers (and plain locks) share a key, and so do calls
    /// with the same `permits` or `fair`; a call that re-enters a lock held
    /// around it is not checked. The check is per client: calls on another
    /// client, or in another process, are not compared.
    ///
    /// It costs no request, only a hash lookup under a lock of the client's
    /// per call that takes a lock (and a copy of a key it does not remember),
    /// and nothing when it is off. Turn it off for a program that takes one
    /// key as different kinds at times when the calls can never overlap;
    /// turn it on in a release build to check a staging run.
    pub fn kind_check(mut self, on: bool) -> Self {
        self.locks.kind_check = on;
        self
    }
}

/// Connections: timeouts, names, when to connect, where the background
/// work runs.
impl LockClientBuilder {
    /// How long connecting (and reconnecting) to Redis may take (default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.timeouts.connect = timeout;
        self
    }

    /// How long one Redis command may take before it fails (default 2 s).
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.timeouts.command = timeout;
        self
    }

    /// How long each Redlock node may take to answer one operation
    /// (default 100 ms); keep it far below the lease.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.redlock.node_timeout = timeout;
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
        self.runtime.client_name = Some(name.into());
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
        self.runtime.lazy_connect = lazy;
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
        self.runtime.on_current_runtime = true;
        self
    }

    /// Whether the plain lock's acquires and releases that come while one
    /// of this client's is in flight to the same node go out together, as
    /// one script call, when that call is answered (default on). A call
    /// that comes while none is in flight goes out at once either way, so
    /// a lone call never waits; under load the server then enters one
    /// script per batch, and the client sends one request for many calls.
    /// Each call in a batch runs by its own script, in the order the calls
    /// came, with its own answer or error. It applies to one node, the
    /// Sentinel master and each Redlock node; Cluster and the embedded
    /// backend send every call alone. Calls made on the current-thread
    /// runtime that drives the client's connection (a client built
    /// [`on_current_runtime`](Self::on_current_runtime) there) always go
    /// alone. `false` sends every call alone. See
    /// [Performance](crate::guide::performance) for what it measures.
    pub fn coalesce(mut self, on: bool) -> Self {
        self.runtime.calls_alone = !on;
        self
    }
}

/// Replicas and Sentinel.
impl LockClientBuilder {
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
        self.replicas = (replicas > 0).then_some(ReplicaSync { replicas, timeout });
        self
    }

    /// The credentials of the master that [`sentinel`](Self::sentinel)
    /// finds (the sentinels give its address only): an ACL user, or `None`
    /// for `requirepass`, and its password. Each sentinel's own credentials
    /// go in its URL. Not set by default: the master needs none.
    pub fn sentinel_master_auth(mut self, username: Option<&str>, password: &str) -> Self {
        self.sentinel = MasterAuth {
            username: username.map(str::to_owned),
            password: Some(password.to_owned()),
        };
        self
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
    pub async fn redlock<I>(urls: I) -> Result<LockClient, LockError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        Self::builder().redlock(urls).await
    }

    /// Connects to the master `master_name` through the sentinels at
    /// `sentinel_urls` with the default options; see
    /// [`LockClientBuilder::sentinel`].
    ///
    /// # Errors
    /// As [`LockClientBuilder::sentinel`].
    pub async fn sentinel<I>(sentinel_urls: I, master_name: &str) -> Result<LockClient, LockError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        Self::builder().sentinel(sentinel_urls, master_name).await
    }

    /// Connects to a Redis Cluster with the default options; see
    /// [`LockClientBuilder::cluster`].
    ///
    /// # Errors
    /// As [`LockClientBuilder::cluster`].
    pub async fn cluster<I>(urls: I) -> Result<LockClient, LockError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
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
    #[cfg(feature = "embedded")]
    #[cfg_attr(docsrs, doc(cfg(feature = "embedded")))]
    pub fn in_memory() -> LockClient {
        Self::builder().in_memory()
    }
}
