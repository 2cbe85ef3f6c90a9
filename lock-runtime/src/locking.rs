//! One locked call: re-enter or acquire (waiting for wake-ups), run the body
//! while watching for loss, release.

use std::future::Future;
use std::mem;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;
use tokio::time::Instant;

use crate::backend::{Acquire, BackendError, Release, Route};
use crate::held::{HeldLock, Term};
use crate::ownership::{self, OwnerId};
use crate::{LockClient, LockError, LockOptions, LossReason};

/// How long a waiter sleeps when the holder's lock has no expiry (someone
/// changed the key by hand), before it tries again.
const NO_TTL_RETRY: Duration = Duration::from_millis(100);

/// Runs `body` under the lock `key` (a full backend key) of `client`.
pub(crate) fn run<T, E, F>(
    client: &LockClient,
    key: String,
    options: LockOptions,
    body: F,
) -> Locked<'_, F, T, E>
where
    F: Future<Output = Result<T, E>>,
    E: From<LockError>,
{
    Locked {
        client,
        phase: Phase::Start { key, options },
        body: Some(body),
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
    pub(crate) struct Locked<'a, F, T, E> {
        client: &'a LockClient,
        phase: Phase<'a, T, E>,
        // `None` once the call has ended, or the lock was lost.
        #[pin]
        body: Option<F>,
    }

    impl<'a, F, T, E> PinnedDrop for Locked<'a, F, T, E> {
        fn drop(this: Pin<&mut Self>) {
            let mut this = this.project();
            let held = match mem::replace(this.phase, Phase::Done) {
                Phase::Holding(held) => {
                    // In the lock's scope, where the body ran.
                    ownership::drop_within(&held, || this.body.set(None));
                    held
                }
                // The release may not have reached the backend.
                Phase::Releasing { held, .. } => held,
                _ => return,
            };
            let client = this.client;
            client.inner.registry.unregister(held.id);
            let owned = client.clone();
            client
                .inner
                .io
                .spawn(async move { release(&owned, held).await });
        }
    }
}

/// Taking the lock: boxed, so that its state is not kept while the lock is
/// held, and a trait object, since an `async fn`'s future type has no name.
type Acquiring<'a> = Pin<Box<dyn Future<Output = Result<HeldLock, LockError>> + Send + 'a>>;

/// Giving the lock back (see [`release`]).
type Releasing<'a> = Pin<Box<dyn Future<Output = Option<Release>> + Send + 'a>>;

/// Where a [`Locked`] call is.
enum Phase<'a, T, E> {
    /// Not polled yet: whether the lock is held around the call is known
    /// only when it runs.
    Start {
        key: String,
        options: LockOptions,
    },
    Acquiring(Acquiring<'a>),
    /// The body runs under the lock that this call took.
    Holding(Arc<HeldLock>),
    /// The body runs under the same lock, held around this call.
    Reentered(Arc<HeldLock>),
    /// The body has ended with `result`; the lock is being released.
    Releasing {
        held: Arc<HeldLock>,
        releasing: Releasing<'a>,
        result: Result<T, E>,
    },
    Done,
}

impl<F, T, E> Future for Locked<'_, F, T, E>
where
    F: Future<Output = Result<T, E>>,
    E: From<LockError>,
{
    type Output = Result<T, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let client = *this.client;
        loop {
            match this.phase {
                Phase::Start { .. } => {
                    let Phase::Start { key, options } = mem::replace(this.phase, Phase::Done)
                    else {
                        unreachable!()
                    };
                    match start(client, key, options) {
                        Ok(phase) => *this.phase = phase,
                        Err(error) => {
                            this.body.set(None);
                            return Poll::Ready(Err(E::from(error)));
                        }
                    }
                }
                Phase::Acquiring(acquiring) => match ready!(acquiring.as_mut().poll(cx)) {
                    Ok(held) => {
                        let held = Arc::new(held);
                        client.inner.registry.register(held.clone());
                        *this.phase = Phase::Holding(held);
                    }
                    Err(error) => {
                        *this.phase = Phase::Done;
                        this.body.set(None);
                        return Poll::Ready(Err(E::from(error)));
                    }
                },
                Phase::Reentered(held) => {
                    // No waker to leave: the call that took the lock runs
                    // this one inside its body, and stops it on loss.
                    let result = ready!(watch(held, this.body.as_mut(), cx));
                    *this.phase = Phase::Done;
                    this.body.set(None);
                    return Poll::Ready(result);
                }
                Phase::Holding(held) => {
                    held.wake_on_loss(cx.waker());
                    let mut body = this.body.as_mut();
                    let result = ready!(ownership::within(held, || {
                        let result = ready!(watch(held, body.as_mut(), cx));
                        body.set(None);
                        Poll::Ready(result)
                    }));
                    let Phase::Holding(held) = mem::replace(this.phase, Phase::Done) else {
                        unreachable!()
                    };
                    client.inner.registry.unregister(held.id);
                    if held.is_lost() {
                        // Redis may be unreachable: do not make the caller
                        // wait for it.
                        return Poll::Ready(finish(&held, result, false));
                    }
                    *this.phase = Phase::Releasing {
                        releasing: Box::pin(release(client, held.clone())),
                        held,
                        result,
                    };
                }
                Phase::Releasing { releasing, .. } => {
                    let outcome = ready!(releasing.as_mut().poll(cx));
                    let Phase::Releasing { held, result, .. } =
                        mem::replace(this.phase, Phase::Done)
                    else {
                        unreachable!()
                    };
                    let held_to_the_end = outcome != Some(Release::NotHeld);
                    return Poll::Ready(finish(&held, result, held_to_the_end));
                }
                Phase::Done => panic!("a locked call was polled after it returned"),
            }
        }
    }
}

