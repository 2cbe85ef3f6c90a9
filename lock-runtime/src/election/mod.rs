//! Leader election: [`LockClient::lead`] and [`crate::lead`], a loop of
//! locked calls on one key, each win a term ([`Term`]) whose body is the
//! leader's future. Loss, release, renewal and re-entry are the locked
//! call's; this module adds the campaign, the term's signals and its end.

mod term;

pub use term::{Term, TermEnd};

use std::convert::Infallible;
use std::future::Future;
use std::panic::Location;
use std::task::Poll;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::client::{ClientRef, LockClient};
use crate::error::{LockError, LossReason};
use crate::global;
use crate::locking;
use crate::locking::outcome::Apart;
use crate::options::{LockMode, LockOptions};
use crate::ownership;
use crate::telemetry;

/// The first wait before campaigning again after a backend error.
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
/// The longest wait between campaigns after backend errors.
const LAST_BACKOFF: Duration = Duration::from_secs(2);

impl LockClient {
    /// Campaigns for leadership of `key` (the prefix is added) until it is
    /// elected, then runs `f(term)`'s future as the leader's work for as
    /// long as the term holds, and campaigns again after a loss. See
    /// [`guide::leader`](crate::guide::leader).
    ///
    /// A term is the lock named `key`, held like any other: renewed by the
    /// watchdog, seen held by [`inspect`](LockClient::inspect), freed by
    /// [`force_unlock`](LockClient::force_unlock). Inside `f`'s future
    /// [`fencing_token`](crate::fencing_token) is the term's token
    /// ([`Term::token`]) and locked calls on `key` re-enter the term's hold.
    ///
    /// - Elected: `f(term)` is called and its future polled under the lock.
    /// - The lock is lost (taken by `force_unlock`, or its lease ran out
    ///   unrenewed): the future is dropped at its next await, as a locked
    ///   body is, the term ends with [`TermEnd::Lost`], and `lead`
    ///   campaigns again: `f` is called again, with a new term and a
    ///   greater token, only after the last term's future was dropped.
    /// - The future returns `Ok(())` or `Err(e)`: the term ends
    ///   ([`TermEnd::Returned`]), the lock is released at once (the next
    ///   campaigner is woken by the release, not by polling), and `lead`
    ///   returns what the future returned. If the release finds that the
    ///   lock was lost meanwhile, the term ends with [`TermEnd::Lost`]:
    ///   after `Ok(())`, `lead` returns it (the leader stepped down); after
    ///   `Err(e)`, the error counts as the loss's (a resource that refused
    ///   a stale write, say, before the loss reached the future): it is
    ///   traced at `warn` and `lead` campaigns again, as on any loss.
    /// - The client is shut down ([`shutdown`](LockClient::shutdown)): the
    ///   term ends at once ([`TermEnd::ShutDown`]: [`Term::ended`]
    ///   completes), while its future runs on until it returns or the
    ///   shutdown's deadline stops it; then `lead` returns
    ///   [`LockError::ShutDown`] (or the future's `Err(e)`, if it returned
    ///   one). A campaign ends with `ShutDown` at once.
    ///
    /// The options' `lease`, `renew` and `label` apply to every term;
    /// `wait` does not: `lead` campaigns until it is elected. A backend
    /// error while campaigning (Redis unreachable, no quorum, too few
    /// replicas) is traced at `warn` and retried after 50 ms, doubling up to
    /// 2 s, not returned; a renewal that fails is retried by the watchdog
    /// until the lease runs out, which loses the term. The future is `Send`
    /// when `f`, its futures and `E` are.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_runtime::LockError> {
    /// use std::time::Duration;
    /// use lock_runtime::{LockClient, LockError, LockOptions};
    ///
    /// let client = LockClient::in_memory();
    /// let options = LockOptions::new().lease(Duration::from_secs(10));
    /// client
    ///     .lead("scheduler", options, |term| async move {
    ///         // The leader's work; the token grows with every term.
    ///         assert_eq!(lock_runtime::fencing_token(), Some(term.token()));
    ///         Ok::<_, LockError>(())
    ///     })
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// What `f`'s future returned; [`LockError::ShutDown`] as above;
    /// [`LockError::Invalid`] for options a leader cannot take
    /// ([`LockOptions::permits`], [`LockOptions::fair`],
    /// [`LockMode::Read`]), an invalid key or lease, and a call made inside
    /// a body that holds `key` already; [`LockError::KindMismatch`] when
    /// the key is used as another kind of lock.
    #[track_caller]
    pub fn lead<'a, E, F, Fut>(
        &'a self,
        key: &str,
        options: LockOptions,
        f: F,
    ) -> impl Future<Output = Result<(), E>> + 'a
    where
        F: FnMut(Term) -> Fut + 'a,
        Fut: Future<Output = Result<(), E>> + 'a,
        E: From<LockError> + 'a,
    {
        let key = self.full_key(format_args!("{key}"));
        campaign(
            ClientRef::Borrowed(self),
            key,
            options,
            f,
            Location::caller(),
        )
    }
}

