//! Who owns a lock: the dynamic extent of the body that took it.
//!
//! Each locked body runs with its [`HeldLock`] as a task-local value; each
//! held lock links to the one around it. A locked call made inside such a
//! body (in the same task) finds its key in that chain and re-enters without
//! a round trip to the backend; the first locked call of a chain creates the
//! owner id that the nested calls share. A spawned task, or a sibling future
//! joined next to the body, sees no chain and is a different owner.

use std::fmt::{self, Write as _};
use std::future::Future;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

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

/// Runs `f` (one poll of a locked body) with `held` as the innermost lock.
pub(crate) fn within<R>(held: &Arc<HeldLock>, f: impl FnOnce() -> R) -> R {
    CURRENT.sync_scope(held.clone(), f)
}

/// Runs `f` (dropping a locked body) with `held` as the innermost lock, as
/// its polls ran, when the task-local can still be set; without it when the
/// thread's locals are being destroyed (a runtime dropped at thread exit),
/// where [`within`] would panic inside a destructor.
pub(crate) fn drop_within(held: &Arc<HeldLock>, f: impl FnOnce()) {
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
    drop(CURRENT.scope(held.clone(), OnDrop(Some(f))));
}

/// An owner id as the backend knows it: `<client id>:<n>`, where `n`
/// numbers the owners (outermost locked calls) of the client.
///
/// Written on the stack when a request needs it: a held lock keeps only its
/// owner's number, and taking a lock allocates no id.
#[derive(Clone, Copy)]
pub(crate) struct OwnerId {
    len: u8,
    bytes: [u8; OwnerId::CAPACITY],
}

impl OwnerId {
    /// A client id (a UUID in 32 hex digits), a colon and a `u64`.
    const CAPACITY: usize = 32 + 1 + 20;

    pub(crate) fn new(client: &str, n: u64) -> Self {
        let mut id = OwnerId {
            len: 0,
            bytes: [0; Self::CAPACITY],
        };
        write!(id, "{client}:{n}").expect("a client id is 32 characters");
        id
    }
}

impl fmt::Write for OwnerId {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let start = usize::from(self.len);
        let end = start + s.len();
        let to = self.bytes.get_mut(start..end).ok_or(fmt::Error)?;
        to.copy_from_slice(s.as_bytes());
        self.len = u8::try_from(end).map_err(|_| fmt::Error)?;
        Ok(())
    }
}

impl Deref for OwnerId {
    type Target = str;

    fn deref(&self) -> &str {
        // Only whole `str`s are written.
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).expect("UTF-8")
    }
}

#[cfg(test)]
mod tests {
    use super::OwnerId;

    #[test]
    fn the_longest_owner_id_fits() {
        let client = "0123456789abcdef0123456789abcdef";
        let id = OwnerId::new(client, u64::MAX);
        assert_eq!(&*id, format!("{client}:{}", u64::MAX));
        assert_eq!(&*OwnerId::new(client, 7), format!("{client}:7"));
    }
}
