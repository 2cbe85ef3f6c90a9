//! One locked call: re-enter or acquire (waiting for wake-ups), run the body
//! while watching for loss, release. [`Locked`]'s poll hands each phase
//! ([`phase::Phase`]) to a function of its own; the steps into a hold are
//! in `phase.rs`, acquiring in `acquire.rs`, releasing in `release.rs`.

mod acquire;
pub(crate) mod all;
mod give_back;
pub(crate) mod outcome;
mod phase;
pub(crate) mod release;

use std::future::Future;
use std::marker::PhantomData;
use std::mem;
use std::ops::ControlFlow;
use std::panic::Location;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use pin_project_lite::pin_project;
use tracing::Span;

use crate::client::{ClientRef, LockClient};
use crate::error::LockError;
use crate::held::{Frame, HeldLock, Loss};
use crate::options::LockOptions;
use crate::ownership;
use crate::route::Lane;
use crate::telemetry;
use outcome::{Joined, Outcome, Report, Told};
use phase::{call_span, enter_hold, start, Phase};
use release::{release, release_dropped, release_later, Released};

/// Runs `body` under the lock `key` (a full backend key) of `client`,
/// giving back a lock failure as `O` says, as a call made where the
/// caller's caller is (`#[track_caller]` all the way from the public
/// functions), which the kind check names.
#[track_caller]
pub(crate) fn run<O, T, E, F>(
    client: ClientRef<'_>,
    key: String,
    options: LockOptions,
    body: F,
) -> Locked<'_, F, T, E, O>
where
    F: Future<Output = Result<T, E>>,
    O: Report<T, E>,
{
    run_at(client, key, options, body, Location::caller())
}

/// [`run`] for a call made `at`: for a caller that builds the call later
/// than it was made, and keeps where.
pub(crate) fn run_at<'a, O, T, E, F>(
    client: ClientRef<'a>,
    key: String,
    options: LockOptions,
    body: F,
    at: &'static Location<'static>,
) -> Locked<'a, F, T, E, O>
where
    F: Future<Output = Result<T, E>>,
    O: Report<T, E>,
{
    Locked {
        client,
        phase: Phase::Start { key, options, at },
        span: None,
        in_body: BodyPolls::NotBegun,
        body: Some(body),
        outcome: PhantomData,
    }
}

impl LockClient {
    /// Runs `body` while holding the lock `key` (the prefix is added), with
    /// the same ownership, renewal and loss rules as the attribute.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_runtime::LockError> {
    /// use lock_runtime::{LockClient, LockError, LockOptions};
    ///
    /// let client = LockClient::in_memory();
    /// let user = 42;
    /// let n = client
    ///     .run_locked(&format!("user:{user}"), LockOptions::new(), async {
    ///         Ok::<_, LockError>(1)
    ///     })
    ///     .await?;
    /// assert_eq!(n, 1);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// `Err(E::from(e))` for every [`LockError`] `e`: the lock was not taken
    /// within `wait` ([`LockError::Timeout`]), the backend failed, or the lock
    /// was lost while `body` ran ([`LockError::Lost`]; `body` was dropped
    /// there). Otherwise what `body` returned.
    #[track_caller]
    pub fn run_locked<'a, T, E, F>(
        &'a self,
        key: &str,
        options: LockOptions,
        body: F,
    ) -> impl std::future::Future<Output = Result<T, E>> + 'a
    where
        F: std::future::Future<Output = Result<T, E>> + 'a,
        E: From<LockError> + 'a,
        T: 'a,
    {
        // Not an `async fn`: the key is rendered now, and the body's future
        // is not held a second time by an extra layer.
        let key = self.full_key(format_args!("{key}"));
        run::<Joined, _, _, _>(ClientRef::Borrowed(self), key, options, body)
    }
}