/// [`crate::lead`]'s future: on the client in use when it is first polled
/// (the scoped one, else the global one), `key` given without the prefix.
pub(crate) async fn lead_in_use<E, F, Fut>(
    key: String,
    options: LockOptions,
    f: F,
    at: &'static Location<'static>,
) -> Result<(), E>
where
    F: FnMut(Term) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: From<LockError>,
{
    let client = global::in_use().map_err(E::from)?;
    let key = client.prefixed_key(key);
    campaign(client, key, options, f, at).await
}

/// The term a campaign's locked call runs, and what its leader's future
/// returned: filled in by the body, read by the loop once the call is over.
struct Slot<E> {
    term: Option<Term>,
    result: Option<Result<(), E>>,
}

impl<E> Drop for Slot<E> {
    fn drop(&mut self) {
        // Still here only when `lead`'s future is dropped during a term.
        if let Some(term) = self.term.take() {
            term.finish(TermEnd::Cancelled);
        }
    }
}

/// What the loop does after one locked call.
enum Next<E> {
    /// `lead` returns this.
    Return(Result<(), E>),
    /// The term was lost: campaign again at once.
    Again,
    /// Campaigning failed with this error: wait, then campaign again.
    Retry(LockError),
}

/// Campaigns for `key` (full key) on `client` until a term's future returns
/// or the client shuts down: one locked call per term.
async fn campaign<E, F, Fut>(
    client: ClientRef<'_>,
    key: String,
    options: LockOptions,
    mut f: F,
    at: &'static Location<'static>,
) -> Result<(), E>
where
    F: FnMut(Term) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: From<LockError>,
{
    if let Some(message) = refused(&client, &key, &options) {
        return Err(E::from(LockError::Invalid { key, message }));
    }
    let options = options.wait(LockOptions::LONGEST);
    let mut backoff = FIRST_BACKOFF;
    loop {
        let mut slot = Slot {
            term: None,
            result: None,
        };
        let body = serve(&mut f, &mut slot);
        let outcome =
            locking::run_at::<Apart, _, _, _>(client.lend(), key.clone(), options, body, at).await;
        let (term, result) = (slot.term.take(), slot.result.take());
        if term.is_some() {
            backoff = FIRST_BACKOFF;
        }
        match after_term(&key, outcome, term, result) {
            Next::Return(result) => return result,
            Next::Again => {}
            Next::Retry(error) => {
                telemetry::campaign_failed(&error, backoff);
                let until = Instant::now() + backoff;
                client.inner.io.sleep_until(until).await;
                backoff = (backoff * 2).min(LAST_BACKOFF);
            }
        }
    }
}

