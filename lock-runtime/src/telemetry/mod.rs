//! What the library tells the outside about each locked call: a tracing
//! span and events, and (with the `metrics` feature) metrics.
//!
//! The locking code calls the small functions here at each step, so that it
//! reads as locking and the levels, field names and metric names live in one
//! place. Each function does nothing beyond tracing's level check (and, with
//! the feature, a metrics call) when no subscriber wants the event: fields
//! are given to tracing's macros, which format them only for a subscriber
//! that records them.
//!
//! Levels: `debug` for each call's lifecycle, `trace` for renewals, `warn`
//! only when a human should look (a lock lost, a renewal or a release
//! failed). Nothing is logged per call at `info`.

mod record;

use std::fmt;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Span;

use crate::error::LockError;
use crate::held::{HeldLock, Loss};

/// The label of calls that set none (see [`crate::LockOptions::label`]).
pub(crate) const UNLABELLED: &str = "unlabelled";

/// The span of one locked call, a child of the caller's current span: the
/// full key, the call's label, lease and wait.
pub(crate) fn span(key: &str, label: &'static str, lease: Duration, wait: Duration) -> Span {
    tracing::debug_span!("distributed_lock", key, label, lease = ?lease, wait = ?wait)
}

/// The call is nested in a call that holds the same lock.
pub(crate) fn reentered(label: &'static str) {
    tracing::debug!("lock re-entered");
    record::reentered(label);
}

/// The lock is held by another owner, whose lock lives `holder_ttl` more
/// (`None`: it has no expiry; zero: a fair lock that nobody holds, with
/// waiters ahead of the call); the call waits.
pub(crate) fn waiting(holder_ttl: Option<Duration>, attempts: u32) {
    tracing::debug!(holder_ttl = ?holder_ttl, attempts, "lock busy; waiting");
}

/// The call that started at `start` took the lock after `attempts` requests.
pub(crate) fn acquired(label: &'static str, token: u64, start: Instant, attempts: u32) {
    tracing::debug!(token, waited = ?start.elapsed(), attempts, "lock acquired");
    record::acquired(label, start, attempts);
}

/// The call that started at `start` gave up: the lock stayed held by
/// another owner for its whole wait.
pub(crate) fn timed_out(label: &'static str, start: Instant, attempts: u32) {
    tracing::debug!(waited = ?start.elapsed(), attempts, "lock wait timed out");
    record::timed_out(label, attempts);
}

/// The call was dropped (cancelled) before it took the lock.
pub(crate) fn acquire_cancelled(label: &'static str, start: Instant, attempts: u32) {
    tracing::debug!(waited = ?start.elapsed(), attempts, "lock wait cancelled");
    record::acquire_cancelled(label, attempts);
}

/// Taking the lock failed with `error` (the backend, a quorum, replicas).
pub(crate) fn acquire_failed(label: &'static str, error: &LockError, attempts: u32) {
    tracing::debug!(%error, attempts, "lock acquire failed");
    record::acquire_failed(label, attempts);
}

/// The lock is held now (the watchdog watches it).
pub(crate) fn held(held: &HeldLock) {
    record::held(held.label);
}

/// The lock is not held any more (released, lost or expired).
pub(crate) fn unheld(held: &HeldLock) {
    record::unheld(held.label);
}

/// The call that took the lock found it lost while the body ran, or at the
/// release. Logged in the caller's span, where the loss is seen.
pub(crate) fn lost(held: &HeldLock, loss: Loss) {
    tracing::warn!(
        key = &*held.key,
        label = held.label,
        reason = %loss.reason,
        found_by = ?loss.found_by,
        held_for = ?held.held_since().elapsed(),
        "lock lost while held"
    );
    record::lost(held.label, loss.reason, held.held_since());
}

/// The body ended and the lock was given back.
pub(crate) fn released(held: &HeldLock) {
    tracing::debug!(held_for = ?held.held_since().elapsed(), "lock released");
    record::released(held.label, held.held_since());
}

/// The call was dropped while it held the lock (cancelled, or its body
/// `panicked`): the lock is released in the background.
///
/// A lock already lost by then is reported lost: no caller will see it.
pub(crate) fn dropped_while_held(held: &HeldLock, panicked: bool) {
    match held.check_now() {
        Some(loss) => lost(held, loss),
        None => record::released(held.label, held.held_since()),
    }
    tracing::debug!(
        held_for = ?held.held_since().elapsed(),
        cause = if panicked { "the body panicked" } else { "the call was cancelled" },
        "lock releasing in the background"
    );
    record::background_release(held.label);
}

/// A release in the background (after a cancel, a panic or a loss) ended.
pub(crate) fn released_in_background(freed: bool) {
    tracing::debug!(freed, "lock released in the background");
}

/// The release could not reach Redis, twice.
pub(crate) fn release_failed(key: &str, error: &LockError) {
    tracing::warn!(key, %error, "lock release failed twice; the lock expires with its lease");
}

/// The watchdog renewed `held`.
pub(crate) fn renewed(held: &HeldLock) {
    tracing::trace!(key = &*held.key, token = held.token, "lock renewed");
}

/// A renewal of the locks `batch` failed with `error`; it is retried until
/// their validity runs out.
pub(crate) fn renewal_failed(batch: &[std::sync::Arc<HeldLock>], error: &dyn fmt::Display) {
    tracing::warn!(keys = %Keys(batch), %error, "lock renewal failed; retrying");
    for held in batch {
        record::renewal_failed(held.label);
    }
}

/// A renewal found `held` gone or taken; the call that holds it reports the
/// loss when it sees it.
pub(crate) fn renewal_found_gone(held: &HeldLock) {
    tracing::debug!(key = &*held.key, "lock renewal found it gone or taken");
}

/// The keys of a batch of locks, written only when an event is recorded.
struct Keys<'a>(&'a [std::sync::Arc<HeldLock>]);

impl fmt::Display for Keys<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, held) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(&held.key)?;
        }
        Ok(())
    }
}

/// The span of one term of a leader (see [`crate::lead`]), a child of its
/// locked call's span: the term's token.
pub(crate) fn term_span(token: u64) -> Span {
    tracing::debug_span!("lead_term", token)
}

/// A campaign won a term with `token`: this process leads.
pub(crate) fn elected(label: &'static str, token: u64) {
    tracing::debug!(token, "elected leader");
    record::leading(label, true);
}

/// The term with `token` ended, with `end`.
pub(crate) fn term_ended(label: &'static str, token: u64, end: &dyn fmt::Debug) {
    tracing::debug!(token, end = ?end, "term ended");
    record::leading(label, false);
}

/// A term's future returned an error after its term was lost (found by the
/// release): counted as the loss; `lead` campaigns again.
pub(crate) fn term_error_after_loss(key: &str) {
    tracing::warn!(
        key,
        "leader election: the term's future returned an error after its term was lost; \
         campaigning again"
    );
}

/// A campaign failed with `error` (the backend failed or answered too
/// few); it is tried again after `retry_in`.
pub(crate) fn campaign_failed(error: &LockError, retry_in: Duration) {
    if error.is_retryable() {
        tracing::warn!(%error, retry_in = ?retry_in, "leader election: campaign failed; retrying");
    } else {
        // A cause that retrying does not cure (an ACL, a key of another
        // kind): retried all the same, as an operator may fix it while the
        // process runs, but at `error`, where alerts look.
        tracing::error!(
            %error,
            retry_in = ?retry_in,
            "leader election: campaign failed for a cause that needs fixing; retrying"
        );
    }
}
