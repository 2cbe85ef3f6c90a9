//! The metrics of locked calls, and their names.
//!
//! With the `metrics` cargo feature, every locked call records these through
//! the [`metrics`](https://docs.rs/metrics) facade; the application installs
//! a recorder (Prometheus, OpenTelemetry, statsd, ...). Each update builds
//! its labelled key, as the facade's macros do (a small allocation), whether
//! or not a recorder is installed: an uncontended call makes about six.
//! Without the feature none of this is compiled.
//!
//! Every series is labelled `lock`: the call's
//! [`LockOptions::label`](crate::LockOptions::label), which
//! `#[distributed_lock]` sets to the key template (`order:<id>`), never the
//! rendered key, so the set of series stays small. Calls with no label are
//! labelled `unlabelled`.
//!
//! | Name | Kind | Labels | What it counts |
//! |---|---|---|---|
//! | `distributed_lock_attempts_total` | counter | `lock` | acquire requests sent to the backend (a contended call sends several) |
//! | `distributed_lock_acquisitions_total` | counter | `lock` | locks taken (re-entries not included) |
//! | `distributed_lock_reentries_total` | counter | `lock` | nested calls that re-entered a lock held around them |
//! | `distributed_lock_timeouts_total` | counter | `lock` | calls that gave up: the lock stayed held by another owner for their whole `wait` |
//! | `distributed_lock_acquire_errors_total` | counter | `lock` | acquires that failed otherwise (backend error, no quorum, too few replicas) |
//! | `distributed_lock_losses_total` | counter | `lock`, `reason` | locks lost while held, as their call saw it; `reason` is `taken`, `expired`, `unconfirmed`, `shutdown` or `detached` ([`LossReason`](crate::LossReason)) |
//! | `distributed_lock_renewal_failures_total` | counter | `lock` | renewals that failed (Redis unreachable or slow), one per lock per failed renewal; retried until the lease runs out |
//! | `distributed_lock_background_releases_total` | counter | `lock` | locks released in the background because their call was dropped while holding them (cancelled, or the body panicked) |
//! | `distributed_lock_wait_seconds` | histogram | `lock` | seconds from a call's start to taking its lock (taken locks only) |
//! | `distributed_lock_held_seconds` | histogram | `lock` | seconds a lock was held, from its acquire request to its release or loss |
//! | `distributed_lock_held` | gauge | `lock` | locks this process holds now |
//! | `distributed_lock_leader` | gauge | `lock` | terms this process leads now ([`lead`](crate::lead)): 1 while it is the leader of a key, 0 otherwise |
//!
//! Useful sums: attempts per acquisition (contention), `timeouts / (acquisitions + timeouts)`,
//! and any non-zero `losses` or `renewal_failures` (look at those).
//!
//! With the feature, call `lock_runtime::metrics::describe()` once after
//! installing the recorder to give each metric its unit and description
//! (Prometheus `# HELP` lines).
//!
//! ```ignore
//! let handle = metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()?;
//! lock_runtime::metrics::describe();
//! // ... serve `handle.render()` on /metrics
//! ```
//!
//! That exporter renders the two histograms as Prometheus summaries unless
//! it is given buckets; the [observability guide](crate::guide::observability)
//! says what that means and how to get real histograms. Each locked call
//! also has a tracing span and events: see the same guide.

/// `distributed_lock_attempts_total`: acquire requests sent.
pub const ATTEMPTS: &str = "distributed_lock_attempts_total";
/// `distributed_lock_acquisitions_total`: locks taken.
pub const ACQUISITIONS: &str = "distributed_lock_acquisitions_total";
/// `distributed_lock_reentries_total`: nested calls that re-entered a held lock.
pub const REENTRIES: &str = "distributed_lock_reentries_total";
/// `distributed_lock_timeouts_total`: calls that waited their whole `wait` in vain.
pub const TIMEOUTS: &str = "distributed_lock_timeouts_total";
/// `distributed_lock_acquire_errors_total`: acquires that failed otherwise.
pub const ACQUIRE_ERRORS: &str = "distributed_lock_acquire_errors_total";
/// `distributed_lock_losses_total`: locks lost while held, by `reason`.
pub const LOSSES: &str = "distributed_lock_losses_total";
/// `distributed_lock_renewal_failures_total`: failed renewals, per lock.
pub const RENEWAL_FAILURES: &str = "distributed_lock_renewal_failures_total";
/// `distributed_lock_background_releases_total`: releases after a cancel or panic.
pub const BACKGROUND_RELEASES: &str = "distributed_lock_background_releases_total";
/// `distributed_lock_wait_seconds`: time from a call's start to its lock.
pub const WAIT_SECONDS: &str = "distributed_lock_wait_seconds";
/// `distributed_lock_held_seconds`: time a lock was held.
pub const HELD_SECONDS: &str = "distributed_lock_held_seconds";
/// `distributed_lock_held`: locks held now.
pub const HELD: &str = "distributed_lock_held";

/// `distributed_lock_leader`: terms of leadership held now.
pub const LEADER: &str = "distributed_lock_leader";

/// The label naming the kind of lock: the call's label.
pub const LOCK: &str = "lock";
/// The label of [`LOSSES`] naming why the lock was lost.
pub const REASON: &str = "reason";

/// Gives every metric above its unit and description in the installed
/// recorder. Call it once, after installing the recorder.
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub fn describe() {
    use ::metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!(
        ATTEMPTS,
        Unit::Count,
        "Lock acquire requests sent to the backend"
    );
    describe_counter!(ACQUISITIONS, Unit::Count, "Locks taken");
    describe_counter!(
        REENTRIES,
        Unit::Count,
        "Nested calls that re-entered a held lock"
    );
    describe_counter!(
        TIMEOUTS,
        Unit::Count,
        "Calls that waited their whole wait for a lock held by another owner"
    );
    describe_counter!(
        ACQUIRE_ERRORS,
        Unit::Count,
        "Lock acquires that failed (backend error, no quorum, too few replicas)"
    );
    describe_counter!(LOSSES, Unit::Count, "Locks lost while held, by reason");
    describe_counter!(
        RENEWAL_FAILURES,
        Unit::Count,
        "Lock renewals that failed, per lock (retried until the lease runs out)"
    );
    describe_counter!(
        BACKGROUND_RELEASES,
        Unit::Count,
        "Locks released in the background after their call was cancelled or panicked"
    );
    describe_histogram!(
        WAIT_SECONDS,
        Unit::Seconds,
        "Time from a call's start to taking its lock"
    );
    describe_histogram!(HELD_SECONDS, Unit::Seconds, "Time a lock was held");
    describe_gauge!(HELD, Unit::Count, "Locks this process holds now");
    describe_gauge!(
        LEADER,
        Unit::Count,
        "Terms of leadership this process holds now (1 while it leads a key)"
    );
}
