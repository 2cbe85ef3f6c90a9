//! The operator's side of the exclusive lock: read a lock as it is, and
//! free it whoever holds it. Not on a lock call's path.

use std::sync::LazyLock;
use std::time::Duration;

use ::redis::{ErrorKind, RedisError, Script};

use super::{exclusive, sources};
use crate::io::polled_on;
use crate::route::redlock::RedlockBackend;
use crate::route::{Backend, BackendError, Lane, Notices, Route, Routed, ScriptCall};

static INSPECT: LazyLock<Script> = LazyLock::new(|| Script::new(sources::INSPECT));
static FORCE_UNLOCK: LazyLock<Script> = LazyLock::new(|| Script::new(sources::FORCE_UNLOCK));
/// On Cluster, the release notice goes out by sharded pub/sub.
static FORCE_UNLOCK_SHARDED: LazyLock<Script> =
    LazyLock::new(|| Script::new(&exclusive::sharded(sources::FORCE_UNLOCK)));

/// What one node (or a Redlock quorum) keeps at a lock's key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeLock {
    /// The last fencing token given for the key: the holder's, when held.
    pub fence: u64,
    /// The holder's owner id; `None` when the lock is free (a freed lock
    /// keeps its fence until its lease ends).
    pub owner: Option<String>,
    /// How long the key lives on; `None` when it has no expiry.
    pub ttl: Option<Duration>,
}

/// What the backend keeps at a lock's key: `None` when nothing.
pub(crate) type LockView = Option<NodeLock>;

impl Backend {
    /// The lock at `key` (a full key) as the backend keeps it now; on
    /// Redlock, as a quorum of the nodes keeps it.
    pub(crate) async fn inspect(&self, key: &str) -> Result<LockView, BackendError> {
        match self.routed() {
            Routed::Scripts(route) => Ok(inspect_node(&route, key).await?),
            Routed::Quorum(b) => polled_on(b.home(), inspect_quorum(b, key)).await,
            Routed::Memory(b) => Ok(b.peek(key).map(|(owner, ttl, token)| NodeLock {
                fence: token,
                owner: Some(owner),
                ttl: Some(ttl),
            })),
        }
    }

    /// Frees the lock at `key` whoever holds it, and publishes its release
    /// (with `client_id` as the releasing client); the freed hold's fencing
    /// token, or `None` when it was not held (on Redlock: by any node).
    pub(crate) async fn force_unlock(
        &self,
        key: &str,
        client_id: &str,
    ) -> Result<Option<u64>, BackendError> {
        match self.routed() {
            Routed::Scripts(route) => Ok(force_node(&route, key, client_id).await?),
            Routed::Quorum(b) => polled_on(b.home(), force_quorum(b, key, client_id)).await,
            Routed::Memory(b) => Ok(b.force_free(key)),
        }
    }
}

/// The lock at `key` on the node `route` sends it to.
async fn inspect_node(route: &impl Route, key: &str) -> Result<LockView, RedisError> {
    let no_args: Vec<&str> = Vec::new();
    let call = ScriptCall::new(&INSPECT, key, no_args, 0);
    parse_view(route.run(&Lane::Home, &call).await?)
}

/// inspect.lua's answer: nothing, or `{fence, state, owner, pttl}`.
fn parse_view(parts: Vec<String>) -> Result<LockView, RedisError> {
    if parts.is_empty() {
        return Ok(None);
    }
    let parsed = match parts.as_slice() {
        [fence, state, owner, pttl] => {
            fence
                .parse()
                .ok()
                .zip(pttl.parse::<i64>().ok())
                .map(|(fence, pttl)| NodeLock {
                    fence,
                    owner: (state != "f").then(|| owner.clone()),
                    // -1: no expiry.
                    ttl: u64::try_from(pttl).ok().map(Duration::from_millis),
                })
        }
        _ => None,
    };
    parsed.map(Some).ok_or_else(|| {
        RedisError::from((
            ErrorKind::UnexpectedReturnType,
            "inspect.lua answered something else than {fence, state, owner, pttl}",
            format!("{parts:?}"),
        ))
    })
}

/// A Redlock lock is held by the owner that a quorum names, for as long as
/// a quorum keeps it (the quorum-th longest TTL among them); otherwise free.
/// The fence is the largest any node keeps.
async fn inspect_quorum(b: &RedlockBackend, key: &str) -> Result<LockView, BackendError> {
    let answers = b.on_all(|node| inspect_node(node, key)).await;
    let views: Vec<&LockView> = answers.iter().flatten().collect();
    if views.len() < b.quorum() {
        return Err(BackendError::NoQuorum {
            needed: b.quorum(),
            reached: views.len(),
            failures: b.failures(answers),
        });
    }
    let kept: Vec<&NodeLock> = views.iter().filter_map(|v| v.as_ref()).collect();
    let Some(fence) = kept.iter().map(|l| l.fence).max() else {
        return Ok(None);
    };
    for candidate in kept.iter().filter_map(|l| l.owner.as_deref()) {
        let mut ttls: Vec<Option<Duration>> = kept
            .iter()
            .filter(|l| l.owner.as_deref() == Some(candidate))
            .map(|l| l.ttl)
            .collect();
        if ttls.len() >= b.quorum() {
            // Longest first, no expiry longest of all.
            ttls.sort_by(|x, y| y.unwrap_or(Duration::MAX).cmp(&x.unwrap_or(Duration::MAX)));
            return Ok(Some(NodeLock {
                fence,
                owner: Some(candidate.to_owned()),
                ttl: ttls[b.quorum() - 1],
            }));
        }
    }
    Ok(Some(NodeLock {
        fence,
        owner: None,
        ttl: None,
    }))
}

/// Frees the lock at `key` on the node `route` sends it to.
async fn force_node(
    route: &impl Route,
    key: &str,
    client_id: &str,
) -> Result<Option<u64>, RedisError> {
    let script = match route.notices() {
        Notices::Plain => &FORCE_UNLOCK,
        Notices::Sharded => &FORCE_UNLOCK_SHARDED,
    };
    let call = ScriptCall::new(script, key, client_id, client_id.len());
    let token: u64 = route.run(&Lane::Home, &call).await?;
    Ok((token > 0).then_some(token))
}

/// Frees the lock on every node that answers; a quorum must answer.
async fn force_quorum(
    b: &RedlockBackend,
    key: &str,
    client_id: &str,
) -> Result<Option<u64>, BackendError> {
    let answers = b.on_all(|node| force_node(node, key, client_id)).await;
    let answered = answers.iter().filter(|a| a.is_ok()).count();
    if answered < b.quorum() {
        return Err(BackendError::NoQuorum {
            needed: b.quorum(),
            reached: answered,
            failures: b.failures(answers),
        });
    }
    Ok(answers.into_iter().flatten().flatten().max())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_sharded_force_unlock_publishes_by_spublish() {
        assert!(super::FORCE_UNLOCK_SHARDED.get_hash() != super::FORCE_UNLOCK.get_hash());
    }
}
