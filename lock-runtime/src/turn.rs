//! Turns on a held lock: locked calls made side by side inside one body, on
//! a key that the body holds, run their bodies one at a time.
//!
//! Every frame of a held lock (the call that took it, and each call that
//! re-entered it) has one turn. A call that re-enters takes the turn of the
//! nearest frame of the chain that holds its key, and gives it back when it
//! ends; a call nested inside it takes that call's own turn, so nesting
//! still re-enters. A frame's turn ends with its call: calls waiting for it
//! fail, and calls that re-entered under it and outlived it (detached) stop.

use tokio::sync::{Semaphore, TryAcquireError};

/// One frame's turn: free, taken, or ended with its call.
pub(crate) struct Turn(Semaphore);

/// What trying to take a turn came to.
pub(crate) enum Take {
    /// Taken: give it back with [`Turn::give_back`].
    Taken,
    /// Another call has it.
    Busy,
    /// The frame's call has ended.
    Ended,
}

impl Turn {
    pub(crate) fn new() -> Self {
        Turn(Semaphore::new(1))
    }

    /// Takes the turn if it is free.
    pub(crate) fn try_take(&self) -> Take {
        match self.0.try_acquire() {
            Ok(permit) => {
                permit.forget();
                Take::Taken
            }
            Err(TryAcquireError::NoPermits) => Take::Busy,
            Err(TryAcquireError::Closed) => Take::Ended,
        }
    }

    /// Waits for the turn, in arrival order; `false` if the frame's call
    /// ended first. Dropped while it waits, it leaves the line.
    pub(crate) async fn take(&self) -> bool {
        match self.0.acquire().await {
            Ok(permit) => {
                permit.forget();
                true
            }
            Err(_) => false,
        }
    }

    /// Gives back a turn taken by [`try_take`](Turn::try_take) or
    /// [`take`](Turn::take).
    pub(crate) fn give_back(&self) {
        self.0.add_permits(1);
    }

    /// The frame's call has ended.
    pub(crate) fn end(&self) {
        self.0.close();
    }

    /// Whether the frame's call has ended.
    pub(crate) fn has_ended(&self) -> bool {
        self.0.is_closed()
    }
}
