//! The one error type of the crate.

use std::time::Duration;

/// Why a locked call did not run, or did not finish, under its lock.
///
/// Annotated functions return `Result<T, E>` with `E: From<LockError>`, so every
/// variant reaches the caller as `Err(E::from(lock_error))`. The variants that
/// concern one lock name its full Redis key (prefix included).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// No global client was installed: call [`crate::init`] at start-up.
    #[error("no lock client is installed: call lock_runtime::init(client) at start-up")]
    NotInitialized,

    /// [`crate::init`] was called a second time; the first client stays installed.
    #[error("a lock client is already installed: lock_runtime::init may be called once")]
    AlreadyInitialized,

    /// The lock was held by another owner for the whole `wait`.
    #[error("timed out after {waited:?} waiting for lock `{key}`")]
    Timeout {
        /// The lock's key.
        key: String,
        /// How long the call waited.
        waited: Duration,
    },

    /// The lock was lost while the body ran; the body was stopped there.
    #[error("lock `{key}` was lost while held: {reason}")]
    Lost {
        /// The lock's key.
        key: String,
        /// What showed the loss.
        reason: LossReason,
    },

    /// The backend failed (connection refused, timeout, server error) while
    /// acquiring the lock.
    #[error("lock `{key}`: backend error")]
    Backend {
        /// The lock's key.
        key: String,
        /// The error the backend returned.
        #[source]
        source: redis::RedisError,
    },

    /// Too few Redlock nodes answered to decide: each failure names its node.
    #[error("lock `{key}`: {reached} of the {needed} Redis nodes needed for a quorum answered; {}", NodeFailure::list(.failures))]
    NoQuorum {
        /// The lock's key.
        key: String,
        /// How many nodes a quorum needs.
        needed: usize,
        /// How many answered.
        reached: usize,
        /// The nodes that did not answer, and why.
        failures: Vec<NodeFailure>,
    },

    /// Fewer replicas than [`sync_replicas`](crate::LockClientBuilder::sync_replicas)
    /// asks for acknowledged the lock's write within its timeout: the lock
    /// was released (or is left to its lease) and the body did not run.
    #[error("lock `{key}`: {acked} of the {needed} replicas asked for acknowledged the lock within {timeout:?}; it was released")]
    NotReplicated {
        /// The lock's key.
        key: String,
        /// How many replicas had to acknowledge it.
        needed: usize,
        /// How many did.
        acked: usize,
        /// How long the call waited for them.
        timeout: Duration,
    },

    /// The client could not connect to or talk to Redis. The message names
    /// the node (without credentials) and the cause.
    #[error("cannot connect to Redis: {0}")]
    Connect(#[source] redis::RedisError),

    /// A key or an option was not valid at run time (for example an empty key
    /// or a zero lease given to the programmatic form).
    #[error("invalid lock `{key}`: {message}")]
    Invalid {
        /// The lock's key.
        key: String,
        /// What is wrong with it.
        message: &'static str,
    },
}

/// What showed that a held lock was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossReason {
    /// A renewal or the release found the lock gone (erased, or expired in
    /// Redis) or held by another owner.
    Taken,
    /// The lease ran out with no successful renewal (Redis unreachable, or
    /// `renew = false` and the body outran its lease).
    Expired,
    /// The body finished, but its release could not reach Redis (twice), so
    /// whether the lock was held to the end is not known: Redis may have
    /// restarted and forgotten it while the body ran.
    Unconfirmed,
}

impl std::fmt::Display for LossReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LossReason::Taken => "a renewal found it gone or held by another owner",
            LossReason::Expired => "its lease ran out before a renewal succeeded",
            LossReason::Unconfirmed => {
                "its release could not reach Redis, so it may not have been held to the end"
            }
        })
    }
}

impl LockError {
    /// The full key of the lock this error concerns, if it concerns one.
    pub fn key(&self) -> Option<&str> {
        match self {
            LockError::Timeout { key, .. }
            | LockError::Lost { key, .. }
            | LockError::Backend { key, .. }
            | LockError::NoQuorum { key, .. }
            | LockError::NotReplicated { key, .. }
            | LockError::Invalid { key, .. } => Some(key),
            _ => None,
        }
    }
}

/// One Redis node that failed a Redlock operation.
#[derive(Debug)]
pub struct NodeFailure {
    /// The node, as its URL without credentials.
    pub node: String,
    /// What went wrong: the error, or a timeout.
    pub error: redis::RedisError,
}

impl NodeFailure {
    pub(crate) fn list(failures: &[NodeFailure]) -> String {
        let parts: Vec<String> = failures
            .iter()
            .map(|f| format!("{}: {}", f.node, f.error))
            .collect();
        parts.join("; ")
    }
}