impl LockClient {
    /// Runs `body` under the lock `key`, as [`run_locked`](Self::run_locked),
    /// and tells the whole [`Outcome`]: whether the body ran, ran to its
    /// end and what it returned, and whether the lock held throughout. Where
    /// `run_locked` gives only the lock's error, this keeps what a body that
    /// ran to its end returned ([`Outcome::RanButLost`]), and tells a body
    /// stopped part-way ([`Outcome::Stopped`]) from one that never began
    /// ([`Outcome::NotRun`]). No bound on `E`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use lock_runtime::{LockClient, LockOptions, Outcome};
    ///
    /// let client = LockClient::in_memory();
    /// let outcome = client
    ///     .run_locked_outcome("transfer:42", LockOptions::new(), async {
    ///         Ok::<_, String>("debited")
    ///     })
    ///     .await;
    /// match outcome {
    ///     Outcome::Held(result) => assert_eq!(result, Ok("debited")),
    ///     // The body's result, and why the lock may not have held to its end.
    ///     Outcome::RanButLost { body, error } => eprintln!("{body:?}, but {error}"),
    ///     // Part of the body may have run: settle it before trying again.
    ///     Outcome::Stopped(error) => eprintln!("stopped: {error}"),
    ///     // Nothing ran: safe to call again if the error is retryable.
    ///     Outcome::NotRun(error) => eprintln!("not run: {error}"),
    ///     _ => unreachable!("no other case today"),
    /// }
    /// # }
    /// ```
    #[track_caller]
    pub fn run_locked_outcome<'a, T, E, F>(
        &'a self,
        key: &str,
        options: LockOptions,
        body: F,
    ) -> impl std::future::Future<Output = Outcome<T, E>> + 'a
    where
        F: std::future::Future<Output = Result<T, E>> + 'a,
        E: 'a,
        T: 'a,
    {
        let key = self.full_key(format_args!("{key}"));
        run::<Told, _, _, _>(ClientRef::Borrowed(self), key, options, body)
    }

    /// Runs `body` once every key of `keys` is held, as
    /// [`run_locked_all`](Self::run_locked_all), and tells the whole
    /// [`Outcome`], as [`run_locked_outcome`](Self::run_locked_outcome)
    /// does: a transfer between two accounts learns whether its body ran
    /// to its end, and what it returned, even when a key's release could
    /// not be confirmed.
    #[track_caller]
    pub fn run_locked_all_outcome<'a, T, E, F, I, K>(
        &'a self,
        keys: I,
        options: LockOptions,
        body: F,
    ) -> impl std::future::Future<Output = Outcome<T, E>> + 'a
    where
        I: IntoIterator<Item = K>,
        K: AsRef<str>,
        F: std::future::Future<Output = Result<T, E>> + 'a,
        E: 'a,
        T: 'a,
    {
        let keys = keys
            .into_iter()
            .map(|key| self.full_key(format_args!("{}", key.as_ref())))
            .collect();
        let at = Location::caller();
        all::run_all_at::<Told, _, _, _>(ClientRef::Borrowed(self), keys, options, body, at)
    }
}

impl LockClient {
    /// Runs `body` once every key of `keys` is held (the prefix is added to
    /// each), all or nothing: the call never holds some of the keys while
    /// it waits for others, so two calls that list the same keys in any
    /// order never deadlock. Duplicates are one key; keys this task's body
    /// already holds are re-entered. The same ownership, renewal and loss
    /// rules as [`run_locked`](Self::run_locked); the loss of any key stops
    /// the body with [`LockError::Lost`] naming it. See
    /// [`guide::several_keys`](crate::guide::several_keys).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_runtime::LockError> {
    /// use lock_runtime::{LockClient, LockError, LockOptions};
    ///
    /// let client = LockClient::in_memory();
    /// let (from, to) = (1, 2);
    /// let keys = [format!("account:{from}"), format!("account:{to}")];
    /// client
    ///     .run_locked_all(&keys, LockOptions::new(), async {
    ///         // Both accounts are held here.
    ///         Ok::<_, LockError>(())
    ///     })
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// As [`run_locked`](Self::run_locked): a [`LockError::Timeout`] names
    /// the key that was held when the wait ran out. [`LockError::Invalid`]
    /// for an empty list, and with [`LockOptions::permits`],
    /// [`LockOptions::fair`] or [`LockOptions::hold_at_least`].
    #[track_caller]
    pub fn run_locked_all<'a, T, E, F, I, K>(
        &'a self,
        keys: I,
        options: LockOptions,
        body: F,
    ) -> impl std::future::Future<Output = Result<T, E>> + 'a
    where
        I: IntoIterator<Item = K>,
        K: AsRef<str>,
        F: std::future::Future<Output = Result<T, E>> + 'a,
        E: From<LockError> + 'a,
        T: 'a,
    {
        let keys = keys
            .into_iter()
            .map(|key| self.full_key(format_args!("{}", key.as_ref())))
            .collect();
        let at = Location::caller();
        all::run_all_at::<Joined, _, _, _>(ClientRef::Borrowed(self), keys, options, body, at)
    }
}

