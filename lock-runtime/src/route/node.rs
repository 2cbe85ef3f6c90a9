//! One Redis node: locks as strings of layout 1 (see `docs/redis-layout.md`),
//! decided by Lua scripts called by EVALSHA.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{
    AsyncConnectionConfig, Client, Cmd, ErrorKind, FromRedisValue, ProtocolVersion, PushInfo,
    RedisError, Script, ServerErrorKind, ToRedisArgs, Value,
};
use tokio::runtime::Handle;

use super::local::LocalConnections;
use super::replicas::Replicated;
use super::{millis, Lane};
use crate::io::polled_on;
use crate::kind::sources;
use crate::kind::{Acquire, Release, RenewItem, Renewal};
use crate::replica_sync::ReplicaSync;
use crate::tls::TlsConfig;

pub(crate) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(&acquire_source()));
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(sources::RELEASE));
pub(crate) static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(sources::RENEW));
static FENCE: LazyLock<Script> = LazyLock::new(|| Script::new(sources::FENCE));

/// The acquire script's source.
fn acquire_source() -> String {
    let source = sources::ACQUIRE;
    if cfg!(feature = "defect-token-without-clock") {
        // The checker's proof: tokens without the clock repeat after a
        // restore from a snapshot.
        let rule =
            "local token = math.max(fence + 1, tonumber(now[1]) * 1000000 + tonumber(now[2]))";
        let without = "local token = fence + 1\nif fence == 0 then token = tonumber(now[1]) * 1000000 + tonumber(now[2]) end";
        assert!(source.contains(rule));
        return source.replace(rule, without);
    }
    source.to_owned()
}

/// How the backend connects.
#[derive(Clone)]
pub(crate) struct RedisConfig {
    pub connect_timeout: Duration,
    pub command_timeout: Duration,
    /// Connection attempts after the first when (re)connecting, with
    /// backoff; 0 fails a command at once when its node refuses.
    pub retries: usize,
    /// The name that the connections of callers' runtimes are given
    /// (`CLIENT SETNAME`); the client's own connections are named by the
    /// client (see `presence.rs`).
    pub client_name: Option<Arc<str>>,
    /// The client's TLS options, for `rediss://` URLs.
    pub tls: TlsConfig,
    /// See [`crate::LockClientBuilder::sync_replicas`]; `None` adds nothing
    /// to any request.
    pub sync_replicas: Option<ReplicaSync>,
}

/// Opens a client for `url`: every connection of this crate to a node or a
/// sentinel starts here.
pub(crate) fn open_client(url: &str, tls: &TlsConfig) -> Result<Client, RedisError> {
    tls.client(url)
}

/// Two self-reconnecting connections: one for the scripts, one (RESP3) that
/// carries the subscriptions to release channels and resubscribes after a
/// reconnect. Both are driven by the client's runtime (`home`); calls from
/// current-thread runtimes may take connections of their own (`local`).
#[derive(Clone)]
pub(crate) struct RedisBackend {
    commands: ConnectionManager,
    pubsub: ConnectionManager,
    /// Sent with each release, so this client can skip its own releases.
    client_id: Arc<str>,
    /// The runtime that `connect` ran on: the client's. Requests on its
    /// connections are polled as if on it, so that a connection they make
    /// or remake is driven there, not by a caller's runtime that may end
    /// first.
    home: Handle,
    local: Option<Arc<LocalConnections>>,
    /// The connections of replica-synced requests, with `sync_replicas` on.
    replicated: Option<Arc<Replicated>>,
}

