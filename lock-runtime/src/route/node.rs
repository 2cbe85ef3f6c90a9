//! One Redis node: locks as strings of layout 1 (see `docs/redis-layout.md`),
//! decided by Lua scripts called by EVALSHA.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{
    AsyncConnectionConfig, Client, Cmd, ErrorKind, FromRedisValue, ProtocolVersion, PushInfo,
    RedisError, Script, Value,
};
use tokio::runtime::{Handle, RuntimeFlavor};

use super::batch::Batcher;
use super::evalsha::evalsha;
use super::local::LocalConnections;
use super::replicas::Replicated;
use super::{Lane, Notices, Route, ScriptCall};
use crate::io::polled_on;
use crate::replica_sync::ReplicaSync;
use crate::tls::TlsConfig;

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
    /// See [`crate::LockClientBuilder::coalesce`].
    pub coalesce: bool,
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
    /// Coalescing on `commands` (see [`Batcher`]), unless turned off.
    batcher: Option<Arc<Batcher>>,
    /// Whether `home` is a current-thread runtime: calls made on it go
    /// alone (see [`RedisBackend::coalesces_here`]).
    home_single: bool,
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
            let timeouts = (config.connect_timeout, config.command_timeout);
            Arc::new(Replicated::new(sync, client.clone(), timeouts))
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
        let batcher = config
            .coalesce
            .then(|| Batcher::new(commands.clone(), home.clone()));
        let home_single = home.runtime_flavor() == RuntimeFlavor::CurrentThread;
        Ok(RedisBackend {
            batcher,
            home_single,
            commands,
            pubsub,
            client_id,
            home,
            local,
            replicated,
        })
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

    /// Runs `call` over `lane`; the script is loaded first where the
    /// server does not know it. On the client's connection, a call that
    /// may be coalesced goes through the [`Batcher`].
    async fn run_on<T: FromRedisValue>(
        &self,
        lane: &Lane,
        call: &ScriptCall<'_>,
    ) -> Result<T, RedisError> {
        match lane {
            Lane::Home => match (call.coalesce, &self.batcher) {
                (Some(coalesce), Some(batcher)) => {
                    let lead = self.coalesces_here();
                    batcher.run(call, coalesce, lead).await
                }
                _ => {
                    let mut con = self.commands.clone();
                    polled_on(&self.home, evalsha(call.script, &call.cmd, &mut con)).await
                }
            },
            Lane::Local(runtime, con) => {
                let answer = evalsha(call.script, &call.cmd, &mut con.clone()).await;
                if let (Err(error), Some(local)) = (&answer, &self.local) {
                    local.failed(*runtime, error);
                }
                answer
            }
        }
    }

    /// Whether a call made here may make later calls wait for its answer
    /// and go out in a batch: not when it is made on the current-thread
    /// runtime that drives the client's connection (a client built
    /// `on_current_runtime`, or the client's own thread, which gives back
    /// dropped acquires), where the one thread would sit idle while a batch
    /// is in flight instead of reading the answers of calls sent one by
    /// one.
    fn coalesces_here(&self) -> bool {
        !self.home_single
            || Handle::try_current().map_or(true, |caller| caller.id() != self.home.id())
    }

    /// One `SUBSCRIBE` of every key's channel (none: nothing is sent, as
    /// a `SUBSCRIBE` of no channel would fail).
    pub(crate) async fn subscribe(&self, keys: &[&str]) -> Result<(), RedisError> {
        if keys.is_empty() {
            return Ok(());
        }
        let mut con = self.pubsub.clone();
        polled_on(&self.home, con.subscribe(keys)).await
    }

    /// One `UNSUBSCRIBE` of every key's channel (none: nothing is sent,
    /// as an `UNSUBSCRIBE` of no channel drops them all).
    pub(crate) async fn unsubscribe(&self, keys: &[&str]) -> Result<(), RedisError> {
        if keys.is_empty() {
            return Ok(());
        }
        let mut con = self.pubsub.clone();
        polled_on(&self.home, con.unsubscribe(keys)).await
    }
}

/// What the operator's side and the connect-time checks send, none of
/// it on a lock call's path.
impl RedisBackend {
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

