//! One locked call: re-enter or acquire (waiting for wake-ups), run the body
//! while watching for loss, release. Each phase but the run has a module.

mod acquire;
pub(crate) mod outcome;
pub(crate) mod release;

use std::future::Future;
use std::marker::PhantomData;
use std::mem;
use std::panic::Location;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;
use tokio::time::Instant;
use tracing::Span;

use crate::client::{ClientRef, LockClient};
use crate::error::{FoundBy, HeldBy, KindFoundBy, LockError, LossReason};
use crate::held::{Frame, HeldLock, Loss, Term};
use crate::kind::Kind;
use crate::kind_check::Use;
use crate::options::LockOptions;
use crate::ownership;
use crate::route::Lane;
use crate::telemetry::{self, UNLABELLED};
use crate::turn::Take;
use acquire::Request;
use outcome::{Joined, Outcome};
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
    O: Outcome<T, E>,
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
    O: Outcome<T, E>,
{
    Locked {
        client,
        phase: Phase::Start { key, options, at },
        span: None,
        in_body: false,
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
        // Set while the body is polled: a call dropped with it set was
        // dropped because the body panicked.
        in_body: bool,
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
            telemetry::dropped_while_held(&held, *this.in_body);
            let span = this.span.as_deref().cloned().unwrap_or_else(Span::none);
            release_dropped(this.client, held, span);
        }
    }
}

/// Taking the lock: boxed, so that its state is not kept while the lock is
/// held, and a trait object, since an `async fn`'s future type has no name.
type Acquiring<'a> = Pin<Box<dyn Future<Output = Result<HeldLock, LockError>> + Send + 'a>>;

/// Waiting for the turn on a lock held around the call, behind a call made
/// side by side with it (see [`crate::turn`]): boxed, as only such calls
/// need it.
type Turning<'a> = Pin<Box<dyn Future<Output = Result<Frame, LockError>> + Send + 'a>>;

/// Giving the lock back (see [`release`]).
type Releasing<'a> = Pin<Box<dyn Future<Output = Released> + Send + 'a>>;

/// Where a [`Locked`] call is.
enum Phase<'a, T, E> {
    /// Not polled yet: whether the lock is held around the call is known
    /// only when it runs.
    Start {
        key: String,
        options: LockOptions,
        /// Where the call was made, for the kind check.
        at: &'static Location<'static>,
    },
    Acquiring(Acquiring<'a>),
    /// The lock is held around the call, and another call made side by
    /// side with this one has its turn.
    Turning(Turning<'a>),
    /// The body runs under the lock that this call took (the frame's).
    Holding(Frame),
    /// The body runs under the same lock, held around this call, in its
    /// turn (the frame's).
    Reentered(Frame),
    /// The body has ended with `result`; the lock is being released.
    Releasing {
        held: Arc<HeldLock>,
        releasing: Releasing<'a>,
        result: Result<T, E>,
    },
    Done,
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
    O: Outcome<T, E>,
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
            match this.phase {
                Phase::Start { .. } => {
                    let Phase::Start { key, options, at } = mem::replace(this.phase, Phase::Done)
                    else {
                        unreachable!()
                    };
                    match start(client, key, options, at) {
                        Ok(phase) => *this.phase = phase,
                        Err(error) => {
                            this.body.set(None);
                            return Poll::Ready(O::lock(error));
                        }
                    }
                }
                Phase::Acquiring(acquiring) => {
                    let taken = ready!(acquiring.as_mut().poll(cx));
                    match taken.and_then(|held| enter_hold(client, held)) {
                        Ok(frame) => *this.phase = Phase::Holding(frame),
                        Err(error) => {
                            *this.phase = Phase::Done;
                            this.body.set(None);
                            return Poll::Ready(O::lock(error));
                        }
                    }
                }
                Phase::Turning(turning) => match ready!(turning.as_mut().poll(cx)) {
                    Ok(frame) => *this.phase = Phase::Reentered(frame),
                    Err(error) => {
                        *this.phase = Phase::Done;
                        this.body.set(None);
                        return Poll::Ready(O::lock(error));
                    }
                },
                Phase::Reentered(frame) => {
                    // No waker to leave: the call that took the lock runs
                    // this one inside its body, and stops it on loss. A call
                    // moved out of that body stops at its next poll.
                    let step = ready!(poll_in(frame, this.body.as_mut(), this.in_body, cx));
                    let result = match step {
                        Step::Returned(result) => O::body(result),
                        Step::Lost(loss) => O::lock(lost(frame.held(), loss)),
                    };
                    let Phase::Reentered(frame) = mem::replace(this.phase, Phase::Done) else {
                        unreachable!()
                    };
                    // In the lock's scope, as in the drop.
                    ownership::drop_within(&frame, || this.body.set(None));
                    frame.leave();
                    return Poll::Ready(result);
                }
                Phase::Holding(frame) => {
                    frame.held().wake_on_loss(cx.waker());
                    let step = ready!(poll_in(frame, this.body.as_mut(), this.in_body, cx));
                    let Phase::Holding(frame) = mem::replace(this.phase, Phase::Done) else {
                        unreachable!()
                    };
                    // The hold ends with the body, for every call that
                    // re-entered it too.
                    frame.end();
                    let held = frame.into_held();
                    this.body.set(None);
                    client.inner.registry.unregister(held.id);
                    let result = match step {
                        Step::Returned(result) if !held.is_lost() => result,
                        Step::Returned(_) => {
                            // Lost while the body ran its last poll.
                            let loss = held.check_now().unwrap_or(Loss::TAKEN);
                            return Poll::Ready(O::lock(on_loss(client, held, loss)));
                        }
                        Step::Lost(loss) => {
                            return Poll::Ready(O::lock(on_loss(client, held, loss)));
                        }
                    };
                    // Polled in the caller's task: the caller's runtime's
                    // connection if it has one.
                    let lane = client.inner.backend.lane();
                    let owned = held.clone();
                    let lent = client.lend();
                    *this.phase = Phase::Releasing {
                        releasing: Box::pin(async move { release(&lent, &owned, &lane).await }),
                        held,
                        result,
                    };
                }
                Phase::Releasing { releasing, .. } => {
                    let released = ready!(releasing.as_mut().poll(cx));
                    let Phase::Releasing { held, result, .. } =
                        mem::replace(this.phase, Phase::Done)
                    else {
                        unreachable!()
                    };
                    return Poll::Ready(finish::<O, T, E>(&held, result, released));
                }
                Phase::Done => panic!("a locked call was polled after it returned"),
            }
        }
    }
}

