//! A master found through Redis Sentinel, followed across failovers.
//!
//! The backend asks the sentinels (in the order given, the first that
//! answers) for the master's address, checks with `ROLE` that the node
//! there is a master, and locks on it with a [`RedisBackend`]. It follows a
//! failover by itself. A `+switch-master` notice of its master on any
//! sentinel (it listens on each), or a request that fails with a connection
//! error, a timeout, or `READONLY` (the node was demoted to a replica),
//! starts a follower task, which asks the sentinels again every 200 ms
//! (for at most a minute) until they name another master or the current
//! one answers again. On a new master it connects a new [`RedisBackend`],
//! swaps it in, subscribes there to every release channel this client
//! listens on, sends it again the releases of the last lease (see
//! [`super::replay`]: one that reached the old master just before the switch
//! may not have reached the new one), and wakes every waiter, as after a
//! reconnect: releases published during the switch were not heard. The request that failed is not retried: it fails
//! (its outcome unknown, as any request cut by a fault), and the next one
//! goes to the new master.
//!
//! What a failover does to a held lock depends on `sync_replicas`: see
//! [`crate::LockClientBuilder::sync_replicas`] and [`crate::guide::deployments`].

use std::collections::HashSet;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};
use std::time::Duration;

use redis::{Cmd, ErrorKind, FromRedisValue, PushInfo, PushKind, RedisError, Value};
use tokio::runtime::Handle;

use super::node::{open_client, RedisBackend, RedisConfig};
use super::replay::ReplayLog;
use super::{Lane, Notices, Route, ScriptCall};
use crate::node_name::node_name;
use crate::replica_sync::ReplicaSync;
use crate::tls::TlsConfig;

/// The most channels one subscribe names when a new master is followed.
const RESUBSCRIBE_AT_ONCE: usize = 1024;

/// How often the follower asks the sentinels during a failover.
const FOLLOW_EVERY: Duration = Duration::from_millis(200);
/// How many times it asks before giving up until the next failed request
/// (a minute).
const FOLLOW_TRIES: usize = 300;

/// The master's credentials, which the sentinels do not give (see
/// [`crate::LockClientBuilder::sentinel_master_auth`]).
#[derive(Clone, Default)]
pub(crate) struct MasterAuth {
    pub username: Option<String>,
    pub password: Option<String>,
}

impl std::fmt::Debug for MasterAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password.
        f.debug_struct("MasterAuth")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<hidden>"))
            .finish()
    }
}

/// Called with every push of the subscription connection, and with a
/// disconnection after a switch to a new master.
pub(crate) type OnPush = Arc<dyn Fn(PushInfo) + Send + Sync>;

/// The master in use, and where it is.
struct Master {
    /// `host:port`, as the sentinels name it.
    addr: String,
    backend: RedisBackend,
}

/// A handle to the master found through the sentinels; cheap to clone.
#[derive(Clone)]
pub(crate) struct SentinelBackend {
    shared: Arc<Shared>,
}

struct Shared {
    sentinels: Vec<String>,
    master_name: String,
    auth: MasterAuth,
    config: RedisConfig,
    client_id: Arc<str>,
    on_push: OnPush,
    home: Handle,
    master: RwLock<Arc<Master>>,
    /// Held by the one follower task at a time.
    following: tokio::sync::Mutex<()>,
    /// The release channels this client listens on, to subscribe to on a
    /// new master.
    channels: Mutex<HashSet<String>>,
    /// The releases of the last lease, sent again to a new master.
    replay: ReplayLog,
}