    /// Loads `scripts`, then runs `pipeline` (whose errors are kept per
    /// command) on the client's command connection: each command's answer.
    pub(crate) async fn query_loaded(
        &self,
        pipeline: redis::Pipeline,
        scripts: Vec<&'static Script>,
    ) -> Result<Vec<redis::RedisResult<Value>>, RedisError> {
        let mut con = self.commands.clone();
        polled_on(&self.home, async {
            for script in scripts {
                script.load_async(&mut con).await?;
            }
            pipeline.query_async(&mut con).await
        })
        .await
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

/// A release notice, as the release scripts publish it on the channel
/// named like the lock's key: `<client id>:<token>`, or for a fair line's
/// release, `><owner id>` naming the waiter that goes next.
pub(crate) enum Notice<'a> {
    /// `key` was released by the client `client`: the released hold had
    /// fencing token `token`.
    Released {
        key: &'a [u8],
        client: &'a [u8],
        token: u64,
    },
    /// A fair line's release of `key` names its next waiter: the
    /// acquisition `n` of the client `client` (owner id `<client>:<n>`).
    Next {
        key: &'a [u8],
        client: &'a [u8],
        n: u64,
    },
    /// A release of `key` (its fencing token `token`) named the waiting
    /// client `client`, the earliest on the lock's record of waiting
    /// clients: that client tries first.
    Named {
        key: &'a [u8],
        client: &'a [u8],
        token: u64,
    },
}

/// The release notice in `info`, if it is one.
pub(crate) fn notice(info: &PushInfo) -> Option<Notice<'_>> {
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
    let (client, number) = split_id(payload)?;
    if let Some(client) = client.strip_prefix(b">") {
        return Some(Notice::Next {
            key,
            client,
            n: number,
        });
    }
    if let Some(client) = client.strip_prefix(b"=") {
        return Some(Notice::Named {
            key,
            client,
            token: number,
        });
    }
    Some(Notice::Released {
        key,
        client,
        token: number,
    })
}

/// `<name>:<number>` split at its last colon: an owner id (a client id and
/// the number of one of its acquisitions), or a release notice's client id
/// and token.
pub(crate) fn split_id(id: &[u8]) -> Option<(&[u8], u64)> {
    let split = id.iter().rposition(|b| *b == b':')?;
    let number = std::str::from_utf8(&id[split + 1..]).ok()?.parse().ok()?;
    Some((&id[..split], number))
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

/// What a route gives the client's push handler after it sent a release
/// of `key` again (see `route/replay.rs`): the notice of that release
/// carries this client's id, which the handler skips, as it skips every
/// notice of its own releases. So the route says instead what a
/// subscription confirmation of `key`'s channel says (see [`subscribed`]):
/// a release of `key` may not have been heard here; the head of the key's
/// line tries.
pub(crate) fn missed_release(key: &str) -> PushInfo {
    PushInfo {
        kind: redis::PushKind::SSubscribe,
        data: vec![Value::BulkString(key.as_bytes().to_vec()), Value::Int(1)],
    }
}

impl Route for RedisBackend {
    fn run<T: FromRedisValue + Send>(
        &self,
        lane: &Lane,
        call: &ScriptCall<'_>,
    ) -> impl Future<Output = Result<T, RedisError>> + Send {
        self.run_on(lane, call)
    }

    fn sync(&self) -> Option<ReplicaSync> {
        self.replicated.as_ref().map(|replicated| replicated.sync)
    }

    async fn run_synced(
        &self,
        call: ScriptCall<'_>,
        undo: Option<Cmd>,
    ) -> Result<(Value, usize), RedisError> {
        let Some(replicated) = &self.replicated else {
            let answer = self.run_on(&Lane::Home, &call).await?;
            return Ok((answer, 0));
        };
        replicated
            .run(&self.home, call.script, call.cmd, undo)
            .await
    }

    fn batches(&self, keys: &[&str]) -> Vec<Vec<usize>> {
        vec![(0..keys.len()).collect()]
    }

    fn notices(&self) -> Notices {
        Notices::Plain
    }

    async fn subscribe(&self, keys: &[&str]) -> Result<(), RedisError> {
        RedisBackend::subscribe(self, keys).await
    }

    async fn unsubscribe(&self, keys: &[&str]) -> Result<(), RedisError> {
        RedisBackend::unsubscribe(self, keys).await
    }

    fn client_id(&self) -> &str {
        &self.client_id
    }
}

#[cfg(test)]
mod tests {
    use redis::{PushInfo, PushKind, Value};

    use super::{notice, split_id, Notice};

    fn message(kind: PushKind, key: &str, payload: &str) -> PushInfo {
        let data = [key, payload].map(|s| Value::BulkString(s.as_bytes().to_vec()));
        PushInfo {
            kind,
            data: data.to_vec(),
        }
    }

    #[test]
    fn a_release_notice_reads_as_its_client_and_token_or_the_fair_waiter_it_names() {
        let plain = message(PushKind::Message, "k", "abc:17");
        assert!(matches!(
            notice(&plain),
            Some(Notice::Released {
                key: b"k",
                client: b"abc",
                token: 17
            })
        ));
        let fair = message(PushKind::SMessage, "k", ">abc:3");
        assert!(matches!(
            notice(&fair),
            Some(Notice::Next {
                key: b"k",
                client: b"abc",
                n: 3
            })
        ));
        for payload in ["abc", "abc:x", ">abc"] {
            assert!(notice(&message(PushKind::Message, "k", payload)).is_none());
        }
        assert!(notice(&message(PushKind::Subscribe, "k", "abc:1")).is_none());
        assert_eq!(split_id(b"a:b:9"), Some((&b"a:b"[..], 9)));
    }
}