/// The first step of a call, when it is first polled: re-enter a lock held
/// around it, or start taking the lock.
fn start<'a, T, E>(
    client: &'a LockClient,
    key: String,
    options: LockOptions,
) -> Result<Phase<'a, T, E>, LockError> {
    let inner = &client.inner;
    if let Some(held) = ownership::held(&inner.id, &key) {
        return Ok(Phase::Reentered(held));
    }
    if key.len() == inner.prefix.len() {
        return Err(LockError::Invalid {
            key,
            message: "the key is empty",
        });
    }
    let lease = options.lease_or(inner.lease).min(LockOptions::LONGEST);
    if lease < Duration::from_millis(1) {
        return Err(LockError::Invalid {
            key,
            message: "the lease must be at least 1 ms",
        });
    }
    let wait = options.wait_or(inner.wait).min(LockOptions::LONGEST);
    let parent = ownership::innermost();
    let owner = match &parent {
        Some(parent) => parent.owner,
        None => client.new_owner(),
    };
    let renew = options.renews();
    let acquiring = acquire(client, key, (owner, parent), lease, wait, renew);
    Ok(Phase::Acquiring(Box::pin(acquiring)))
}

/// One poll of the body, unless the lock is found lost.
///
/// Before every poll of the body the lock's validity is checked against the
/// clock, so a body resumed after a pause past its lease (a stopped process,
/// a starved runtime) is stopped before it runs on, even if the watchdog has
/// not marked the loss yet.
fn watch<T, E, F>(
    held: &HeldLock,
    body: Pin<&mut Option<F>>,
    cx: &mut Context<'_>,
) -> Poll<Result<T, E>>
where
    F: Future<Output = Result<T, E>>,
    E: From<LockError>,
{
    if let Some(reason) = held.check_now() {
        return Poll::Ready(Err(E::from(LockError::Lost {
            key: held.key.clone(),
            reason,
        })));
    }
    let body = body
        .as_pin_mut()
        .expect("the body runs until the call ends");
    body.poll(cx)
}

/// The call's result, once the lock is given back: the body's, unless the
/// lock was not held to the end.
fn finish<T, E: From<LockError>>(
    held: &HeldLock,
    result: Result<T, E>,
    held_to_the_end: bool,
) -> Result<T, E> {
    if held_to_the_end {
        return result;
    }
    // The body finished, but the release found the lock gone (a Redis
    // restart, say, before any renewal could notice): mutual exclusion may
    // not have held, which matters more than what the body returned.
    match result {
        Err(lost) if held.is_lost() => Err(lost),
        _ => Err(E::from(LockError::Lost {
            key: held.key.clone(),
            reason: LossReason::Taken,
        })),
    }
}

/// Takes the lock, waiting up to `wait` for wake-ups from releases or for the
/// holder's lease to run out.
async fn acquire(
    client: &LockClient,
    key: String,
    (owner, parent): (u64, Option<Arc<HeldLock>>),
    lease: Duration,
    wait: Duration,
    renew: bool,
) -> Result<HeldLock, LockError> {
    let inner = &client.inner;
    let start = Instant::now();
    let prefix = inner.prefix.len();
    let term = Term {
        lease,
        drift: lease.mul_f64(inner.drift_factor) + Duration::from_millis(2),
        renew,
    };
    let owner_id = OwnerId::new(&inner.id, owner);
    let held = |key: String, token: u64, sent: Instant| {
        let id = client.new_lock_id();
        let chain = (inner.id.clone(), parent);
        HeldLock::new(id, chain, (key, prefix), owner, term, token, sent)
    };
    let failed = |key: &str, error| backend_error(key, error);

    // Try at once, unless others here already wait for this key: then queue
    // behind them. A zero wait always tries once.
    if wait.is_zero() || !inner.waiters.is_waited(&key) {
        match attempt(client, &key, &owner_id, lease).await {
            Ok(Acquire::Acquired(token)) => return Ok(held(key, token, start)),
            Ok(Acquire::Held(_)) if wait.is_zero() => {
                return Err(LockError::Timeout {
                    key,
                    waited: start.elapsed(),
                })
            }
            Ok(Acquire::Held(_)) => {}
            Err(source) => return Err(failed(&key, source)),
        }
    }

    // The waiting part is boxed: its state is large, and only contended calls
    // need it.
    let waiting = wait_in_line(client, &key, &owner_id, lease, start, wait);
    let (token, sent) = Box::pin(waiting).await?;
    Ok(held(key, token, sent))
}

