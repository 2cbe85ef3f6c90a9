//! Fenced writes: commands on a resource in Redis that the resource itself
//! refuses when a newer holder of the lock has written it, so that a holder
//! paused past its lease (GC, SIGSTOP, a VM migration) cannot write after
//! its lock was taken. The script and the fence key are in
//! `docs/redis-layout.md`, "Fenced writes".

use ::redis::aio::ConnectionLike;
use ::redis::{ToRedisArgs, Value};

use crate::backend::fenced::Fenced;
use crate::client::LockClient;
use crate::error::{LockError, WriteRan};
use crate::fencing::{fencing_token, fencing_token_of};
use crate::global;
use crate::kind::fenced::{self, Command, Written};

/// A write to a resource in Redis, made only if no newer holder of the
/// lock wrote it: built by [`LockClient::fenced_write`] (or [`fenced`]),
/// given its commands by [`cmd`](FencedWrite::cmd), sent by
/// [`run`](FencedWrite::run).
///
/// The write runs as one script on the node that serves the resource: it
/// reads the highest fencing token that wrote the resource (kept at a key
/// of its own in the resource's hash slot), refuses a smaller token with
/// [`LockError::Fenced`] (no command runs), else keeps the token and runs
/// the commands in order. A holder may write many times with its own token.
///
/// A command that fails fails the write there, with
/// [`LockError::Backend`]: Redis does not roll a script back, so the fence
/// (raised to the token) and the commands before it stay written, on both
/// backends.
///
/// The token is the running locked body's (or leader term's):
/// [`fencing_token_of`] the lock named by [`lock`](FencedWrite::lock), else
/// [`fencing_token`]; [`token`](FencedWrite::token) gives one by hand.
///
/// Where it runs: one node, the Sentinel master, the Cluster master of the
/// resource's slot (every key in that slot: give the data keys the
/// resource's hash tag, `{account:7}:balance` for the resource
/// `account:7`), the embedded backend (only
/// `SET`, `DEL`, `INCRBY`, `HSET`, `HDEL`, `HINCRBY`, `RPUSH`, `PEXPIRE`). A
/// Redlock client refuses it with [`LockError::Invalid`]: a fenced write is
/// not a quorum operation; [`run_on`](FencedWrite::run_on) sends it on a
/// connection of the user's instead, on any client.
///
/// With [`sync_replicas`](crate::LockClientBuilder::sync_replicas), the
/// write waits for the replicas as an acquire does, and fails with
/// [`LockError::NotReplicated`] when too few acknowledged it (its commands
/// ran on the master). Without it, a failover may lose a fenced write that
/// no replica had, and with it the fence: a stale holder could then write
/// once more (see [`guide::fencing`](crate::guide::fencing)).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_runtime::LockError> {
/// use lock_runtime::{LockClient, LockOptions};
///
/// let client = LockClient::in_memory();
/// let replies = client
///     .run_locked("account:7", LockOptions::default(), async {
///         client
///             .fenced_write("account:7")
///             .cmd("INCRBY", ["account:7"], 100)
///             .run()
///             .await
///     })
///     .await?;
/// assert_eq!(replies, vec![lock_runtime::redis::Value::Int(100)]);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a fenced write does nothing until run"]
pub struct FencedWrite<'c> {
    /// `None`: the installed client, read at `run`.
    client: Option<&'c LockClient>,
    resource: String,
    lock: Option<String>,
    token: Option<u64>,
    commands: Vec<Command>,
}

/// A fenced write on the installed client (see [`crate::init`]); as
/// [`LockClient::fenced_write`].
pub fn fenced(resource: impl Into<String>) -> FencedWrite<'static> {
    FencedWrite::new(None, resource.into())
}

impl LockClient {
    /// A fenced write to `resource` (a name of the user's: the fence key is
    /// made from it, see [`FencedWrite`]); add its commands with
    /// [`cmd`](FencedWrite::cmd), then [`run`](FencedWrite::run) it inside
    /// the locked body (or leader term) whose token it carries.
    pub fn fenced_write(&self, resource: impl Into<String>) -> FencedWrite<'_> {
        FencedWrite::new(Some(self), resource.into())
    }
}

impl<'c> FencedWrite<'c> {
    fn new(client: Option<&'c LockClient>, resource: String) -> Self {
        FencedWrite {
            client,
            resource,
            lock: None,
            token: None,
            commands: Vec::new(),
        }
    }

    /// Takes the token of the lock `key` (as given to the locked call,
    /// without the prefix) that the running body holds, rather than the
    /// innermost lock's: for a body holding several locks.
    pub fn lock(mut self, key: impl Into<String>) -> Self {
        self.lock = Some(key.into());
        self
    }

