//! The metrics of [`crate::metrics`], recorded through the `metrics` facade
//! when the `metrics` feature is on; without it every function here is empty
//! and the calls compile to nothing.
//!
//! Labels are the call's label (`lock`, the key template, never a rendered
//! key) and, for losses, the reason, so the set of series stays small.

#![cfg_attr(not(feature = "metrics"), allow(unused_variables))]

use tokio::time::Instant;

use crate::error::LossReason;
#[cfg(feature = "metrics")]
use crate::metrics::{
    ACQUIRE_ERRORS, ACQUISITIONS, ATTEMPTS, BACKGROUND_RELEASES, HELD, HELD_SECONDS, LEADER, LOCK,
    LOSSES, REASON, REENTRIES, RENEWAL_FAILURES, TIMEOUTS, WAIT_SECONDS,
};

pub(super) fn reentered(label: &'static str) {
    #[cfg(feature = "metrics")]
    ::metrics::counter!(REENTRIES, LOCK => label).increment(1);
}

pub(super) fn acquired(label: &'static str, start: Instant, attempts: u32) {
    #[cfg(feature = "metrics")]
    {
        ::metrics::counter!(ATTEMPTS, LOCK => label).increment(u64::from(attempts));
        ::metrics::counter!(ACQUISITIONS, LOCK => label).increment(1);
        ::metrics::histogram!(WAIT_SECONDS, LOCK => label).record(start.elapsed().as_secs_f64());
    }
}

pub(super) fn timed_out(label: &'static str, attempts: u32) {
    #[cfg(feature = "metrics")]
    {
        ::metrics::counter!(ATTEMPTS, LOCK => label).increment(u64::from(attempts));
        ::metrics::counter!(TIMEOUTS, LOCK => label).increment(1);
    }
}

pub(super) fn acquire_failed(label: &'static str, attempts: u32) {
    #[cfg(feature = "metrics")]
    {
        ::metrics::counter!(ATTEMPTS, LOCK => label).increment(u64::from(attempts));
        ::metrics::counter!(ACQUIRE_ERRORS, LOCK => label).increment(1);
    }
}

pub(super) fn acquire_cancelled(label: &'static str, attempts: u32) {
    #[cfg(feature = "metrics")]
    ::metrics::counter!(ATTEMPTS, LOCK => label).increment(u64::from(attempts));
}

pub(super) fn held(label: &'static str) {
    #[cfg(feature = "metrics")]
    ::metrics::gauge!(HELD, LOCK => label).increment(1.0);
}

pub(super) fn unheld(label: &'static str) {
    #[cfg(feature = "metrics")]
    ::metrics::gauge!(HELD, LOCK => label).decrement(1.0);
}

pub(super) fn lost(label: &'static str, reason: LossReason, since: Instant) {
    #[cfg(feature = "metrics")]
    {
        let reason = match reason {
            LossReason::Taken => "taken",
            LossReason::Expired => "expired",
            LossReason::Unconfirmed => "unconfirmed",
            LossReason::ReleaseUnanswered => "release_unanswered",
            LossReason::ForceUnlocked => "force_unlocked",
            LossReason::Gone => "gone",
            LossReason::ShutDown => "shutdown",
            LossReason::Detached => "detached",
        };
        ::metrics::counter!(LOSSES, LOCK => label, REASON => reason).increment(1);
        ::metrics::histogram!(HELD_SECONDS, LOCK => label).record(since.elapsed().as_secs_f64());
    }
}

pub(super) fn released(label: &'static str, since: Instant) {
    #[cfg(feature = "metrics")]
    ::metrics::histogram!(HELD_SECONDS, LOCK => label).record(since.elapsed().as_secs_f64());
}

pub(super) fn background_release(label: &'static str) {
    #[cfg(feature = "metrics")]
    ::metrics::counter!(BACKGROUND_RELEASES, LOCK => label).increment(1);
}

pub(super) fn renewal_failed(label: &'static str) {
    #[cfg(feature = "metrics")]
    ::metrics::counter!(RENEWAL_FAILURES, LOCK => label).increment(1);
}

pub(super) fn leading(label: &'static str, elected: bool) {
    #[cfg(feature = "metrics")]
    {
        let gauge = ::metrics::gauge!(LEADER, LOCK => label);
        if elected {
            gauge.increment(1.0);
        } else {
            gauge.decrement(1.0);
        }
    }
}
