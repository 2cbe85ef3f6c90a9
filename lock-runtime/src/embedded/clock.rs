//! Where the embedded backend reads the time: the clock of a tokio
//! runtime, so that a test runtime with paused time
//! (`#[tokio::test(start_paused = true)]`) drives the embedded backend's
//! leases as it drives the client's waits and renewals.

use tokio::runtime::Handle;
use tokio::time::Instant;

/// The clock of one runtime, or the system's.
#[derive(Clone)]
pub(crate) struct Clock {
    runtime: Option<Handle>,
}

impl Clock {
    /// The clock of `runtime`: the real one, unless that runtime's time is
    /// paused (tokio's `test-util`).
    pub(crate) fn of(runtime: Handle) -> Self {
        Clock {
            runtime: Some(runtime),
        }
    }

    /// The clock of the current runtime, or the system's outside one.
    pub(crate) fn current() -> Self {
        Clock {
            runtime: Handle::try_current().ok(),
        }
    }

    /// Now, on this clock, from any thread.
    pub(crate) fn now(&self) -> Instant {
        let _entered = self.runtime.as_ref().map(Handle::enter);
        Instant::now()
    }
}
