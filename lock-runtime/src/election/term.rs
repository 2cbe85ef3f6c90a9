//! One term of a leader elected by [`lead`](crate::lead): its fencing token
//! and the signals of its end.

use std::fmt;
use std::sync::{Arc, Weak};

use tokio::sync::watch;

use crate::error::LossReason;
use crate::held::{HeldLock, Loss, OnLoss};
use crate::telemetry;

/// One term of leadership won by [`lead`](crate::lead) or
/// [`LockClient::lead`](crate::LockClient::lead): given to the leader's
/// function at each election, and cheap to clone into the tasks the leader
/// hands work to.
///
/// A term is the hold of the lock named by `lead`'s key: it starts when
/// that lock is taken and ends when the leader's future returns, when the
/// lock is lost (taken by `force_unlock`, or its lease ran out unrenewed),
/// at the client's shutdown, or when `lead`'s future is dropped.
/// [`ended`](Term::ended) says which.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_runtime::LockError> {
/// use lock_runtime::{LockClient, LockError, LockOptions, TermEnd};
///
/// let client = LockClient::in_memory();
/// client
///     .lead("scheduler", LockOptions::new(), |term| async move {
///         let worker = term.clone();
///         // A task the leader hands work to stops when the term ends.
///         let task = tokio::spawn(async move { worker.ended().await });
///         assert!(term.token() > 0);
///         drop(task);
///         Ok::<_, LockError>(())
///     })
///     .await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Term {
    shared: Arc<Shared>,
}

/// Why a [`Term`] ended: what [`Term::ended`] gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TermEnd {
    /// The lock was lost while the term ran, for this reason (taken by
    /// another owner or by `force_unlock`, or its lease ran out unrenewed);
    /// the leader's future was dropped at its next await, and `lead`
    /// campaigns again.
    Lost(LossReason),
    /// The leader's future returned (`Ok` or `Err`); the lock was released,
    /// and `lead` returned what it returned.
    Returned,
    /// The client is being shut down
    /// ([`LockClient::shutdown`](crate::LockClient::shutdown)): the term
    /// ends when the shutdown starts, and the leader's future runs on until
    /// it returns or the shutdown's deadline stops it.
    ShutDown,
    /// `lead`'s future was dropped while the term ran: the leader's future
    /// was dropped with it, and the lock released in the background.
    Cancelled,
}

/// What the clones of one term share.
struct Shared {
    token: u64,
    label: &'static str,
    /// The term's hold, to check its lease against the clock when asked;
    /// weak, so that a term kept after its end does not keep the hold (and
    /// the client's shutdown) waiting.
    held: Weak<HeldLock>,
    /// `None` while the term runs, then why it ended; set once.
    end: watch::Sender<Option<TermEnd>>,
}

impl Term {
    /// The term of the hold `held`, which has just started.
    ///
    /// The term hears the hold's loss at the moment it is marked, from
    /// whatever marked it (the clock's pass of the watchdog, a renewal's or
    /// the release's answer, `force_unlock`, the shutdown), and tells every
    /// clone's [`ended`](Term::ended) and the leader gauge from there: not
    /// when the leader's own future is next polled.
    pub(super) fn new(held: &Arc<HeldLock>) -> Term {
        telemetry::elected(held.label, held.token);
        let shared = Arc::new(Shared {
            token: held.token,
            label: held.label,
            held: Arc::downgrade(held),
            end: watch::Sender::new(None),
        });
        held.listen(shared.clone());
        Term { shared }
    }

    /// The term's fencing token: the token of its lock's acquisition, which
    /// grows term by term, across clients and processes (a newer leader's
    /// is always greater). The same as [`fencing_token`](crate::fencing_token)
    /// inside the leader's future.
    pub fn token(&self) -> u64 {
        self.shared.token
    }

    /// Completes when this term is lost, with the reason; at once if it
    /// already is, including a lease that ran out by the clock while nothing
    /// looked (a paused process). Never completes for a term that ended
    /// otherwise (see [`ended`](Term::ended)). For a leader that `select!`s
    /// its work against its loss; the leader's own future is also dropped
    /// at its next await on a loss.
    pub async fn lost(&self) -> LossReason {
        match self.ended().await {
            TermEnd::Lost(reason) => reason,
            _ => std::future::pending().await,
        }
    }

    /// Completes when this term ends, for any reason, and says which; at
    /// once if it already has. A task the leader handed work to stops on
    /// it.
    pub async fn ended(&self) -> TermEnd {
        let mut ends = self.shared.end.subscribe();
        loop {
            if let Some(end) = *ends.borrow_and_update() {
                return end;
            }
            if let Some(end) = self.shared.check_now() {
                return end;
            }
            // The sender lives in `self.shared`: it is not dropped first.
            if ends.changed().await.is_err() {
                return TermEnd::Cancelled;
            }
        }
    }

    /// Why the term ended, or `None` while it runs (its lease checked
    /// against the clock).
    pub fn end(&self) -> Option<TermEnd> {
        let end = *self.shared.end.borrow();
        end.or_else(|| self.shared.check_now())
    }

    /// Ends the term with `end`, unless it has ended already.
    pub(super) fn finish(&self, end: TermEnd) {
        self.shared.finish(end);
    }
}

impl Shared {
    /// The end of a term whose hold is found lost by the clock now (marking
    /// it, which stops the leader's future at its next poll).
    fn check_now(&self) -> Option<TermEnd> {
        let loss = self.held.upgrade()?.check_now()?;
        let end = Shared::end_of(loss);
        self.finish(end);
        self.end.borrow().or(Some(end))
    }

    fn end_of(loss: Loss) -> TermEnd {
        match loss.reason {
            LossReason::ShutDown => TermEnd::ShutDown,
            reason => TermEnd::Lost(reason),
        }
    }

    /// Ends the term once: the leader gauge drops, then every clone's
    /// `ended()` and `lost()` hear it.
    fn finish(&self, end: TermEnd) {
        self.end.send_if_modified(|now| {
            let first = now.is_none();
            if first {
                *now = Some(end);
                telemetry::term_ended(self.label, self.token, &end);
            }
            first
        });
    }
}

impl OnLoss for Shared {
    fn lost(&self, loss: Loss) {
        self.finish(Shared::end_of(loss));
    }
}

impl fmt::Debug for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Term")
            .field("token", &self.shared.token)
            .field("label", &self.shared.label)
            .field("end", &*self.shared.end.borrow())
            .finish()
    }
}