/// Waits in this client's line for `key` until the lock is taken (its token
/// and when the winning request was sent) or `wait` is over.
async fn wait_in_line(
    client: &LockClient,
    key: &str,
    owner: &OwnerId,
    lease: Duration,
    start: Instant,
    wait: Duration,
) -> Result<(u64, Instant), LockError> {
    let inner = &client.inner;
    let failed = |error| backend_error(key, error);
    let deadline = start + wait;
    let ticket = inner.waiters.join(key);
    if let Err(source) = subscribe(client, key).await {
        return Err(failed(source));
    }
    // When the head tries again without news: the holder's expiry.
    let mut retry_at = deadline;
    loop {
        // Listen before trying, so a release in between counts.
        let notified = ticket.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let head = ticket.is_head();
        if head {
            let sent = Instant::now();
            match attempt(client, key, owner, lease).await {
                Ok(Acquire::Acquired(token)) => {
                    ticket.acquired();
                    return Ok((token, sent));
                }
                Ok(Acquire::Held(ttl)) => {
                    let ttl = ttl.unwrap_or(NO_TTL_RETRY).max(Duration::from_millis(1));
                    // A TTL set by hand may be beyond any deadline.
                    retry_at = Instant::now()
                        .checked_add(ttl)
                        .map_or(deadline, |at| at.min(deadline));
                }
                Err(source) => return Err(failed(source)),
            }
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(LockError::Timeout {
                key: key.to_owned(),
                waited: now - start,
            });
        }
        let wake_at = if head { retry_at } else { deadline };
        tokio::select! {
            () = &mut notified => {}
            () = tokio::time::sleep_until(wake_at) => {}
        }
    }
}

/// One acquire request. If the call is dropped while the request is in
/// flight, the request may still take the lock in the backend: a release of
/// this owner's hold follows it on the same connection (the same route), so
/// the lock is not left to its lease.
async fn attempt(
    client: &LockClient,
    key: &str,
    owner: &OwnerId,
    lease: Duration,
) -> Result<Acquire, BackendError> {
    struct InFlight<'a> {
        client: &'a LockClient,
        route: &'a Route,
        key: &'a str,
        owner: &'a OwnerId,
        done: bool,
    }
    impl Drop for InFlight<'_> {
        fn drop(&mut self) {
            if self.done {
                return;
            }
            let client = self.client.clone();
            let (route, key, owner) = (self.route.clone(), self.key.to_owned(), *self.owner);
            self.client.inner.io.spawn(async move {
                let backend = &client.inner.backend;
                let released = backend.release(&route, &key, &owner, 0).await;
                if released.is_err() && matches!(route, Route::Local(..)) {
                    // The caller's runtime, which drives that connection, has
                    // ended or does not run (the command timed out): by now
                    // the acquire has landed or never left, so the client's
                    // connection can follow it.
                    let _ = backend.release(&Route::Home, &key, &owner, 0).await;
                }
            });
        }
    }
    let route = client.inner.backend.route();
    let mut in_flight = InFlight {
        client,
        route: &route,
        key,
        owner,
        done: false,
    };
    let outcome = client
        .inner
        .backend
        .acquire(&route, key, owner, lease)
        .await;
    in_flight.done = true;
    outcome
}

/// Makes sure releases of `key` by other clients wake this one.
async fn subscribe(client: &LockClient, key: &str) -> Result<(), BackendError> {
    let inner = &client.inner;
    let mut subscribed = inner.subscribed.lock().await;
    if !subscribed.contains(key) {
        inner.backend.watch_releases(key).await?;
        subscribed.insert(key.into());
    }
    Ok(())
}

/// The error for a backend failure on `key`.
fn backend_error(key: &str, error: BackendError) -> LockError {
    match error {
        BackendError::Redis(source) => LockError::Backend {
            key: key.to_owned(),
            source,
        },
        BackendError::NoQuorum {
            needed,
            reached,
            failures,
        } => LockError::NoQuorum {
            key: key.to_owned(),
            needed,
            reached,
            failures,
        },
    }
}

/// Gives the hold back: awaited when the body ends, in the background when
/// the call is dropped (cancelled, or the body panicked). `None` when the
/// backend failed (the lock then expires with its lease).
async fn release(client: &LockClient, held: Arc<HeldLock>) -> Option<Release> {
    let inner = &client.inner;
    let owner = held.owner_id();
    // Polled in the caller's task, the caller's runtime's connection if it
    // has one; polled by the client's runtime (a dropped call), the client's.
    let route = inner.backend.route();
    match inner
        .backend
        .release(&route, &held.key, &owner, held.token)
        .await
    {
        Ok(outcome) => {
            // Not held any more (it was lost): the waiters here have no
            // release to wait for, so they should try too.
            if outcome != Release::StillHeld {
                inner.waiters.wake_release(held.key.as_bytes(), held.token);
            }
            Some(outcome)
        }
        Err(error) => {
            let error = backend_error(&held.key, error);
            tracing::warn!(%error, "release failed; the lock expires with its lease");
            inner.waiters.wake_release(held.key.as_bytes(), 0);
            None
        }
    }
}