/// The body of one term's locked call: makes the term, calls `f` with it
/// and runs its future in the term's span.
async fn serve<E, F, Fut>(f: &mut F, slot: &mut Slot<E>) -> Result<(), Infallible>
where
    F: FnMut(Term) -> Fut,
    Fut: Future<Output = Result<(), E>>,
{
    // A locked body is polled in its own frame, always.
    let frame = ownership::innermost().expect("a locked body runs in its hold");
    let term = Term::new(frame.held());
    let client = frame.held().client.clone();
    drop(frame);
    let span = telemetry::term_span(term.token());
    slot.term = Some(term.clone());
    let work = f(term.clone()).instrument(span);
    // At shutdown the term ends (its signals fire) while the future runs
    // on, until it returns or the shutdown's deadline stops it.
    let shutdown = async {
        client.life.closed().await;
        term.finish(TermEnd::ShutDown);
        std::future::pending::<()>().await;
    };
    tokio::pin!(work, shutdown);
    let result = std::future::poll_fn(|cx| {
        if let Poll::Ready(result) = work.as_mut().poll(cx) {
            return Poll::Ready(result);
        }
        let _ = shutdown.as_mut().poll(cx);
        Poll::Pending
    })
    .await;
    slot.result = Some(result);
    Ok(())
}

/// What follows a term's locked call, which ended with `outcome`, ran
/// `term` (`None`: it was not elected) and, if its future returned, gave
/// `result`. Ends the term.
fn after_term<E: From<LockError>>(
    key: &str,
    outcome: Result<Result<(), Infallible>, LockError>,
    term: Option<Term>,
    result: Option<Result<(), E>>,
) -> Next<E> {
    let end = |end| {
        if let Some(term) = &term {
            term.finish(end);
        }
    };
    let error = match (outcome, result) {
        // The future returned; the release may have found the lock lost.
        (outcome, Some(result)) => {
            end(match outcome {
                Err(LockError::Lost { reason, .. }) => TermEnd::Lost(reason),
                _ => TermEnd::Returned,
            });
            // A leader that stepped down at shutdown: `lead` says so.
            let shut = term.as_ref().and_then(Term::end) == Some(TermEnd::ShutDown);
            let lost = matches!(term.as_ref().and_then(Term::end), Some(TermEnd::Lost(_)));
            if let (Err(_), true, false) = (&result, lost, shut) {
                // The term was lost by the time its future failed: a loss,
                // as a leader's loop expects, not the end of `lead`.
                telemetry::term_error_after_loss(key);
                return Next::Again;
            }
            return Next::Return(match (result, shut) {
                (Ok(()), true) => Err(E::from(LockError::ShutDown { key: key.into() })),
                (result, _) => result,
            });
        }
        // Not reached: the body returns only once the result is stored.
        (Ok(_), None) => return Next::Return(Ok(())),
        (Err(error), None) => error,
    };
    match error {
        LockError::Lost {
            reason: LossReason::ShutDown,
            key,
            ..
        } => {
            end(TermEnd::ShutDown);
            Next::Return(Err(E::from(LockError::ShutDown { key })))
        }
        LockError::Lost { reason, .. } => {
            end(TermEnd::Lost(reason));
            Next::Again
        }
        error if campaigns_on(&error) => Next::Retry(error),
        error => Next::Return(Err(E::from(error))),
    }
}

/// Whether a campaign that failed with `error` goes on: a backend that
/// failed or answered too few (any backend error: a permanent one is traced
/// at every retry).
fn campaigns_on(error: &LockError) -> bool {
    matches!(
        error,
        LockError::Backend { .. }
            | LockError::Connect(_)
            | LockError::NoQuorum { .. }
            | LockError::NotReplicated { .. }
            | LockError::Timeout { .. }
    )
}

/// Why `lead` may not campaign for `key` with `options`, if it may not.
fn refused(client: &LockClient, key: &str, options: &LockOptions) -> Option<&'static str> {
    if options.permit_count().is_some()
        || options.is_fair()
        || options.lock_mode() == LockMode::Read
    {
        return Some(
            "a leader holds the plain lock of its key: permits, fair and mode = read do not \
             apply to lead; drop them",
        );
    }
    if ownership::held(&client.inner.tag, key).is_some() {
        return Some(
            "lead was called inside a body that holds its key: its terms would be that \
             body's hold; call lead outside that body, or on another key",
        );
    }
    None
}