/// A lock just taken, as the frame its body runs in: registered with the
/// watchdog, then checked against a shutdown. Registered first: a shutdown
/// that closes after the check finds the lock among the registered ones,
/// and one that closed before it is seen here, and the lock is given back.
fn enter_hold(client: &LockClient, held: HeldLock) -> Result<Frame, LockError> {
    let held = Arc::new(held);
    client.inner.registry.register(held.clone());
    if client.inner.tag.life.is_closed() {
        client.inner.registry.unregister(held.id);
        let key = held.key.clone();
        release_later(client, held, Lane::Home);
        return Err(LockError::ShutDown { key });
    }
    Ok(Frame::Taken(held))
}

/// The span of a call on `key` with `options`, if a subscriber records it.
fn call_span(client: &LockClient, key: &str, options: &LockOptions) -> Option<Box<Span>> {
    let label = options.label_name().unwrap_or(UNLABELLED);
    let (lease, wait) = (client.inner.lease, client.inner.wait);
    let span = telemetry::span(key, label, options.lease_or(lease), options.wait_or(wait));
    (!span.is_disabled()).then(|| Box::new(span))
}

/// The first step of a call made `at`, when it is first polled: re-enter a
/// lock held around it, or start taking the lock.
fn start<'a, T, E>(
    client: &ClientRef<'a>,
    key: String,
    options: LockOptions,
    at: &'static Location<'static>,
) -> Result<Phase<'a, T, E>, LockError> {
    let inner = &client.inner;
    let parent = ownership::innermost();
    let kind = match Kind::of(&options) {
        Ok(kind) => kind,
        Err(message) => return Err(LockError::Invalid { key, message }),
    };
    if let Some(turn_of) = ownership::held(&inner.tag, &key) {
        let held = turn_of.held().kind;
        return match held.reenters(kind) {
            Ok(true) => {
                let outer = parent.expect("a held lock is in a chain");
                reenter(client, key, &options, turn_of, outer)
            }
            Ok(false) => Err(LockError::KindMismatch {
                key,
                asked: kind.name(),
                found: format!("{}, held around this call", held.name()),
                found_by: KindFoundBy::HeldAround,
            }),
            Err(message) => Err(LockError::Invalid { key, message }),
        };
    }
    if inner.tag.life.is_closed() {
        return Err(LockError::ShutDown { key });
    }
    if ownership::held_elsewhere(&inner.tag, &key) {
        return Err(LockError::Invalid {
            key,
            message: "the body holds this lock through another client of the same Redis: \
                      a nested call through this client would wait for the body's own hold; \
                      make the nested call on the client that took the lock",
        });
    }
    if key.len() == inner.prefix.len() {
        return Err(LockError::Invalid {
            key,
            message: "the key is empty",
        });
    }
    let lease = options.lease_or(inner.lease).min(LockOptions::LONGEST);
    if lease < LockOptions::SHORTEST_LEASE {
        return Err(LockError::Invalid {
            key,
            message:
                "the lease must be at least 10 ms (shorter ones end within the clock-drift margin)",
        });
    }
    let waiter_lease = options.waiter_lease_or_default().min(LockOptions::LONGEST);
    if waiter_lease < LockOptions::SHORTEST_LEASE {
        return Err(LockError::Invalid {
            key,
            message: "the waiter lease must be at least 10 ms",
        });
    }
    if let Some(message) = inner.backend.refuses(kind) {
        return Err(LockError::Invalid { key, message });
    }
    if let Some(check) = &inner.kind_check {
        let label = options.label_name();
        check.note(&key, Use { kind, at, label })?;
    }
    let wait = options.wait_or(inner.wait).min(LockOptions::LONGEST);
    let term = Term {
        lease,
        drift: lease.mul_f64(inner.drift_factor) + Duration::from_millis(2),
        renew: options.renews(),
        label: options.label_name().unwrap_or(UNLABELLED),
        kind,
        waiter_lease,
    };
    // Chosen here, in the caller's task: a connection of the caller's
    // runtime if it has one.
    let lane = inner.backend.lane();
    let request = Request {
        key,
        parent,
        term,
        wait,
        lane,
    };
    let lent = client.lend();
    Ok(Phase::Acquiring(Box::pin(async move {
        acquire::acquire(&lent, request).await
    })))
}

