//! Turns on a held lock: locked calls made side by side inside one body, on
//! a key that the body holds, run their bodies one at a time.
//!
//! Every frame of a held lock (the call that took it, and each call that
//! re-entered it) has one turn. A call that re-enters takes the turn of the
//! nearest frame of the chain that holds its key, and gives it back when it
//! ends; a call nested inside it takes that call's own turn, so nesting
//! still re-enters. A frame's turn ends with its call: calls waiting for it
//! fail, and calls that re-entered under it and outlived it (detached) stop.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

use tokio::sync::{Semaphore, TryAcquireError};

/// One frame's turn: free, taken, or ended with its call.
///
/// Every held lock and every re-entry has one, and most are never waited
/// for, so it is a state byte until a call has to wait: then a semaphore
/// of one permit, made at that moment, keeps the line in arrival order
/// and carries the turn from then on (24 bytes, where a semaphore inline
/// is 40).
pub(crate) struct Turn {
    state: AtomicU8,
    /// Made by the first call that waits; taken and given back only once
    /// `state` is [`QUEUED`].
    line: OnceLock<Box<Semaphore>>,
}

/// Nobody has the turn (and nobody waits).
const FREE: u8 = 0;
/// A call has it, nobody waits.
const TAKEN: u8 = 1;
/// The frame's call has ended (and nobody waited).
const ENDED: u8 = 2;
/// A call has waited: the semaphore in `line` carries the turn, and the
/// state stays so.
const QUEUED: u8 = 3;

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
        Turn {
            state: AtomicU8::new(FREE),
            line: OnceLock::new(),
        }
    }

    /// Moves the state from `from` to `to`; whether it was `from`.
    fn shift(&self, from: u8, to: u8) -> bool {
        self.state
            .compare_exchange(from, to, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// The line, once the state is [`QUEUED`].
    fn line(&self) -> &Semaphore {
        // Set before the state becomes QUEUED, and never taken away.
        self.line.get_or_init(|| Box::new(Semaphore::new(0)))
    }

    /// Takes the turn if it is free.
    pub(crate) fn try_take(&self) -> Take {
        loop {
            match self.state.load(Ordering::Acquire) {
                FREE if self.shift(FREE, TAKEN) => return Take::Taken,
                FREE => {}
                TAKEN => return Take::Busy,
                ENDED => return Take::Ended,
                _ => {
                    return match self.line().try_acquire() {
                        Ok(permit) => {
                            permit.forget();
                            Take::Taken
                        }
                        Err(TryAcquireError::NoPermits) => Take::Busy,
                        Err(TryAcquireError::Closed) => Take::Ended,
                    }
                }
            }
        }
    }

    /// Waits for the turn, in arrival order; `false` if the frame's call
    /// ended first. Dropped while it waits, it leaves the line.
    pub(crate) async fn take(&self) -> bool {
        loop {
            match self.state.load(Ordering::Acquire) {
                FREE if self.shift(FREE, TAKEN) => return true,
                ENDED => return false,
                // Taken: the line starts here, with no permit (the one
                // there is, is the holder's).
                TAKEN => {
                    self.line.get_or_init(|| Box::new(Semaphore::new(0)));
                    self.shift(TAKEN, QUEUED);
                }
                QUEUED => {
                    return match self.line().acquire().await {
                        Ok(permit) => {
                            permit.forget();
                            true
                        }
                        Err(_) => false,
                    }
                }
                // FREE taken by another meanwhile: look again.
                _ => {}
            }
        }
    }

    /// Gives back a turn taken by [`try_take`](Turn::try_take) or
    /// [`take`](Turn::take).
    pub(crate) fn give_back(&self) {
        loop {
            match self.state.load(Ordering::Acquire) {
                TAKEN if self.shift(TAKEN, FREE) => return,
                TAKEN => {}
                QUEUED => return self.line().add_permits(1),
                // Ended: nothing to give back to.
                _ => return,
            }
        }
    }

    /// The frame's call has ended.
    pub(crate) fn end(&self) {
        loop {
            match self.state.load(Ordering::Acquire) {
                from @ (FREE | TAKEN) if self.shift(from, ENDED) => return,
                FREE | TAKEN => {}
                QUEUED => return self.line().close(),
                _ => return,
            }
        }
    }

    /// Whether the frame's call has ended.
    pub(crate) fn has_ended(&self) -> bool {
        match self.state.load(Ordering::Acquire) {
            ENDED => true,
            QUEUED => self.line().is_closed(),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{Take, Turn};

    fn taken(take: Take) -> &'static str {
        match take {
            Take::Taken => "taken",
            Take::Busy => "busy",
            Take::Ended => "ended",
        }
    }

    #[test]
    fn a_turn_nobody_waits_for_is_taken_given_back_and_ended() {
        let turn = Turn::new();
        assert_eq!(taken(turn.try_take()), "taken");
        assert_eq!(taken(turn.try_take()), "busy");
        turn.give_back();
        assert_eq!(taken(turn.try_take()), "taken");
        assert!(!turn.has_ended());
        turn.end();
        assert!(turn.has_ended());
        assert_eq!(taken(turn.try_take()), "ended");
        turn.give_back();
        assert_eq!(taken(turn.try_take()), "ended", "a give-back after the end");
        assert!(turn.line.get().is_none(), "no line was made");
    }

    #[tokio::test]
    async fn waiters_take_the_turn_in_arrival_order_and_fail_when_it_ends() {
        let turn = Arc::new(Turn::new());
        assert!(turn.take().await, "free: at once");
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        // What the next waiter got; bounded, so that a waiter never woken
        // fails the test rather than hangs it.
        let mut next = async || {
            let within = std::time::Duration::from_secs(10);
            tokio::time::timeout(within, rx.recv()).await.ok().flatten()
        };
        let waiters: Vec<_> = (0..3)
            .map(|i| {
                let (turn, tx) = (turn.clone(), tx.clone());
                tokio::spawn(async move {
                    let got = turn.take().await;
                    tx.send((i, got)).expect("the test listens");
                })
            })
            .collect();
        // Let each waiter queue, in order.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(taken(turn.try_take()), "busy");
        turn.give_back();
        assert_eq!(next().await, Some((0, true)));
        assert_eq!(taken(turn.try_take()), "busy", "the first waiter has it");
        turn.give_back();
        assert_eq!(next().await, Some((1, true)));
        turn.end();
        assert!(turn.has_ended());
        assert_eq!(next().await, Some((2, false)), "the end fails the last");
        assert_eq!(taken(turn.try_take()), "ended");
        for waiter in waiters {
            waiter.await.expect("waiter");
        }
    }
}
