//! Who owns a lock: the dynamic extent of the body that took it.
//!
//! Each locked body runs with its [`HeldLock`] as a task-local value; each
//! held lock links to the one around it. A locked call made inside such a
//! body (in the same task) finds its key in that chain and re-enters without
//! a round trip to the backend; the first locked call of a chain creates the
//! owner id that the nested calls share. A spawned task, or a sibling future
//! joined next to the body, sees no chain and is a different owner.

use std::future::Future;
use std::sync::Arc;

use crate::held::HeldLock;

tokio::task_local! {
    static CURRENT: Arc<HeldLock>;
}

/// The first held lock in the running body's chain, innermost first, that
/// `matches`.
fn find(matches: impl Fn(&HeldLock) -> bool) -> Option<Arc<HeldLock>> {
    CURRENT
        .try_with(|innermost| {
            let mut next = Some(innermost);
            while let Some(held) = next {
                if matches(held) {
                    return Some(held.clone());
                }
                next = held.parent.as_ref();
            }
            None
        })
        .ok()
        .flatten()
}

/// The lock `key` (full key) of `client` if the running body holds it.
pub(crate) fn held(client: &str, key: &str) -> Option<Arc<HeldLock>> {
    find(|held| &*held.key == key && &*held.client == client)
}

/// The lock on `key` (as the caller wrote it, without prefix) held by the
/// running body, innermost first.
pub(crate) fn held_user_key(key: &str) -> Option<Arc<HeldLock>> {
    find(|held| held.user_key() == key)
}

/// The innermost lock held by the running body, if any: the parent of a
/// lock taken now.
pub(crate) fn innermost() -> Option<Arc<HeldLock>> {
    CURRENT.try_with(Arc::clone).ok()
}

/// Runs `body` with `held` as the innermost lock.
pub(crate) fn enter<F: Future>(held: Arc<HeldLock>, body: F) -> impl Future<Output = F::Output> {
    CURRENT.scope(held, body)
}
