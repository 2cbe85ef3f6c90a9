//! Fenced writes on one route: the user's commands on a resource, run by
//! `lua/fenced/write.lua` only for a token at least the highest that wrote
//! the resource (see `docs/redis-layout.md`, "Fenced writes"). Not a lock
//! operation: no lock is read or written.

use std::sync::LazyLock;

use ::redis::{Cmd, RedisError, Script, Value};

use super::sources;
use crate::replica_sync::ReplicaSync;
use crate::route::{Lane, Route, ScriptCall};

static WRITE: LazyLock<Script> = LazyLock::new(|| Script::new(sources::FENCED_WRITE));

/// One of the user's commands: its name, its keys, its other arguments.
#[derive(Debug, Clone)]
pub(crate) struct Command {
    pub name: String,
    pub keys: Vec<String>,
    pub args: Vec<Vec<u8>>,
}

/// What a fenced write came to.
#[derive(Debug)]
pub(crate) enum Written {
    /// The commands ran: their replies, in order.
    Ran(Vec<Value>),
    /// The resource was written with a larger token: nothing ran.
    Refused { stored: u64, given: u64 },
    /// The keys (the fence key's included) are in more than one hash slot.
    ManySlots,
    /// The commands ran on the master (their replies), but fewer replicas
    /// than `sync` asks acknowledged them in time (`acked`); the call took
    /// `took`.
    Unsynced {
        replies: Vec<Value>,
        acked: usize,
        sync: ReplicaSync,
        took: std::time::Duration,
    },
}

/// The key that keeps the highest token that wrote `resource`, in its hash
/// slot: `<resource>:fence` when the resource names a hash tag (`{...}`
/// with something inside), else `{<resource>}:fence`.
pub(crate) fn fence_key(resource: &str) -> String {
    if tagged(resource) {
        format!("{resource}:fence")
    } else {
        format!("{{{resource}}}:fence")
    }
}

/// Whether `resource` names a hash tag: `{...}` with something inside.
fn tagged(resource: &str) -> bool {
    resource
        .find('{')
        .and_then(|open| resource[open + 1..].find('}'))
        .is_some_and(|len| len > 0)
}

/// The other resource whose fence key is `resource`'s, if one can be: a
/// resource that is one hash tag around an untagged name, `{x}` (and
/// `{a}b}`), keeps its fence at `{x}:fence`, where the untagged `x` keeps
/// its own. Such a resource is refused (see [`FencedWrite`]): moving either
/// fence key would let a stale token write through the other during an
/// upgrade.
///
/// [`FencedWrite`]: crate::FencedWrite
pub(crate) fn shares_fence(resource: &str) -> Option<&str> {
    let inner = resource.strip_prefix('{')?.strip_suffix('}')?;
    (tagged(resource) && !tagged(inner)).then_some(inner)
}

/// The keyless commands that change data beyond the resource's keys, which
/// a fenced write refuses (a `FLUSHDB` would erase the fence with the rest).
pub(crate) const KEYLESS_WRITES: [&str; 3] = ["FLUSHALL", "FLUSHDB", "SWAPDB"];

/// Why `commands` may not run in a fenced write on `resource`, if they may
/// not: a command that names the fence key as a key (a `DEL` of it would
/// reset the fence, and let an older token write), or a keyless command of
/// [`KEYLESS_WRITES`]. The script refuses both too.
pub(crate) fn refused_command<'c>(resource: &str, commands: &'c [Command]) -> Option<&'c str> {
    let fence = fence_key(resource);
    commands
        .iter()
        .find(|c| {
            c.keys.contains(&fence)
                || KEYLESS_WRITES
                    .iter()
                    .any(|name| c.name.eq_ignore_ascii_case(name))
        })
        .map(|c| c.name.as_str())
}

