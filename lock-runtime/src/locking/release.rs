//! Giving a lock back, and what the release tells about the hold.

use std::sync::Arc;

use tracing::{Instrument, Span};

use crate::client::LockClient;
use crate::error::{FoundBy, LockError, LossReason};
use crate::held::{HeldLock, Loss};
use crate::kind::{Ended, Kind, Release};
use crate::route::Lane;
use crate::telemetry;

/// How a release ended.
#[derive(Debug)]
pub(crate) enum Released {
    /// The acquisition held the lock to the end; it is free now.
    Freed,
    /// The acquisition did not hold it any more, and what ended its hold.
    NotHeld(Ended),
    /// The release went unanswered (it may have run), and sent again found
    /// the lock not held, with no record that its own first send freed it
    /// (the record lapsed, or was never kept: the next holder came from
    /// this same client).
    NotHeldAfterUnanswered(Ended),
    /// Redis could not be reached, twice: whether the lock was still held
    /// is not known (it expires with its lease if it was).
    Unknown,
    /// Redis refused the release with an error that retrying does not cure
    /// (`NOPERM` from an ACL, say): it did reach Redis, nothing was freed,
    /// and the hold stays there until its lease ends.
    Refused(Box<LockError>),
}

impl Released {
    /// Whether the release freed the lock.
    pub(crate) fn is_freed(&self) -> bool {
        matches!(self, Released::Freed)
    }

    /// What a release that did not free `held` says of its hold: the body
    /// outlived its lease, an operator freed it, another owner took it, or
    /// it was erased while the body ran (a Redis restart, say, before any
    /// renewal could notice), or it is not known; `None` when it was freed.
    pub(crate) fn loss(&self, held: &HeldLock) -> Option<LossReason> {
        let expired = matches!(
            held.check_now(),
            Some(Loss {
                reason: LossReason::Expired,
                ..
            })
        );
        match self {
            Released::Freed | Released::Refused(_) => None,
            Released::NotHeld(Ended::ForceUnlocked)
            | Released::NotHeldAfterUnanswered(Ended::ForceUnlocked) => {
                Some(LossReason::ForceUnlocked)
            }
            _ if expired => Some(LossReason::Expired),
            Released::NotHeld(ended) => Some(ended.reason()),
            Released::NotHeldAfterUnanswered(_) => Some(LossReason::ReleaseUnanswered),
            Released::Unknown => Some(LossReason::Unconfirmed),
        }
    }
}

/// What a release that ended as `released` tells the call about `held`,
/// one key or each key of a set: nothing when it freed the hold; Redis's
/// refusal as it was (it reached Redis: not a loss); else the loss, marked
/// on the hold as every loss is (so that its listeners hear it) and traced.
pub(crate) fn verdict(held: &HeldLock, released: Released) -> Option<LockError> {
    if let Released::Refused(error) = released {
        return Some(*error);
    }
    let Some(reason) = released.loss(held) else {
        telemetry::released(held);
        return None;
    };
    let loss = Loss::new(reason, FoundBy::Release);
    held.lose(loss);
    telemetry::lost(held, loss);
    Some(LockError::Lost {
        key: held.key.clone(),
        reason,
        found_by: FoundBy::Release,
    })
}

/// Frees the lock `held` took, on `lane` (the call's connection), and wakes
/// this client's waiters on its key. A release that fails is sent once more
/// on the client's connection, which the first failure has made anew.
/// A lock taken with `hold_at_least` and not lost stays taken until the end
/// of its hold instead (see [`HeldLock::tail`]): the same end each time it
/// is sent.
///
/// Awaited when the body ends; in the background when the call is dropped
/// (cancelled, or the body panicked) or the lock was found lost.
pub(crate) async fn release(client: &LockClient, held: &HeldLock, lane: &Lane) -> Released {
    let inner = &client.inner;
    let owner = held.owner_id();
    let backend = &inner.backend;
    let kept = (held.kind, held.lease(), held.tail());
    let mut answer = backend
        .release(lane, &held.key, (&owner, held.token), kept)
        .await;
    if matches!(&answer, Err(error) if error.is_foreign()) {
        // Another program's value at the lock's name: the lock is not there.
        answer = Ok(Release::NotHeld(Ended::Taken));
    }
    // The checker's proof brings back the old rule: one try, and a failure
    // counts as a success.
    let mut unanswered = false;
    if answer.is_err() && !cfg!(feature = "defect-ok-after-unknown-release") {
        // A first send that may have run (its answer was lost) may have
        // freed the lock: the second then finds it not held, and must not
        // call that a taking.
        unanswered = matches!(&answer, Err(error) if error.outcome_unknown());
        let hold = (&*owner, held.token);
        answer = backend.release(&Lane::Home, &held.key, hold, kept).await;
    }
    let released = match answer {
        Ok(Release::Freed) => Released::Freed,
        Ok(Release::NotHeld(ended)) if unanswered => Released::NotHeldAfterUnanswered(ended),
        Ok(Release::NotHeld(ended)) => Released::NotHeld(ended),
        Err(error) => {
            let error = backend.error_on_key(error, &held.key, &inner.tag.place);
            telemetry::release_failed(&held.key, &error);
            if cfg!(feature = "defect-ok-after-unknown-release") {
                Released::Freed
            } else if error.is_retryable() {
                Released::Unknown
            } else {
                Released::Refused(Box::new(error))
            }
        }
    };
    // Freed, or not held any more: the waiters here have no other release
    // to wait for, so they should try now.
    let token = if released.is_freed() { held.token } else { 0 };
    // A fair line's release names its next waiter, and only that waiter's
    // client tries (see the client's push handler); this client's waiters
    // of other kinds are in no fair line, and try now.
    if held.kind == Kind::Fair {
        inner.waiters.wake_other_kinds(&held.key);
    } else {
        inner.waiters.wake_release(held.key.as_bytes(), token);
    }
    released
}

/// Releases `held` in the background, on the client's runtime; the handle
/// tells when it is done (dropping it changes nothing).
pub(crate) fn release_later(
    client: &LockClient,
    held: Arc<HeldLock>,
    lane: Lane,
) -> tokio::task::JoinHandle<()> {
    let owned = client.clone();
    client.inner.io.spawn(async move {
        release(&owned, &held, &lane).await;
    })
}

/// Releases `held` in the background, on the client's runtime, after its
/// call was dropped while holding it (cancelled, or its body panicked); the
/// release's events go to the call's `span`.
pub(crate) fn release_dropped(client: &LockClient, held: Arc<HeldLock>, span: Span) {
    let owned = client.clone();
    let releasing = async move {
        let released = release(&owned, &held, &Lane::Home).await;
        telemetry::released_in_background(released.is_freed());
    };
    client.inner.io.spawn(releasing.instrument(span));
}