/// Re-enters the lock `turn_of` holds around the call (made in the chain
/// `outer`): at once if no other call made side by side has its turn,
/// otherwise after that call, waiting up to the call's `wait`.
fn reenter<'a, T, E>(
    client: &ClientRef<'a>,
    key: String,
    options: &LockOptions,
    turn_of: Frame,
    outer: Frame,
) -> Result<Phase<'a, T, E>, LockError> {
    telemetry::reentered(options.label_name().unwrap_or(UNLABELLED));
    match turn_of.turn().try_take() {
        Take::Taken => Ok(Phase::Reentered(Frame::reentered(turn_of, outer))),
        Take::Ended => Err(detached(key)),
        Take::Busy => {
            let wait = options.wait_or(client.inner.wait).min(LockOptions::LONGEST);
            let lent = client.lend();
            let turning = async move { wait_turn(&lent, key, turn_of, outer, wait).await };
            Ok(Phase::Turning(Box::pin(turning)))
        }
    }
}

/// Waits up to `wait` for `turn_of`'s turn, behind the calls made side by
/// side with this one that came first.
async fn wait_turn(
    client: &LockClient,
    key: String,
    turn_of: Frame,
    outer: Frame,
    wait: Duration,
) -> Result<Frame, LockError> {
    let start = Instant::now();
    // On the client's runtime's timer: the caller's runtime may have none.
    let sleep = client.inner.io.sleep_until(start + wait);
    let taken = tokio::select! {
        biased;
        taken = turn_of.turn().take() => taken,
        () = sleep => return Err(LockError::Timeout {
            key,
            waited: start.elapsed(),
            held_by: HeldBy::Sibling,
        }),
    };
    if taken {
        Ok(Frame::reentered(turn_of, outer))
    } else {
        Err(detached(key))
    }
}

/// One poll of the body in `frame`'s scope (see [`watch`]), with `in_body`
/// set while it runs.
fn poll_in<T, E, F>(
    frame: &Frame,
    body: Pin<&mut Option<F>>,
    in_body: &mut bool,
    cx: &mut Context<'_>,
) -> Poll<Step<T, E>>
where
    F: Future<Output = Result<T, E>>,
{
    *in_body = true;
    let polled = ownership::within(frame, || watch(frame, body, cx));
    *in_body = false;
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

/// The error of a nested call on `key` made or polled after the hold it
/// re-entered ended.
fn detached(key: String) -> LockError {
    LockError::Lost {
        key,
        reason: Loss::DETACHED.reason,
        found_by: Loss::DETACHED.found_by,
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
fn finish<O: Outcome<T, E>, T, E>(
    held: &HeldLock,
    result: Result<T, E>,
    released: Released,
) -> O::Output {
    let reason = match released {
        Released::Freed => {
            telemetry::released(held);
            return O::body(result);
        }
        // The body outlived its lease, or the lock was erased or taken
        // while the body ran (a Redis restart, say, before any renewal could
        // notice).
        Released::NotHeld => match held.check_now() {
            Some(Loss {
                reason: LossReason::Expired,
                ..
            }) => LossReason::Expired,
            _ => LossReason::Taken,
        },
        Released::Unknown => LossReason::Unconfirmed,
    };
    let loss = Loss::new(reason, FoundBy::Release);
    telemetry::lost(held, loss);
    O::lock(lost(held, loss))
}