impl SentinelBackend {
    /// Finds the master `master_name` through `sentinels` and connects to it.
    pub(crate) async fn connect(
        sentinels: Vec<String>,
        master_name: String,
        auth: MasterAuth,
        config: RedisConfig,
        (client_id, on_push): (Arc<str>, OnPush),
    ) -> Result<Self, RedisError> {
        let addr = resolve(&sentinels, &master_name, &config.tls).await?;
        let backend = connect_master(&sentinels, &addr, &auth, &config, &client_id, &on_push)
            .await
            .map_err(|error| {
                RedisError::from((
                    error.kind(),
                    "cannot connect to the master the sentinels named",
                    format!("master `{master_name}` at {addr}: {error}"),
                ))
            })?;
        check_master(&backend, &addr, &master_name).await?;
        let shared = Shared {
            sentinels,
            master_name,
            auth,
            config,
            client_id,
            on_push,
            home: Handle::current(),
            master: RwLock::new(Arc::new(Master { addr, backend })),
            following: tokio::sync::Mutex::new(()),
            channels: Mutex::new(HashSet::new()),
            replay: ReplayLog::new(),
        };
        let shared = Arc::new(shared);
        for url in &shared.sentinels {
            let task = watch_switches(Arc::downgrade(&shared), url.clone());
            shared.home.spawn(task);
        }
        Ok(SentinelBackend { shared })
    }

    /// The backend of the master in use now.
    pub(crate) fn current(&self) -> RedisBackend {
        self.master().backend.clone()
    }

    /// The master in use now, as a caller's error names it: its address
    /// as the sentinels give it (no credentials), and its name.
    pub(crate) fn master_node(&self) -> String {
        format!(
            "{} (master `{}`)",
            self.master().addr,
            self.shared.master_name
        )
    }

