//! The global client that the attribute uses.

use std::sync::OnceLock;

use crate::{LockClient, LockError};

static GLOBAL: OnceLock<LockClient> = OnceLock::new();

/// Installs the client that `#[distributed_lock]` and [`crate::run_locked`]
/// use. Call it once, at start-up.
///
/// # Errors
/// [`LockError::AlreadyInitialized`] when a client is installed already; the
/// first one stays.
pub fn init(client: LockClient) -> Result<(), LockError> {
    GLOBAL
        .set(client)
        .map_err(|_| LockError::AlreadyInitialized)
}

/// The installed client.
///
/// # Errors
/// [`LockError::NotInitialized`] before [`init`].
pub fn client() -> Result<&'static LockClient, LockError> {
    GLOBAL.get().ok_or(LockError::NotInitialized)
}
