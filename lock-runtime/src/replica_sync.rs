//! Waiting for replicas after a write: `WAIT n timeout`.

use std::time::Duration;

/// How many replicas must have a lock's write before the call goes on, and
/// for how long to wait for them (see
/// [`LockClientBuilder::sync_replicas`](crate::LockClientBuilder::sync_replicas)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReplicaSync {
    /// Replicas that must acknowledge the write.
    pub replicas: usize,
    /// The longest wait for them.
    pub timeout: Duration,
}
