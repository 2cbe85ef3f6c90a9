//! The operator's calls on whatever the client has: read a lock as it is,
//! and free it whoever holds it. Not on a lock call's path.

use super::{Backend, Routed};
use crate::io::polled_on;
use crate::kind::admin::{force_node, inspect_node, LockView};
use crate::kind::quorum;
use crate::route::BackendError;

impl Backend {
    /// The lock at `key` (a full key) as the backend keeps it now; on
    /// Redlock, as a quorum of the nodes keeps it.
    pub(crate) async fn inspect(&self, key: &str) -> Result<LockView, BackendError> {
        match self.routed() {
            Routed::Scripts(route) => Ok(inspect_node(&route, key).await?),
            Routed::Quorum(b) => polled_on(b.home(), quorum::inspect(b, key)).await,
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
            Routed::Quorum(b) => polled_on(b.home(), quorum::force_unlock(b, key, client_id)).await,
        }
    }
}