    /// The master in use now.
    fn master(&self) -> Arc<Master> {
        self.shared
            .master
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Following a failover: the follower task and the switch to a new master.
impl SentinelBackend {
    /// Starts the follower if `answer` is an error that a failover causes.
    fn check<T>(&self, answer: &Result<T, RedisError>) {
        if let Err(error) = answer {
            let failover = error.is_io_error()
                || error.is_timeout()
                || error.is_connection_dropped()
                || error.is_connection_refusal()
                || error.code() == Some("READONLY");
            if failover {
                self.start_following();
            }
        }
    }

    /// Starts the follower on the client's runtime.
    fn start_following(&self) {
        let this = self.clone();
        self.shared.home.spawn(async move { this.follow().await });
    }

    /// Asks the sentinels until they name another master (then switches to
    /// it) or the current one answers again; one follower at a time.
    async fn follow(&self) {
        let Ok(_following) = self.shared.following.try_lock() else {
            return;
        };
        for _ in 0..FOLLOW_TRIES {
            let current = self.master();
            let shared = &self.shared;
            let named = resolve(&shared.sentinels, &shared.master_name, &shared.config.tls).await;
            match named {
                Ok(addr) if addr != current.addr => match self.switch(addr).await {
                    Ok(()) => return,
                    Err(error) => tracing::debug!(%error, "cannot switch to the new master yet"),
                },
                Ok(_) => {
                    if check_master(&current.backend, &current.addr, &self.shared.master_name)
                        .await
                        .is_ok()
                    {
                        return;
                    }
                }
                Err(error) => tracing::debug!(%error, "no sentinel named the master"),
            }
            tokio::time::sleep(FOLLOW_EVERY).await;
        }
    }

    /// Connects to the master at `addr`, makes it the one in use, moves the
    /// subscriptions there and wakes every waiter.
    async fn switch(&self, addr: String) -> Result<(), RedisError> {
        let shared = &self.shared;
        let backend = connect_master(
            &shared.sentinels,
            &addr,
            &shared.auth,
            &shared.config,
            &shared.client_id,
            &shared.on_push,
        )
        .await?;
        check_master(&backend, &addr, &shared.master_name).await?;
        tracing::info!(master = %addr, name = %shared.master_name, "following the new master");
        let master = Arc::new(Master { addr, backend });
        *shared
            .master
            .write()
            .unwrap_or_else(PoisonError::into_inner) = master.clone();
        let channels: Vec<String> = shared
            .channels
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .cloned()
            .collect();
        for chunk in channels.chunks(RESUBSCRIBE_AT_ONCE) {
            let chunk: Vec<&str> = chunk.iter().map(String::as_str).collect();
            if let Err(error) = master.backend.subscribe(&chunk).await {
                tracing::debug!(%error, "resubscribe on the new master failed");
            }
        }
        // Releases the old master took but may not have streamed to this
        // one; before the waiters wake, so that they find those keys free.
        let backend = &master.backend;
        let replayed = (shared.replay)
            .replay(
                |_| Some(0),
                |_, pipeline, scripts| backend.query_loaded(pipeline, scripts),
                // Every line is woken below.
                |_| {},
            )
            .await;
        tracing::info!(
            ?replayed,
            "releases of the last lease sent again to the new master"
        );
        (shared.on_push)(PushInfo {
            kind: PushKind::Disconnection,
            data: Vec::new(),
        });
        Ok(())
    }

    /// Subscribes on the master in use, and on the next one after a switch.
    pub(crate) async fn subscribe(&self, keys: &[&str]) -> Result<(), RedisError> {
        self.shared
            .channels
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(keys.iter().map(|key| (*key).to_owned()));
        let master = self.master();
        let answer = master.backend.subscribe(keys).await;
        self.check(&answer);
        // A switch during the subscribe may have read the channels before
        // these were added.
        let now = self.master();
        if !Arc::ptr_eq(&master, &now) {
            return now.backend.subscribe(keys).await;
        }
        answer
    }

    pub(crate) async fn unsubscribe(&self, keys: &[&str]) -> Result<(), RedisError> {
        {
            let mut channels = self
                .shared
                .channels
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            for key in keys {
                channels.remove(*key);
            }
        }
        let answer = self.master().backend.unsubscribe(keys).await;
        self.check(&answer);
        answer
    }
}

/// Listens for `+switch-master` on the sentinel at `url` (reconnecting
/// after a second when its connection fails) and starts the follower when
/// its master moves; ends once the backend is dropped.
async fn watch_switches(shared: Weak<Shared>, url: String) {
    use futures_util::StreamExt as _;
    let alive = || shared.upgrade().map(|shared| SentinelBackend { shared });
    while let Some(backend) = alive() {
        let prefix = format!("{} ", backend.shared.master_name);
        let tls = backend.shared.config.tls.clone();
        drop(backend);
        let subscribed = async {
            let mut pubsub = open_client(&url, &tls)?.get_async_pubsub().await?;
            pubsub.subscribe("+switch-master").await?;
            Ok::<_, RedisError>(pubsub)
        };
        let Ok(Ok(mut pubsub)) = tokio::time::timeout(Duration::from_secs(1), subscribed).await
        else {
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        };
        let mut messages = pubsub.on_message();
        loop {
            // Wakes every second to see whether the client is gone.
            match tokio::time::timeout(Duration::from_secs(1), messages.next()).await {
                Ok(Some(message)) => {
                    let payload: String = message.get_payload().unwrap_or_default();
                    match alive() {
                        Some(backend) if payload.starts_with(&prefix) => {
                            backend.start_following();
                        }
                        Some(_) => {}
                        None => return,
                    }
                }
                Ok(None) => break,
                Err(_) if shared.strong_count() == 0 => return,
                Err(_) => {}
            }
        }
    }
}

/// The address (`host:port`) of the master `name`, from the first of
/// `sentinels` that knows it.
async fn resolve(sentinels: &[String], name: &str, tls: &TlsConfig) -> Result<String, RedisError> {
    let mut failures = String::new();
    for url in sentinels {
        let asked = async {
            let client = open_client(url, tls)?;
            let mut con = client.get_multiplexed_async_connection().await?;
            redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(name)
                .query_async::<Option<(String, u16)>>(&mut con)
                .await
        };
        match tokio::time::timeout(Duration::from_secs(1), asked).await {
            Ok(Ok(Some((host, port)))) => return Ok(format!("{host}:{port}")),
            Ok(Ok(None)) => {
                let _ = write!(failures, "; {}: no such master", node_name(url));
            }
            Ok(Err(error)) => {
                let _ = write!(failures, "; {}: {error}", node_name(url));
            }
            Err(_) => {
                let _ = write!(failures, "; {}: no answer within 1 s", node_name(url));
            }
        }
    }
    Err(RedisError::from((
        ErrorKind::InvalidClientConfig,
        "no sentinel gave the master's address",
        format!("master name `{name}`{failures}"),
    )))
}

/// Connects to the master at `addr` with `auth`, over TLS if the sentinels
/// are reached over TLS.
async fn connect_master(
    sentinels: &[String],
    addr: &str,
    auth: &MasterAuth,
    config: &RedisConfig,
    client_id: &Arc<str>,
    on_push: &OnPush,
) -> Result<RedisBackend, RedisError> {
    let tls = sentinels
        .first()
        .is_some_and(|url| url.starts_with("rediss://"));
    let url = master_url(tls, addr, auth);
    let on_push = on_push.clone();
    let on_push = move |info: PushInfo| on_push(info);
    RedisBackend::connect(&url, config, client_id.clone(), on_push, (false, false)).await
}

/// Fails unless the node behind `backend` says it is a master.
async fn check_master(backend: &RedisBackend, addr: &str, name: &str) -> Result<(), RedisError> {
    let role = backend.role().await?;
    if role == "master" {
        return Ok(());
    }
    Err(RedisError::from((
        ErrorKind::Io,
        "the node the sentinels name as master is not one (yet)",
        format!("master `{name}` at {addr} has the role {role}"),
    )))
}

/// The master's URL: `redis[s]://[user[:password]@]host:port/`, with the
/// credentials percent-encoded.
fn master_url(tls: bool, addr: &str, auth: &MasterAuth) -> String {
    let mut url = String::from(if tls { "rediss://" } else { "redis://" });
    if auth.username.is_some() || auth.password.is_some() {
        encode_into(&mut url, auth.username.as_deref().unwrap_or(""));
        if let Some(password) = &auth.password {
            url.push(':');
            encode_into(&mut url, password);
        }
        url.push('@');
    }
    url.push_str(addr);
    url.push('/');
    url
}

/// Appends `text` percent-encoded for the user-info part of a URL.
fn encode_into(url: &mut String, text: &str) {
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            url.push(char::from(byte));
        } else {
            let _ = write!(url, "%{byte:02X}");
        }
    }
}