impl RedisBackend {
    /// Connects both connections. `on_push` sees every pub/sub message and
    /// every disconnection of the subscription connection. With `lazy`, the
    /// connections are made on first use (and remade until they succeed), so
    /// a node that is down now does not fail the call. With `local`, calls
    /// from other current-thread runtimes take connections of their own (see
    /// [`LocalConnections`]).
    pub(crate) async fn connect(
        url: &str,
        config: &RedisConfig,
        client_id: Arc<str>,
        on_push: impl Fn(PushInfo) + Send + Sync + 'static,
        (lazy, local): (bool, bool),
    ) -> Result<Self, RedisError> {
        let client = open_client(url, &config.tls)?;
        let home = Handle::current();
        let replicated = config.sync_replicas.map(|sync| {
            let synced_config = AsyncConnectionConfig::new()
                .set_connection_timeout(Some(config.connect_timeout))
                .set_response_timeout(Some(config.command_timeout + sync.timeout));
            Arc::new(Replicated::new(sync, client.clone(), synced_config))
        });
        let local = local.then(|| {
            let local_config = AsyncConnectionConfig::new()
                .set_connection_timeout(Some(config.connect_timeout))
                .set_response_timeout(Some(config.command_timeout));
            Arc::new(LocalConnections::new(
                client.clone(),
                local_config,
                home.id(),
                config.client_name.clone(),
            ))
        });
        let info = client.get_connection_info().clone();
        let settings = info
            .redis_settings()
            .clone()
            .set_protocol(ProtocolVersion::RESP3);
        let pubsub_client = Client::open(info.set_redis_settings(settings))?;

        let base = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(config.connect_timeout))
            .set_response_timeout(Some(config.command_timeout))
            .set_number_of_retries(config.retries)
            .set_max_delay(Duration::from_secs(1));
        let pubsub_config = base
            .clone()
            .set_push_sender(move |info: PushInfo| {
                on_push(info);
                Ok::<(), std::convert::Infallible>(())
            })
            .set_automatic_resubscription();

        let (commands, pubsub) = if lazy {
            (
                ConnectionManager::new_lazy_with_config(client, base)?,
                ConnectionManager::new_lazy_with_config(pubsub_client, pubsub_config)?,
            )
        } else {
            tokio::try_join!(
                ConnectionManager::new_with_config(client, base),
                ConnectionManager::new_with_config(pubsub_client, pubsub_config),
            )?
        };
        Ok(RedisBackend {
            commands,
            pubsub,
            client_id,
            home,
            local,
            replicated,
        })
    }

    /// Names both connections (`CLIENT SETNAME`); the first error.
    pub(crate) async fn set_name(&self, name: &str) -> Result<(), RedisError> {
        let mut cmd = redis::cmd("CLIENT");
        cmd.arg("SETNAME").arg(name);
        let mut commands = self.commands.clone();
        let mut pubsub = self.pubsub.clone();
        let (a, b) = polled_on(&self.home, async {
            tokio::join!(
                cmd.query_async::<()>(&mut commands),
                cmd.query_async::<()>(&mut pubsub)
            )
        })
        .await;
        a.and(b)
    }

    /// Runs `pipeline` on the client's command connection.
    pub(crate) async fn query_pipeline<T: FromRedisValue>(
        &self,
        pipeline: &redis::Pipeline,
    ) -> Result<T, RedisError> {
        let mut con = self.commands.clone();
        polled_on(&self.home, pipeline.query_async(&mut con)).await
    }

    /// The client's runtime, which drives its connections.
    pub(crate) fn home(&self) -> &Handle {
        &self.home
    }

    /// The connection for one call's requests: the caller's runtime's own
    /// if it has one ready, else the client's.
    pub(crate) fn lane(&self) -> Lane {
        match self.local.as_ref().and_then(|local| local.get()) {
            Some((runtime, connection)) => Lane::Local(runtime, connection),
            None => Lane::Home,
        }
    }

    pub(crate) async fn acquire(
        &self,
        lane: &Lane,
        key: &str,
        owner: &str,
        lease: Duration,
    ) -> Result<Acquire, RedisError> {
        if let Some(replicated) = &self.replicated {
            // Boxed, so the default path's future does not grow by its state.
            return Box::pin(self.acquire_synced(replicated, key, owner, lease)).await;
        }
        let args = (owner, millis(lease));
        let answer: i64 = self
            .eval(lane, &ACQUIRE, key, args, owner.len() + 20)
            .await?;
        acquired(answer)
    }

    /// An acquire followed by `WAIT` (see [`Replicated`]); a lock taken
    /// without enough replicas is `NotReplicated`.
    #[cold]
    async fn acquire_synced(
        &self,
        replicated: &Arc<Replicated>,
        key: &str,
        owner: &str,
        lease: Duration,
    ) -> Result<Acquire, RedisError> {
        let cmd = evalsha_cmd(&ACQUIRE, key, (owner, millis(lease)), owner.len() + 20);
        let release = {
            let (key, owner, client_id) =
                (key.to_owned(), owner.to_owned(), self.client_id.clone());
            move || evalsha_cmd(&RELEASE, &key, (&*owner, &*client_id, 0), 128)
        };
        let (answer, acked) = replicated
            .acquire(&self.home, &ACQUIRE, cmd, release)
            .await?;
        match acquired(answer)? {
            Acquire::Acquired(token) if acked < replicated.sync.replicas => {
                Ok(Acquire::NotReplicated { token, acked })
            }
            answer => Ok(answer),
        }
    }
}

