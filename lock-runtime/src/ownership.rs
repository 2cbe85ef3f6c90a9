//! Who owns a lock: the dynamic extent of the body that took it.
//!
//! Each locked body runs inside a task-local [`Frame`] that names the lock it
//! holds and links to the frames around it. A locked call made inside such a
//! body (in the same task) finds its key in the chain and re-enters without a
//! round trip to the backend; the first locked call of a chain creates the
//! owner id that the nested calls share. A spawned task, or a sibling future
//! joined next to the body, sees no frame and is a different owner.

use std::future::Future;
use std::sync::Arc;

use crate::held::HeldLock;

tokio::task_local! {
    static CURRENT: Arc<Frame>;
}

/// One held lock in the chain of the running body.
pub(crate) struct Frame {
    /// Which client took the lock (its id): keys are per client.
    pub client: Arc<str>,
    pub held: Arc<HeldLock>,
    parent: Option<Arc<Frame>>,
}

/// The lock `key` of `client` if the running body already holds it.
pub(crate) fn held(client: &str, key: &str) -> Option<Arc<HeldLock>> {
    CURRENT
        .try_with(|frame| {
            let mut next = Some(frame);
            while let Some(frame) = next {
                if &*frame.held.key == key && &*frame.client == client {
                    return Some(frame.held.clone());
                }
                next = frame.parent.as_ref();
            }
            None
        })
        .ok()
        .flatten()
}

/// The owner id of the running body's chain, if it runs under a lock.
pub(crate) fn current_owner() -> Option<Arc<str>> {
    CURRENT.try_with(|frame| frame.held.owner.clone()).ok()
}

/// Runs `body` with `held` pushed on the chain.
pub(crate) fn enter<F: Future>(
    client: Arc<str>,
    held: Arc<HeldLock>,
    body: F,
) -> impl Future<Output = F::Output> {
    let parent = CURRENT.try_with(Arc::clone).ok();
    let frame = Arc::new(Frame {
        client,
        held,
        parent,
    });
    CURRENT.scope(frame, body)
}

/// The innermost lock held by the running body, if any.
pub(crate) fn innermost() -> Option<Arc<HeldLock>> {
    CURRENT.try_with(|frame| frame.held.clone()).ok()
}

/// The lock on `key` (as the caller wrote it, without prefix) held by the
/// running body, innermost first.
pub(crate) fn held_user_key(key: &str) -> Option<Arc<HeldLock>> {
    CURRENT
        .try_with(|frame| {
            let mut next = Some(frame);
            while let Some(frame) = next {
                if frame.held.user_key() == key {
                    return Some(frame.held.clone());
                }
                next = frame.parent.as_ref();
            }
            None
        })
        .ok()
        .flatten()
}