    /// Writes with `token` rather than a running body's: for a token kept
    /// from a hold (a worker that writes for its lock's holder), or tests.
    pub fn token(mut self, token: u64) -> Self {
        self.token = Some(token);
        self
    }

    /// Adds the command `name` with its `keys` (each in the resource's hash
    /// slot on Cluster), then its other arguments `args` (as `redis`
    /// encodes them: one value, a slice, a tuple; for none, use
    /// [`cmd_keys`](FencedWrite::cmd_keys)). Keys must be given as keys:
    /// the write refuses a command whose keys include the resource's fence
    /// key, and `FLUSHALL`, `FLUSHDB` and `SWAPDB`.
    pub fn cmd<K>(mut self, name: &str, keys: K, args: impl ToRedisArgs) -> Self
    where
        K: IntoIterator,
        K::Item: AsRef<str>,
    {
        self.commands.push(Command {
            name: name.to_owned(),
            keys: keys.into_iter().map(|k| k.as_ref().to_owned()).collect(),
            args: args.to_redis_args(),
        });
        self
    }

    /// Adds the command `name` with its `keys` and no other argument
    /// (`DEL`, `INCR`): as [`cmd`](FencedWrite::cmd) without `args`.
    pub fn cmd_keys<K>(self, name: &str, keys: K) -> Self
    where
        K: IntoIterator,
        K::Item: AsRef<str>,
    {
        self.cmd(name, keys, &[] as &[&str])
    }

    /// Sends the write to the client's deployment: the commands' replies,
    /// in order.
    ///
    /// # Errors
    /// Each says what happened to the write's commands:
    /// - [`LockError::Fenced`] when a newer token wrote the resource
    ///   (nothing ran: the caller lost its lock and must stop writing);
    /// - [`LockError::InvalidWrite`] (nothing ran) without a token (outside
    ///   a locked body, no [`token`](FencedWrite::token)), for a command
    ///   without a name or one that could reset the fence, keys in more
    ///   than one Cluster slot, a Redlock client (use
    ///   [`run_on`](FencedWrite::run_on)), or a command the embedded
    ///   backend does not carry (named in the error's resource);
    /// - [`LockError::WriteFailed`] when Redis fails or a command fails:
    ///   its [`WriteRan`] says whether none ran, those before the failing
    ///   one ran, or the answer was lost after sending;
    /// - [`LockError::WriteNotReplicated`] with `sync_replicas`, when too
    ///   few replicas acknowledged the write in time: its commands **ran**
    ///   on the master (their replies are in the error), and a failover now
    ///   may lose them and the fence;
    /// - [`LockError::NotInitialized`] for [`fenced`] without an installed
    ///   client.
    pub async fn run(self) -> Result<Vec<Value>, LockError> {
        // The client in use, as for a locked call: the scoped one
        // (`with_client`) before the global one.
        let in_use;
        let client = match self.client {
            Some(client) => client,
            None => {
                in_use = global::in_use()?;
                &*in_use
            }
        };
        let token = self.checked_token()?;
        let inner = &client.inner;
        let answer = inner
            .backend
            .fenced_write(&self.resource, token, &self.commands)
            .await
            .map_err(|e| {
                write_failed(
                    inner
                        .backend
                        .error_on_key(e, &self.resource, &inner.tag.place),
                )
            })?;
        self.answer(answer)
    }

    /// Sends the write on `con`, a connection of the user's to the Redis
    /// that keeps the resource (a `redis` multiplexed, managed or cluster
    /// connection), rather than to the client's deployment: for a resource
    /// that lives elsewhere than the locks, and the only form a Redlock
    /// client takes. The script is loaded there when the server lacks it.
    /// No client is needed: the token is the running body's, as for
    /// [`run`](FencedWrite::run), and `sync_replicas` does not apply.
    ///
    /// # Errors
    /// As [`run`](FencedWrite::run), with [`LockError::WriteFailed`] naming
    /// the node "the connection given to run_on", and keys in several
    /// Cluster slots refused by the server (`CROSSSLOT`) rather than
    /// before sending.
    pub async fn run_on<C>(self, con: &mut C) -> Result<Vec<Value>, LockError>
    where
        C: ConnectionLike + Send,
    {
        let token = self.checked_token()?;
        let answer = fenced::write_on(con, &self.resource, token, &self.commands)
            .await
            .map_err(|source| LockError::WriteFailed {
                resource: self.resource.clone(),
                node: "the connection given to run_on".to_owned(),
                ran: write_ran(&source),
                source,
            })?;
        self.answer(Fenced::Done(answer))
    }