/// Runs `commands` on `resource` with `token` on `route`; with
/// `sync_replicas`, then waits for the replicas as an acquire does.
pub(crate) async fn write(
    route: &impl Route,
    resource: &str,
    token: u64,
    commands: &[Command],
) -> Result<Written, RedisError> {
    let fence = fence_key(resource);
    let mut keys: Vec<&str> = vec![&fence];
    keys.extend(
        commands
            .iter()
            .flat_map(|c| c.keys.iter().map(String::as_str)),
    );
    if route.script_groups(&keys).len() > 1 {
        return Ok(Written::ManySlots);
    }
    let mut cmd = Cmd::new();
    cmd.arg("EVALSHA").arg(WRITE.get_hash()).arg(keys.len());
    cmd.arg(&keys[..])
        .arg(token)
        .arg(resource)
        .arg(commands.len());
    for c in commands {
        cmd.arg(&c.name).arg(c.keys.len()).arg(c.args.len());
        for arg in &c.args {
            cmd.arg(&arg[..]);
        }
    }
    let call = ScriptCall {
        script: &WRITE,
        key: &fence,
        cmd,
        replay: None,
        coalesce: None,
    };
    let answer = match route.sync() {
        None => route.run::<Vec<Value>>(&Lane::Home, &call).await,
        Some(sync) => {
            let sent = std::time::Instant::now();
            match route.run_synced(call, None).await {
                Ok((replies, acked)) if acked < sync.replicas => {
                    let replies = ::redis::from_redis_value(replies).map_err(RedisError::from)?;
                    return Ok(Written::Unsynced {
                        replies,
                        acked,
                        sync,
                        took: sent.elapsed(),
                    });
                }
                Ok((replies, _)) => ::redis::from_redis_value(replies).map_err(RedisError::from),
                Err(e) => Err(e),
            }
        }
    };
    match answer {
        Ok(replies) => Ok(Written::Ran(replies)),
        Err(e) => refusal(&e).ok_or(e),
    }
}

/// Runs `commands` on `resource` with `token` on a connection of the
/// user's (any node or cluster connection `redis` offers): the script is
/// loaded there if the server does not have it. No slot check: a Cluster
/// connection answers `CROSSSLOT` for keys of several slots.
pub(crate) async fn write_on<C>(
    con: &mut C,
    resource: &str,
    token: u64,
    commands: &[Command],
) -> Result<Written, RedisError>
where
    C: ::redis::aio::ConnectionLike + Send,
{
    let mut call = WRITE.key(fence_key(resource));
    for key in commands.iter().flat_map(|c| &c.keys) {
        call.key(key);
    }
    call.arg(token).arg(resource).arg(commands.len());
    for c in commands {
        call.arg(&c.name).arg(c.keys.len()).arg(c.args.len());
        for arg in &c.args {
            call.arg(&arg[..]);
        }
    }
    match call.invoke_async::<Vec<Value>>(con).await {
        Ok(replies) => Ok(Written::Ran(replies)),
        Err(e) => refusal(&e).ok_or(e),
    }
}

/// The refusal `LOCKFENCED <resource> <stored> <given>`, if `e` is one.
fn refusal(e: &RedisError) -> Option<Written> {
    if e.code() != Some("LOCKFENCED") {
        return None;
    }
    let mut words = e.detail()?.rsplit(' ');
    let given = words.next()?.parse().ok()?;
    let stored = words.next()?.parse().ok()?;
    Some(Written::Refused { stored, given })
}

#[cfg(test)]
mod tests {
    use super::{fence_key, shares_fence};

    #[test]
    fn a_resource_that_shares_its_fence_key_is_found() {
        let pairs = [
            ("{x}", "x"),
            ("{a}b}", "a}b"),
            ("{a}{b}", "a}{b"),
            ("{account:7}", "account:7"),
        ];
        for (resource, other) in pairs {
            assert_eq!(shares_fence(resource), Some(other), "{resource}");
            assert_eq!(fence_key(resource), fence_key(other));
        }
        for resource in ["x", "{x}:data", "{{a}}", "{}", "a}b", "{a{b}c}"] {
            assert_eq!(shares_fence(resource), None, "{resource}");
        }
        // `{a{b}c}` wraps `a{b}c`, which is tagged (`b`): their fence keys
        // differ.
        assert_ne!(fence_key("{a{b}c}"), fence_key("a{b}c"));
    }

    #[test]
    fn the_fence_key_is_in_the_resource_slot() {
        assert_eq!(fence_key("account:7"), "{account:7}:fence");
        assert_eq!(
            fence_key("{account:7}:balance"),
            "{account:7}:balance:fence"
        );
        // An empty tag is no tag: Redis hashes the whole name, which no
        // other key shares (such a resource is refused on Cluster).
        assert_eq!(fence_key("a{}b"), "{a{}b}:fence");
    }
}
