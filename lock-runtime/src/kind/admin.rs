//! The operator's side of the exclusive lock on one route: read a lock as
//! it is, and free it whoever holds it (on Redlock, `quorum.rs` combines
//! the nodes' answers). Not on a lock call's path.

use std::sync::LazyLock;
use std::time::Duration;

use ::redis::{ErrorKind, RedisError, Script};

use super::calls::ReleaseScripts;
use super::sources;
use crate::route::{Lane, Route, ScriptCall};

static INSPECT: LazyLock<Script> = LazyLock::new(|| Script::new(sources::INSPECT));
/// Frees a lock whoever holds it; publishes its notice (by `SPUBLISH` on
/// Cluster).
static FORCE_UNLOCK: ReleaseScripts = ReleaseScripts::new(sources::FORCE_UNLOCK);

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

/// The lock at `key` on the node `route` sends it to.
pub(crate) async fn inspect_node(route: &impl Route, key: &str) -> Result<LockView, RedisError> {
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

/// Frees the lock at `key` on the node `route` sends it to.
pub(crate) async fn force_node(
    route: &impl Route,
    key: &str,
    client_id: &str,
) -> Result<Option<u64>, RedisError> {
    let script = FORCE_UNLOCK.of(route.notices());
    let call = ScriptCall::new(script, key, client_id, client_id.len());
    let token: u64 = route.run(&Lane::Home, &call).await?;
    Ok((token > 0).then_some(token))
}

#[cfg(test)]
mod tests {
    use crate::route::Notices;

    #[test]
    fn the_sharded_force_unlock_publishes_by_spublish() {
        let (plain, sharded) = (Notices::Plain, Notices::Sharded);
        assert!(
            super::FORCE_UNLOCK.of(sharded).get_hash() != super::FORCE_UNLOCK.of(plain).get_hash()
        );
    }
}