pin_project! {
    /// A locked call: takes the lock (or finds it held around the call),
    /// runs the body under it while watching for loss, then releases it.
    ///
    /// Written out by hand, not as an `async fn`, so that the body's future
    /// is stored once, in place, and the call adds only a few words to it
    /// while the lock is held (an `async fn` would keep the body twice, as
    /// its argument and as the future it polls). The steps before and after
    /// the body (acquire, release) are boxed, so that their larger states are
    /// not kept meanwhile.
    ///
    /// Dropped while it holds the lock (cancelled, or the body panicked),
    /// it drops the body and releases the lock in the background.
    pub(crate) struct Locked<'a, F, T, E, O> {
        client: ClientRef<'a>,
        phase: Phase<'a, T, E>,
        // The call's `distributed_lock` span: made when the call is first
        // polled, in the caller's task, so that it is a child of the span
        // the caller is in then; entered whenever the call is polled or
        // dropped. `None` while no subscriber records it, so that the call
        // keeps one word for it.
        span: Option<Box<Span>>,
        // Whether the body began, and whether it is being polled: a call
        // dropped while it is was dropped because the body panicked.
        in_body: BodyPolls,
        // `None` once the call has ended, or the lock was lost.
        #[pin]
        body: Option<F>,
        // How a lock failure is given back (see `outcome`).
        outcome: PhantomData<O>,
    }

    impl<'a, F, T, E, O> PinnedDrop for Locked<'a, F, T, E, O> {
        fn drop(this: Pin<&mut Self>) {
            let mut this = this.project();
            let _entered = this.span.as_deref().map(Span::enter);
            let held = match mem::replace(this.phase, Phase::Done) {
                Phase::Holding(frame) => {
                    // In the lock's scope, where the body ran, while the
                    // hold lasts: what the body drops still sees its token.
                    ownership::drop_within(&frame, || this.body.set(None));
                    frame.end();
                    frame.into_held()
                }
                Phase::Reentered(frame) => {
                    ownership::drop_within(&frame, || this.body.set(None));
                    frame.leave();
                    return;
                }
                // The release may not have reached the backend; another one
                // can only free this acquisition's hold.
                Phase::Releasing { held, .. } => held,
                _ => return,
            };
            this.client.inner.registry.unregister(held.id);
            telemetry::dropped_while_held(&held, *this.in_body == BodyPolls::InPoll);
            let span = this.span.as_deref().cloned().unwrap_or_else(Span::none);
            release_dropped(this.client, held, span);
        }
    }
}

/// Where the body is: not polled yet, in a poll, or begun (polled, and
/// between polls).
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum BodyPolls {
    /// Never polled.
    #[default]
    NotBegun,
    /// In a poll.
    InPoll,
    /// Polled at least once, and not in a poll now.
    Begun,
}

/// What one poll of the body under the lock came to.
enum Step<T, E> {
    /// The body returned.
    Returned(Result<T, E>),
    /// The lock was found lost before the poll: the body was not polled.
    Lost(Loss),
}

impl<F, T, E, O> Future for Locked<'_, F, T, E, O>
where
    F: Future<Output = Result<T, E>>,
    O: Report<T, E>,
{
    type Output = O::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let client = &*this.client;
        if let Phase::Start { key, options, .. } = &*this.phase {
            *this.span = call_span(client, key, options);
        }
        let _entered = this.span.as_deref().map(Span::enter);
        loop {
            let (phase, body, in_body) = (&mut *this.phase, this.body.as_mut(), &mut *this.in_body);
            let next = match phase {
                Phase::Start { .. } => begin::<O, T, E, F>(client, phase, body),
                Phase::Acquiring(_) => {
                    ready!(poll_acquiring::<O, T, E, F>(client, phase, body, cx))
                }
                Phase::Turning(_) => ready!(poll_turning::<O, T, E, F>(phase, body, cx)),
                Phase::Reentered(_) => {
                    ready!(poll_reentered::<O, T, E, F>(phase, body, in_body, cx))
                }
                Phase::Holding(_) => {
                    ready!(poll_holding::<O, T, E, F>(client, phase, body, in_body, cx))
                }
                Phase::Releasing { .. } => ready!(poll_releasing::<O, T, E>(phase, cx)),
                Phase::Done => panic!("a locked call was polled after it returned"),
            };
            if let ControlFlow::Break(output) = next {
                return Poll::Ready(output);
            }
        }
    }
}

/// The call's first poll: re-enter a lock held around it, or start taking
/// the lock; or end with the reason it cannot.
fn begin<'a, O, T, E, F>(
    client: &ClientRef<'a>,
    phase: &mut Phase<'a, T, E>,
    body: Pin<&mut Option<F>>,
) -> ControlFlow<O::Output>
where
    O: Report<T, E>,
{
    let Phase::Start { key, options, at } = mem::replace(phase, Phase::Done) else {
        unreachable!()
    };
    match start(client, key, options, at) {
        Ok(next) => {
            *phase = next;
            ControlFlow::Continue(())
        }
        Err(error) => fail::<O, T, E, F>(phase, body, error),
    }
}

