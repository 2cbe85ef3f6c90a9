//! Per-call lock options: lease, wait and renewal.

use std::time::Duration;

/// How one call takes its lock. Fields left unset use the client's defaults
/// (see [`crate::LockClientBuilder`]).
///
/// ```
/// use std::time::Duration;
/// use lock_runtime::LockOptions;
///
/// let options = LockOptions::new()
///     .lease(Duration::from_secs(10))
///     .wait(Duration::from_millis(500))
///     .renew(false);
/// assert_eq!(options.lease_or(Duration::from_secs(30)), Duration::from_secs(10));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockOptions {
    lease: Option<Duration>,
    wait: Option<Duration>,
    renew: bool,
    label: Option<&'static str>,
}

impl LockOptions {
    /// The longest lease or wait that counts: 100 years. Longer ones are
    /// taken as this, so that no deadline overflows the clock.
    pub const LONGEST: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

    /// The shortest lease: 10 ms. A lock is trusted for its lease less a
    /// margin for clock drift (2 ms and a share of the lease), so a shorter
    /// lease would be lost almost as soon as it is taken.
    pub const SHORTEST_LEASE: Duration = Duration::from_millis(10);

    /// Client defaults for lease and wait, renewal on.
    pub const fn new() -> Self {
        LockOptions {
            lease: None,
            wait: None,
            renew: true,
            label: None,
        }
    }

    /// How long the lock lives in Redis without a renewal: at least
    /// [`LockOptions::SHORTEST_LEASE`] (a shorter one fails the call with
    /// [`LockError::Invalid`](crate::LockError::Invalid)), at most
    /// [`LockOptions::LONGEST`] (a longer lease is taken as that).
    pub const fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// How long to wait for a lock held by another owner; zero tries once.
    /// `Duration::MAX` (or anything above [`LockOptions::LONGEST`]) waits
    /// without end.
    pub const fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Whether the watchdog renews the lease while the body runs (default
    /// `true`). Without renewal the body is stopped with
    /// [`LockError::Lost`](crate::LockError::Lost) when the lease runs out.
    pub const fn renew(mut self, renew: bool) -> Self {
        self.renew = renew;
        self
    }

    /// A name for the kind of lock this call takes, such as the key template
    /// `"order:<id>"` (what the attribute gives): it labels the call's
    /// tracing span and metrics, so that the set of labels stays small.
    /// Never a rendered key.
    pub const fn label(mut self, label: &'static str) -> Self {
        self.label = Some(label);
        self
    }

    /// The label set with [`label`](Self::label), if any.
    pub const fn label_name(&self) -> Option<&'static str> {
        self.label
    }

    /// The lease, or `default` when none was set.
    pub const fn lease_or(&self, default: Duration) -> Duration {
        match self.lease {
            Some(lease) => lease,
            None => default,
        }
    }

    /// The wait, or `default` when none was set.
    pub const fn wait_or(&self, default: Duration) -> Duration {
        match self.wait {
            Some(wait) => wait,
            None => default,
        }
    }

    /// Whether renewal is on.
    pub const fn renews(&self) -> bool {
        self.renew
    }
}

impl Default for LockOptions {
    fn default() -> Self {
        Self::new()
    }
}
