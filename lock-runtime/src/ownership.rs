//! Who owns a lock: the dynamic extent of the body that took it.
//!
//! Each locked body runs with its chain of held locks as a task-local value
//! ([`Frame`], innermost first). A locked call made inside such a body (in
//! the same task, on the same client) finds its key in that chain and
//! re-enters without a round trip to the backend; its body runs with a frame
//! of its own on top, so that [`crate::fencing_token`] answers for its lock.
//! Calls that re-enter one frame side by side take turns (see
//! [`crate::turn`]). Every call that takes a lock is an acquisition of its
//! own, with an owner id of its own: a spawned task sees no chain and is a
//! different owner.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::held::{Frame, HeldLock};
use crate::owner_id::ClientTag;

tokio::task_local! {
    static CURRENT: Frame;
}

/// The first frame in the running body's chain, innermost first, whose
/// held lock `matches`.
fn find(matches: impl Fn(&HeldLock) -> bool) -> Option<Frame> {
    CURRENT
        .try_with(|innermost| {
            let mut next = Some(innermost);
            while let Some(frame) = next {
                if matches(frame.held()) {
                    return Some(frame.clone());
                }
                next = frame.parent();
            }
            None
        })
        .ok()
        .flatten()
}

/// The nearest frame of the running body's chain that holds the lock `key`
/// (full key) of `client`, if there is one.
pub(crate) fn held(client: &Arc<ClientTag>, key: &str) -> Option<Frame> {
    find(|held| &*held.key == key && Arc::ptr_eq(&held.client, client))
}

/// A lock `key` (full key) that the running body holds through another
/// client that keeps its locks in the same place as `client`.
pub(crate) fn held_elsewhere(client: &Arc<ClientTag>, key: &str) -> bool {
    find(|held| {
        &*held.key == key && held.client.place == client.place && !Arc::ptr_eq(&held.client, client)
    })
    .is_some()
}

/// The nearest frame holding the lock on `key` (as the caller wrote it,
/// without prefix) in the running body's chain.
pub(crate) fn held_user_key(key: &str) -> Option<Frame> {
    find(|held| held.user_key() == key)
}

/// The running body's chain: the parent of a lock taken now.
pub(crate) fn innermost() -> Option<Frame> {
    CURRENT.try_with(Frame::clone).ok()
}

/// Runs `f` (one poll of a locked body) with `frame` as the innermost.
pub(crate) fn within<R>(frame: &Frame, f: impl FnOnce() -> R) -> R {
    CURRENT.sync_scope(frame.clone(), f)
}

/// Runs `f` (dropping a locked body) with `frame` as the innermost, as its
/// polls ran, when the task-local can still be set; without it when the
/// thread's locals are being destroyed (a runtime dropped at thread exit),
/// where [`within`] would panic inside a destructor.
pub(crate) fn drop_within(frame: &Frame, f: impl FnOnce()) {
    /// Runs its closure when dropped; never polled.
    struct OnDrop<F: FnOnce()>(Option<F>);

    impl<F: FnOnce()> Future for OnDrop<F> {
        type Output = ();

        fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
            Poll::Ready(())
        }
    }

    impl<F: FnOnce()> Drop for OnDrop<F> {
        fn drop(&mut self) {
            if let Some(f) = self.0.take() {
                f();
            }
        }
    }

    // tokio's scope drops an unfinished future inside the scope when it can,
    // and outside it, without panicking, when it cannot.
    drop(CURRENT.scope(frame.clone(), OnDrop(Some(f))));
}