/// The meaning of acquire.lua's answer: the token (> 0), or -2 - the
/// holder's TTL (-1: no expiry).
pub(crate) fn acquired(answer: i64) -> Result<Acquire, RedisError> {
    Ok(match answer {
        1.. => Acquire::Acquired(answer.unsigned_abs()),
        -1 => Acquire::Held(None),
        ..=-2 => Acquire::Held(Some(Duration::from_millis((-2 - answer).unsigned_abs()))),
        0 => {
            return Err(RedisError::from((
                redis::ErrorKind::Parse,
                "acquire.lua answered 0, which is not a fencing token",
            )))
        }
    })
}

/// The meaning of release.lua's answer: 1 when it freed the lock.
pub(crate) fn released_answer(freed: i64) -> Release {
    if freed == 1 {
        Release::Freed
    } else {
        Release::NotHeld
    }
}

/// The meaning of renew.lua's answer for one lock; a renewal the replicas
/// did not acknowledge (`synced` false) is not known to last.
fn renewal(answer: i64, synced: bool) -> Renewal {
    match (answer, synced) {
        (1, true) => Renewal::Renewed,
        (1, false) => Renewal::Unknown,
        _ => Renewal::Gone,
    }
}

/// An EVALSHA of `script` on `key` with `args`, built in one buffer of about
/// `args_size` bytes more than the fixed part, rather than through
/// `ScriptInvocation`, which allocates every argument on its own: this is
/// the hot path.
pub(crate) fn evalsha_cmd(
    script: &Script,
    key: &str,
    args: impl ToRedisArgs,
    args_size: usize,
) -> Cmd {
    let mut cmd = Cmd::with_capacity(7, 96 + key.len() + args_size);
    cmd.arg("EVALSHA")
        .arg(script.get_hash())
        .arg(1)
        .arg(key)
        .arg(args);
    cmd
}

impl RedisBackend {
    pub(crate) async fn release(
        &self,
        lane: &Lane,
        key: &str,
        owner: &str,
        token: u64,
    ) -> Result<Release, RedisError> {
        let args = (owner, &*self.client_id, token);
        let size = owner.len() + self.client_id.len() + 20;
        let freed: i64 = self.eval(lane, &RELEASE, key, args, size).await?;
        Ok(released_answer(freed))
    }

    /// Raises the kept fencing token of the lock `owner` holds to `token`;
    /// whether `owner` holds it.
    pub(crate) async fn fence(
        &self,
        key: &str,
        owner: &str,
        token: u64,
    ) -> Result<bool, RedisError> {
        let held: i64 = self
            .eval(&Lane::Home, &FENCE, key, (owner, token), owner.len() + 20)
            .await?;
        Ok(held == 1)
    }

    /// Calls `script` on `key` with `args` by EVALSHA, over `lane`.
    ///
    /// The command is built in one buffer of about `args_size` bytes more
    /// than the fixed part, rather than through `ScriptInvocation`, which
    /// allocates every argument on its own: this is the hot path.
    pub(crate) async fn eval<T: FromRedisValue>(
        &self,
        lane: &Lane,
        script: &Script,
        key: &str,
        args: impl ToRedisArgs,
        args_size: usize,
    ) -> Result<T, RedisError> {
        let cmd = evalsha_cmd(script, key, args, args_size);
        match lane {
            Lane::Home => {
                let mut con = self.commands.clone();
                polled_on(&self.home, evalsha(script, &cmd, &mut con)).await
            }
            Lane::Local(runtime, con) => {
                let answer = evalsha(script, &cmd, &mut con.clone()).await;
                if let (Err(error), Some(local)) = (&answer, &self.local) {
                    local.failed(*runtime, error);
                }
                answer
            }
        }
    }

