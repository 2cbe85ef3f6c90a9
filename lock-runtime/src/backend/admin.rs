//! The operator's calls on whatever the client has: read a lock as it is,
//! and free it whoever holds it. Not on a lock call's path.

use super::Backend;
use crate::io::polled_on;
use crate::kind::admin::{force_node, inspect_node, LockView};
use crate::kind::quorum;
use crate::route::BackendError;

impl Backend {
    /// The lock at `key` (a full key) as the backend keeps it now; on
    /// Redlock, as a quorum of the nodes keeps it.
    pub(crate) async fn inspect(&self, key: &str) -> Result<LockView, BackendError> {
        on_route!(self,
            route => Ok(inspect_node(route, key).await?),
            nodes => polled_on(nodes.home(), quorum::inspect(nodes, key)).await)
    }

    /// Frees the lock at `key` whoever holds it, and publishes its release
    /// (with `client_id` as the releasing client); the freed hold's fencing
    /// token, or `None` when it was not held (on Redlock: by any node).
    pub(crate) async fn force_unlock(
        &self,
        key: &str,
        client_id: &str,
    ) -> Result<Option<u64>, BackendError> {
        on_route!(self,
            route => Ok(force_node(route, key, client_id).await?),
            nodes => polled_on(nodes.home(), quorum::force_unlock(nodes, key, client_id)).await)
    }
}