/// Taking the lock: once taken, the body runs under it.
fn poll_acquiring<'a, O, T, E, F>(
    client: &ClientRef<'a>,
    phase: &mut Phase<'a, T, E>,
    body: Pin<&mut Option<F>>,
    cx: &mut Context<'_>,
) -> Poll<ControlFlow<O::Output>>
where
    O: Report<T, E>,
{
    let Phase::Acquiring(acquiring) = phase else {
        unreachable!()
    };
    let taken = ready!(acquiring.as_mut().poll(cx));
    Poll::Ready(match taken.and_then(|held| enter_hold(client, held)) {
        Ok(frame) => {
            *phase = Phase::Holding(frame);
            ControlFlow::Continue(())
        }
        Err(error) => fail::<O, T, E, F>(phase, body, error),
    })
}

/// Waiting for the turn on a lock held around the call: once it comes, the
/// body runs in it.
fn poll_turning<O, T, E, F>(
    phase: &mut Phase<'_, T, E>,
    body: Pin<&mut Option<F>>,
    cx: &mut Context<'_>,
) -> Poll<ControlFlow<O::Output>>
where
    O: Report<T, E>,
{
    let Phase::Turning(turning) = phase else {
        unreachable!()
    };
    Poll::Ready(match ready!(turning.as_mut().poll(cx)) {
        Ok(frame) => {
            *phase = Phase::Reentered(frame);
            ControlFlow::Continue(())
        }
        Err(error) => fail::<O, T, E, F>(phase, body, error),
    })
}

/// The call ends with `error` before its body ran: the body is dropped.
fn fail<O, T, E, F>(
    phase: &mut Phase<'_, T, E>,
    mut body: Pin<&mut Option<F>>,
    error: LockError,
) -> ControlFlow<O::Output>
where
    O: Report<T, E>,
{
    *phase = Phase::Done;
    body.set(None);
    ControlFlow::Break(O::not_run(error))
}

/// The body runs under the lock held around the call, in its turn; the
/// call ends with it.
fn poll_reentered<O, T, E, F>(
    phase: &mut Phase<'_, T, E>,
    mut body: Pin<&mut Option<F>>,
    in_body: &mut BodyPolls,
    cx: &mut Context<'_>,
) -> Poll<ControlFlow<O::Output>>
where
    F: Future<Output = Result<T, E>>,
    O: Report<T, E>,
{
    let Phase::Reentered(frame) = phase else {
        unreachable!()
    };
    // No waker to leave: the call that took the lock runs this one inside
    // its body, and stops it on loss. A call moved out of that body stops
    // at its next poll.
    let step = ready!(poll_in(frame, body.as_mut(), in_body, cx));
    let result = match step {
        Step::Returned(result) => O::held(result),
        Step::Lost(loss) if *in_body == BodyPolls::Begun => O::stopped(lost(frame.held(), loss)),
        Step::Lost(loss) => O::not_run(lost(frame.held(), loss)),
    };
    let Phase::Reentered(frame) = mem::replace(phase, Phase::Done) else {
        unreachable!()
    };
    // In the lock's scope, as in the drop.
    ownership::drop_within(&frame, || body.set(None));
    frame.leave();
    Poll::Ready(ControlFlow::Break(result))
}

/// The body runs under the lock this call took: when it returns, the lock
/// is given back, unless it was lost.
fn poll_holding<'a, O, T, E, F>(
    client: &ClientRef<'a>,
    phase: &mut Phase<'a, T, E>,
    mut body: Pin<&mut Option<F>>,
    in_body: &mut BodyPolls,
    cx: &mut Context<'_>,
) -> Poll<ControlFlow<O::Output>>
where
    F: Future<Output = Result<T, E>>,
    O: Report<T, E>,
{
    let Phase::Holding(frame) = phase else {
        unreachable!()
    };
    frame.held().wake_on_loss(cx.waker());
    let step = ready!(poll_in(frame, body.as_mut(), in_body, cx));
    let Phase::Holding(frame) = mem::replace(phase, Phase::Done) else {
        unreachable!()
    };
    // The hold ends with the body, for every call that re-entered it too.
    frame.end();
    let held = frame.into_held();
    body.set(None);
    client.inner.registry.unregister(held.id);
    let (result, loss) = match step {
        Step::Returned(result) if !held.is_lost() => {
            *phase = releasing(client, held, result);
            return Poll::Ready(ControlFlow::Continue(()));
        }
        // Lost while the body ran its last poll: it ran to its end.
        Step::Returned(result) => (Some(result), held.check_now().unwrap_or(Loss::TAKEN)),
        Step::Lost(loss) => (None, loss),
    };
    let error = on_loss(client, held, loss);
    Poll::Ready(ControlFlow::Break(match result {
        Some(result) => O::ran_but_lost(result, error),
        None if *in_body == BodyPolls::Begun => O::stopped(error),
        None => O::not_run(error),
    }))
}

