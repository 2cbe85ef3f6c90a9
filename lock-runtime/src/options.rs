//! Per-call lock options: lease, wait, renewal and the kind of lock.

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
    mode: LockMode,
    permits: Option<u32>,
    fair: bool,
    waiter_lease: Option<Duration>,
    hold_at_least: Option<Duration>,
}

/// Whether a call shares its key with other readers or excludes everyone
/// (see [`LockOptions::mode`] and the kinds guide,
/// [`guide::kinds`](crate::guide::kinds)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum LockMode {
    /// Shares the key with any number of other readers; excludes writers
    /// (and plain locks, which are writers). Once a writer waits, new
    /// readers wait behind it.
    Read,
    /// Excludes every other holder: readers, writers and plain locks. The
    /// same lock as a call with no mode.
    #[default]
    Write,
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
            mode: LockMode::Write,
            permits: None,
            fair: false,
            waiter_lease: None,
            hold_at_least: None,
        }
    }

    /// How long a fair waiter's place in line, or a waiting writer's claim
    /// ahead of new readers, lives without a heartbeat by default: 5 s.
    pub const DEFAULT_WAITER_LEASE: Duration = Duration::from_secs(5);

    /// Takes the key as a reader ([`LockMode::Read`]: shared with other
    /// readers) or a writer ([`LockMode::Write`], the default: exclusive,
    /// the same lock as a plain call). Not with [`permits`](Self::permits)
    /// or [`fair`](Self::fair): such a call fails with
    /// [`LockError::Invalid`](crate::LockError::Invalid).
    pub const fn mode(mut self, mode: LockMode) -> Self {
        self.mode = mode;
        self
    }

    /// Makes the key a counted lock: at most `n` holders at once, across
    /// every client, each with its own lease. `0` fails the call with
    /// [`LockError::Invalid`](crate::LockError::Invalid), and so does a
    /// call that also sets [`mode`](Self::mode) or [`fair`](Self::fair).
    pub const fn permits(mut self, n: u32) -> Self {
        self.permits = Some(n);
        self
    }

    /// Makes the key a fair lock: callers that wait take it in the order
    /// they began to wait, across every client and process (default
    /// `false`). An exclusive lock; not with [`mode`](Self::mode) or
    /// [`permits`](Self::permits).
    pub const fn fair(mut self, fair: bool) -> Self {
        self.fair = fair;
        self
    }

    /// How long a waiter's place in line lives in Redis without a heartbeat
    /// (default [`LockOptions::DEFAULT_WAITER_LEASE`], 5 s): a fair
    /// waiter's place, and a waiting writer's claim that holds new readers
    /// back. A waiter renews it at a third of this while it waits, and
    /// removes it at once when it gives up or is cancelled; a waiter whose
    /// process died stops holding up the line within this time. At least
    /// [`LockOptions::SHORTEST_LEASE`].
    pub const fn waiter_lease(mut self, waiter_lease: Duration) -> Self {
        self.waiter_lease = Some(waiter_lease);
        self
    }

    /// Keeps the lock taken after the body ends until at least `hold` after
    /// it was acquired, by the server's clock; then it frees itself, with
    /// no process alive. The call returns when the body ends. For jobs that
    /// run once per period across a fleet: see
    /// [`guide::scheduled`](crate::guide::scheduled). A plain or write lock
    /// on one key only; with [`mode`](Self::mode) read,
    /// [`permits`](Self::permits), [`fair`](Self::fair) or several keys the
    /// call fails with [`LockError::Invalid`](crate::LockError::Invalid).
    /// Zero keeps nothing after the body; a hold longer than
    /// [`LockOptions::LONGEST`] is taken as that.
    pub const fn hold_at_least(mut self, hold: Duration) -> Self {
        self.hold_at_least = Some(hold);
        self
    }

    /// The time set with [`hold_at_least`](Self::hold_at_least), if any.
    pub const fn held_at_least(&self) -> Option<Duration> {
        self.hold_at_least
    }

    /// The mode set with [`mode`](Self::mode) ([`LockMode::Write`] unless
    /// set).
    pub const fn lock_mode(&self) -> LockMode {
        self.mode
    }

    /// The count set with [`permits`](Self::permits), if any.
    pub const fn permit_count(&self) -> Option<u32> {
        self.permits
    }

    /// Whether the call takes a fair lock.
    pub const fn is_fair(&self) -> bool {
        self.fair
    }

    /// The waiter lease (see [`waiter_lease`](Self::waiter_lease)).
    pub const fn waiter_lease_or_default(&self) -> Duration {
        match self.waiter_lease {
            Some(waiter_lease) => waiter_lease,
            None => Self::DEFAULT_WAITER_LEASE,
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