    /// Renewed or gone, per item; an error leaves them all unknown.
    pub(crate) async fn renew(&self, items: &[RenewItem<'_>]) -> Result<Vec<Renewal>, RedisError> {
        if let Some(replicated) = &self.replicated {
            return self.renew_synced(replicated, items).await;
        }
        let mut call = RENEW.prepare_invoke();
        for item in items {
            call.key(item.key).arg(item.owner).arg(millis(item.lease));
        }
        let mut con = self.commands.clone();
        let renewed: Vec<i64> = polled_on(&self.home, call.invoke_async(&mut con)).await?;
        Ok(renewed.into_iter().map(|r| renewal(r, true)).collect())
    }

    /// A renewal batch followed by `WAIT` (see [`Replicated`]). Without
    /// enough replicas, a renewed lock is `Unknown`: a failover now would
    /// promote a replica that keeps the older expiry, so the lock's validity
    /// is not extended, and the watchdog tries again until it runs out.
    async fn renew_synced(
        &self,
        replicated: &Replicated,
        items: &[RenewItem<'_>],
    ) -> Result<Vec<Renewal>, RedisError> {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(RENEW.get_hash()).arg(items.len());
        for item in items {
            cmd.arg(item.key);
        }
        for item in items {
            cmd.arg(item.owner).arg(millis(item.lease));
        }
        let (renewed, acked): (Vec<i64>, usize) =
            replicated.renew(&self.home, &RENEW, &cmd).await?;
        let synced = acked >= replicated.sync.replicas;
        Ok(renewed.into_iter().map(|r| renewal(r, synced)).collect())
    }

    pub(crate) async fn subscribe(&self, key: &str) -> Result<(), RedisError> {
        let mut con = self.pubsub.clone();
        polled_on(&self.home, con.subscribe(key)).await
    }

    pub(crate) async fn unsubscribe(&self, key: &str) -> Result<(), RedisError> {
        let mut con = self.pubsub.clone();
        polled_on(&self.home, con.unsubscribe(key)).await
    }

    /// The node's role (`master`, `slave`, `sentinel`), from `ROLE`.
    pub(crate) async fn role(&self) -> Result<String, RedisError> {
        let mut con = self.commands.clone();
        let role: Vec<Value> =
            polled_on(&self.home, redis::cmd("ROLE").query_async(&mut con)).await?;
        match role.into_iter().next() {
            Some(kind) => Ok(redis::from_redis_value(kind)?),
            None => Err(RedisError::from((
                ErrorKind::Parse,
                "ROLE answered nothing",
            ))),
        }
    }

    /// Whether the node can hold locks: a master outside a cluster (see
    /// [`target`](super::target)); `node` names it in the error.
    pub(crate) async fn check_target(
        &self,
        node: &str,
        expected: super::target::Expected,
    ) -> Result<(), RedisError> {
        let mut con = self.commands.clone();
        let check = super::target::check(&mut con, node, expected);
        polled_on(&self.home, check).await
    }
}

/// `cmd`, an EVALSHA of `script`, on `con`; the script is loaded first if
/// the server does not know it (a restart, a `SCRIPT FLUSH`).
pub(crate) async fn evalsha<T: FromRedisValue>(
    script: &Script,
    cmd: &Cmd,
    con: &mut (impl ConnectionLike + Send),
) -> Result<T, RedisError> {
    match cmd.query_async(con).await {
        Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
            script.load_async(con).await?;
            cmd.query_async(con).await
        }
        answer => answer,
    }
}

/// A release notice: the lock's key, the releasing client's id and the
/// fencing token of the released hold.
pub(crate) struct Released<'a> {
    pub key: &'a [u8],
    pub client: &'a [u8],
    pub token: u64,
}

/// The release notice in `info`, if it is one.
pub(crate) fn released(info: &PushInfo) -> Option<Released<'_>> {
    // SMessage: sharded pub/sub, on Cluster.
    if !matches!(
        info.kind,
        redis::PushKind::Message | redis::PushKind::SMessage
    ) {
        return None;
    }
    let [Value::BulkString(key), Value::BulkString(payload)] = info.data.as_slice() else {
        return None;
    };
    let split = payload.iter().rposition(|b| *b == b':')?;
    let token = std::str::from_utf8(&payload[split + 1..])
        .ok()?
        .parse()
        .ok()?;
    Some(Released {
        key,
        client: &payload[..split],
        token,
    })
}

/// The channel of a subscription confirmation in `info`, if it is one.
pub(crate) fn subscribed(info: &PushInfo) -> Option<&[u8]> {
    if !matches!(
        info.kind,
        redis::PushKind::Subscribe | redis::PushKind::SSubscribe
    ) {
        return None;
    }
    match info.data.first() {
        Some(Value::BulkString(channel)) => Some(channel),
        _ => None,
    }
}