/// Each call goes to the master in use; an error that a failover causes
/// starts the follower.
impl Route for SentinelBackend {
    async fn run<T: FromRedisValue + Send>(
        &self,
        lane: &Lane,
        call: &ScriptCall<'_>,
    ) -> Result<T, RedisError> {
        if let Some(lease) = call.replay {
            // Kept before it is sent: a switch after the send finds it.
            self.shared.replay.record(call, lease);
        }
        let answer = self.master().backend.run(lane, call).await;
        self.check(&answer);
        answer
    }

    fn sync(&self) -> Option<ReplicaSync> {
        self.shared.config.sync_replicas
    }

    async fn run_synced(
        &self,
        call: ScriptCall<'_>,
        undo: Option<Cmd>,
    ) -> Result<(Value, usize), RedisError> {
        if let Some(lease) = call.replay {
            // A synced release (one that keeps a hold until its end).
            self.shared.replay.record(&call, lease);
        }
        let answer = self.master().backend.run_synced(call, undo).await;
        self.check(&answer);
        answer
    }

    fn batches(&self, keys: &[&str]) -> Vec<Vec<usize>> {
        vec![(0..keys.len()).collect()]
    }

    fn notices(&self) -> Notices {
        Notices::Plain
    }

    async fn subscribe(&self, keys: &[&str]) -> Result<(), RedisError> {
        SentinelBackend::subscribe(self, keys).await
    }

    async fn unsubscribe(&self, keys: &[&str]) -> Result<(), RedisError> {
        SentinelBackend::unsubscribe(self, keys).await
    }

    fn client_id(&self) -> &str {
        &self.shared.client_id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn master_urls_encode_credentials_and_keep_tls() {
        let none = MasterAuth::default();
        assert_eq!(
            master_url(false, "10.0.0.1:6379", &none),
            "redis://10.0.0.1:6379/"
        );
        let auth = MasterAuth {
            username: Some("app".into()),
            password: Some("p@ss:w/rd".into()),
        };
        let url = master_url(true, "h:1", &auth);
        assert_eq!(url, "rediss://app:p%40ss%3Aw%2Frd@h:1/");
        let password_only = MasterAuth {
            username: None,
            password: Some("s".into()),
        };
        assert_eq!(master_url(false, "h:1", &password_only), "redis://:s@h:1/");
    }
}