/// The phase that gives `held` back, after its body returned `result`.
fn releasing<'a, T, E>(
    client: &ClientRef<'a>,
    held: Arc<HeldLock>,
    result: Result<T, E>,
) -> Phase<'a, T, E> {
    // Polled in the caller's task: the caller's runtime's connection if it
    // has one.
    let lane = client.inner.backend.lane();
    let owned = held.clone();
    let lent = client.lend();
    Phase::Releasing {
        releasing: Box::pin(async move { release(&lent, &owned, &lane).await }),
        held,
        result,
    }
}

/// Giving the lock back: the call ends with the body's result, or with the
/// loss the release showed.
fn poll_releasing<O, T, E>(
    phase: &mut Phase<'_, T, E>,
    cx: &mut Context<'_>,
) -> Poll<ControlFlow<O::Output>>
where
    O: Report<T, E>,
{
    let Phase::Releasing { releasing, .. } = phase else {
        unreachable!()
    };
    let released = ready!(releasing.as_mut().poll(cx));
    let Phase::Releasing { held, result, .. } = mem::replace(phase, Phase::Done) else {
        unreachable!()
    };
    Poll::Ready(ControlFlow::Break(finish::<O, T, E>(
        &held, result, released,
    )))
}

/// One poll of the body in `frame`'s scope (see [`watch`]), with `in_body`
/// [`BodyPolls::InPoll`] while it runs, and [`BodyPolls::Begun`] after it
/// (unless the lock was found lost before the poll).
fn poll_in<T, E, F>(
    frame: &Frame,
    body: Pin<&mut Option<F>>,
    in_body: &mut BodyPolls,
    cx: &mut Context<'_>,
) -> Poll<Step<T, E>>
where
    F: Future<Output = Result<T, E>>,
{
    let before = *in_body;
    *in_body = BodyPolls::InPoll;
    let polled = ownership::within(frame, || watch(frame, body, cx));
    *in_body = match polled {
        Poll::Ready(Step::Lost(_)) => before,
        _ => BodyPolls::Begun,
    };
    polled
}

/// One poll of the body, unless the lock is found lost.
///
/// Before every poll of the body the lock's validity is checked against the
/// clock, so a body resumed after a pause past its lease (a stopped process,
/// a starved runtime) is stopped before it runs on, even if the watchdog has
/// not marked the loss yet; and so is a nested call's body polled after the
/// hold it re-entered has ended.
fn watch<T, E, F>(
    frame: &Frame,
    body: Pin<&mut Option<F>>,
    cx: &mut Context<'_>,
) -> Poll<Step<T, E>>
where
    F: Future<Output = Result<T, E>>,
{
    if let Some(loss) = frame.check_now() {
        return Poll::Ready(Step::Lost(loss));
    }
    let body = body
        .as_pin_mut()
        .expect("the body runs until the call ends");
    body.poll(cx).map(Step::Returned)
}

/// The error of a call whose lock `held` was lost (`loss`).
fn lost(held: &HeldLock, loss: Loss) -> LockError {
    LockError::Lost {
        key: held.key.clone(),
        reason: loss.reason,
        found_by: loss.found_by,
    }
}

/// A lock found lost while its body ran: frees whatever may remain of it in
/// the backend, in the background (Redis may be unreachable: the caller does
/// not wait), and wakes this client's line for the key at once.
fn on_loss(client: &LockClient, held: Arc<HeldLock>, loss: Loss) -> LockError {
    telemetry::lost(&held, loss);
    let error = lost(&held, loss);
    client.inner.waiters.wake_release(held.key.as_bytes(), 0);
    release_later(client, held, Lane::Home);
    error
}

/// The call's result, once the lock is given back: the body's, unless the
/// release showed that the lock was not held to the end, which matters more
/// than what the body returned.
fn finish<O: Report<T, E>, T, E>(
    held: &HeldLock,
    result: Result<T, E>,
    released: Released,
) -> O::Output {
    match release::verdict(held, released) {
        None => O::held(result),
        Some(error) => O::ran_but_lost(result, error),
    }
}
