//! Giving back what an acquire request may have taken (a lock, a set's
//! keys, a place in a line) when its caller will not hold it: the request
//! was in flight when the call was dropped, failed with its outcome
//! unknown, or kept a place that the call gave up. One path for one key and
//! for a set: in the background, key by key, first on the call's lane, then
//! on the client's connection where that fails; this client's waiters on
//! each key try again after.

use futures_util::future::join_all;
use tokio::task::JoinHandle;

use crate::client::LockClient;
use crate::kind::Claim;
use crate::owner_id::OwnerId;
use crate::route::Lane;

/// Releases each of `holds` (a key and the acquisition that asked for it)
/// in the background. The requests were of `claim`, and may have taken the
/// locks or places in their lines (a release withdraws a place too), so a
/// route that fails over keeps the releases as long as either lives.
pub(super) fn later(
    client: &LockClient,
    lane: &Lane,
    holds: Vec<(String, OwnerId)>,
    claim: Claim,
) -> JoinHandle<()> {
    let owned = client.clone();
    let lane = lane.clone();
    let kind_lease = (claim.kind, claim.give_back_lease(), None);
    client.inner.io.spawn(async move {
        let backend = &owned.inner.backend;
        let releases = holds.iter().map(|(key, owner)| async {
            let hold = (&**owner, 0);
            if backend.release(&lane, key, hold, kind_lease).await.is_err() {
                // The caller's runtime, which drives a local connection, has
                // ended or does not run, or the connection broke: by now the
                // request has landed or never will, so the client's
                // connection can follow it.
                let _ = backend.release(&Lane::Home, key, hold, kind_lease).await;
            }
            // What it gave back (a place in a line holding readers back,
            // say) may let this client's waiters in; its notice skips this
            // client.
            owned.inner.waiters.wake_release(key.as_bytes(), 0);
        });
        join_all(releases).await;
    })
}

/// Gives back, by calling its function, when dropped while `armed`: a
/// request in flight when the call is dropped, or a place in a line that
/// the call gave up.
pub(super) struct OnDrop<F: FnOnce()> {
    give_back: Option<F>,
    /// Whether dropping it gives back.
    pub armed: bool,
}

impl<F: FnOnce()> OnDrop<F> {
    /// Armed as `armed` says, giving back by `give_back`.
    pub(super) fn new(armed: bool, give_back: F) -> Self {
        OnDrop {
            give_back: Some(give_back),
            armed,
        }
    }
}

impl<F: FnOnce()> Drop for OnDrop<F> {
    fn drop(&mut self) {
        if let (true, Some(give_back)) = (self.armed, self.give_back.take()) {
            give_back();
        }
    }
}