    /// The token to write with (see [`FencedWrite`]), once the commands
    /// are checked.
    fn checked_token(&self) -> Result<u64, LockError> {
        if self.commands.iter().any(|c| c.name.is_empty()) {
            return Err(self.invalid("a fenced write's command has no name"));
        }
        if let Some(other) = fenced::shares_fence(&self.resource) {
            return Err(LockError::InvalidWrite {
                resource: format!(
                    "{} (its fence key {} is the resource {other}'s too)",
                    self.resource,
                    fenced::fence_key(&self.resource)
                ),
                message: SHARED_FENCE,
            });
        }
        if let Some(name) = fenced::refused_command(&self.resource, &self.commands) {
            return Err(LockError::InvalidWrite {
                resource: format!("{} (command {name})", self.resource),
                message: REFUSED_COMMAND,
            });
        }
        match (&self.token, &self.lock) {
            (Some(token), _) => Some(*token),
            (None, Some(key)) => fencing_token_of(key),
            (None, None) => fencing_token(),
        }
        .ok_or_else(|| {
            self.invalid(
                "a fenced write without a token: run it inside the locked body (or leader \
                 term) that holds the lock, or give the token with .token(t)",
            )
        })
    }

    /// What the write's answer means for the caller.
    fn answer(self, answer: Fenced) -> Result<Vec<Value>, LockError> {
        match answer {
            Fenced::Done(Written::Ran(replies)) => Ok(replies),
            Fenced::Done(Written::Refused { stored, given }) => Err(LockError::Fenced {
                resource: self.resource,
                stored,
                given,
            }),
            Fenced::Done(Written::Unsynced {
                replies,
                acked,
                sync,
                took,
            }) => Err(LockError::WriteNotReplicated {
                resource: self.resource,
                needed: sync.replicas,
                acked,
                timeout: sync.timeout,
                waited: took,
                replies,
            }),
            Fenced::Done(Written::ManySlots) => Err(self.invalid(
                "a fenced write's keys are in more than one Cluster hash slot: put the \
                 resource's hash tag ({...}) in every key",
            )),
            Fenced::Redlock => Err(self.invalid(
                "a fenced write on a Redlock client: it is not a quorum operation; send it \
                 with .run_on(connection) to the Redis that keeps the resource",
            )),
            Fenced::NotEmbedded(name) => Err(LockError::InvalidWrite {
                resource: format!("{} (command {name})", self.resource),
                message: NOT_EMBEDDED,
            }),
        }
    }

    fn invalid(&self, message: &'static str) -> LockError {
        LockError::InvalidWrite {
            resource: self.resource.clone(),
            message,
        }
    }
}

/// A fenced write's error from the backend's: a [`LockError::Backend`]
/// becomes [`LockError::WriteFailed`], which says what ran.
fn write_failed(error: LockError) -> LockError {
    match error {
        LockError::Backend { key, node, source } => LockError::WriteFailed {
            resource: key,
            node,
            ran: write_ran(&source),
            source,
        },
        other => other,
    }
}

/// What happened to a fenced write's commands, by its error: refused
/// before it was sent (a refused connection) or by the server before the
/// script ran (an answer that is not the script's: `NOPERM` for
/// `EVALSHA`, `READONLY`, a redirect, `BUSY`...), none; a command's error
/// inside the script (the server words it with "script"), the commands
/// before it; any other loss of the answer, unknown.
fn write_ran(source: &redis::RedisError) -> WriteRan {
    if source.is_connection_refusal() {
        return WriteRan::No;
    }
    match (source.code(), source.detail()) {
        (Some(_), Some(detail)) if detail.contains("script") => WriteRan::Partly,
        (Some(_), _) => WriteRan::No,
        (None, _) => WriteRan::Unknown,
    }
}

/// Why a resource that is one hash tag around an untagged name is refused.
const SHARED_FENCE: &str = "a resource that is one hash tag around a name, {x}, keeps its \
     fence at {x}:fence, where the resource x keeps its own: a holder of one lock would refuse \
     the other's writes; name the resource x (the same hash slot), or put the tag inside a \
     longer name ({x}:data)";

/// Why a command that could reset the fence is refused.
const REFUSED_COMMAND: &str = "a fenced write's command may not name the resource's fence key \
     as a key (deleting or overwriting it would let an older token write), nor be FLUSHALL, \
     FLUSHDB or SWAPDB (which erase or move it with the rest); give the data keys as keys, and \
     keep the fence key out of them";

/// Why the embedded backend refused a command (its list is
/// `backend::fenced::EMBEDDED_COMMANDS`).
const NOT_EMBEDDED: &str = "the embedded backend carries only SET, DEL, INCRBY, HSET, HDEL, \
     HINCRBY, RPUSH and PEXPIRE in a fenced write; use a real Redis for other commands";
