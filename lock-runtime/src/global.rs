//! The client that the attribute and [`crate::run_locked`] use: the one
//! installed with [`init`], or, inside [`with_client`], a scoped one.

use std::future::Future;
use std::sync::OnceLock;

use crate::client::{ClientRef, LockClient};
use crate::error::LockError;

static GLOBAL: OnceLock<LockClient> = OnceLock::new();

tokio::task_local! {
    static SCOPED: LockClient;
}

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

/// The installed client (the one [`init`] installed; not a scoped one of
/// [`with_client`]).
///
/// # Errors
/// [`LockError::NotInitialized`] before [`init`].
pub fn client() -> Result<&'static LockClient, LockError> {
    GLOBAL.get().ok_or(LockError::NotInitialized)
}

/// Runs `future` with `client` in place of the global client: every
/// annotated call without `client = ...`, and every [`crate::run_locked`],
/// polled inside `future` locks on `client`. A call picks its client when
/// it is first polled, not when it is made, so a call made outside and
/// passed in, `with_client(client, pay(7))` or
/// `with_client(client, lock_runtime::run_locked(..))`, locks on `client`
/// too. For tests: each test, also among tests run in parallel in one
/// process, gets a client of its own, with no [`init`].
///
/// The scope is the future's task, as a tokio task-local value: a task
/// spawned inside `future` does not see it (it uses the global client, or
/// fails with [`LockError::NotInitialized`]); wrap what you spawn as well,
/// `tokio::spawn(with_client(client.clone(), task))`. Scopes nest: the
/// innermost wins. [`client`] still answers the global client.
///
/// ```
/// use lock_runtime::{distributed_lock, with_client, LockClient, LockError, LockOptions};
///
/// #[distributed_lock(key = "order:<id>")]
/// async fn pay(id: u64) -> Result<u64, LockError> {
///     Ok(id)
/// }
///
/// #[tokio::main]
/// async fn main() -> Result<(), LockError> {
///     // No `init`: in a test, each test makes its own client.
///     let client = LockClient::in_memory();
///     assert_eq!(with_client(client.clone(), pay(7)).await?, 7);
///     let refund = lock_runtime::run_locked("order:7", LockOptions::new(), async { Ok(1) });
///     assert_eq!(with_client(client, refund).await?, 1);
///     assert!(matches!(pay(7).await, Err(LockError::NotInitialized)));
///     Ok(())
/// }
/// ```
pub fn with_client<F: Future>(client: LockClient, future: F) -> impl Future<Output = F::Output> {
    SCOPED.scope(client, future)
}

/// The client an annotated call uses: the scoped one, else the global one.
pub(crate) fn in_use() -> Result<ClientRef<'static>, LockError> {
    if let Ok(scoped) = SCOPED.try_with(LockClient::clone) {
        return Ok(ClientRef::Owned(scoped));
    }
    client().map(ClientRef::Borrowed)
}
