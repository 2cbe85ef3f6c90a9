//! One locked call: re-enter or acquire (waiting for wake-ups), run the body
//! while watching for loss, release.

use std::future::Future;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{Acquire, BackendError, Release};
use crate::held::{HeldLock, Term};
use crate::{ownership, LockClient, LockError, LockOptions, LossReason};

/// How long a waiter sleeps when the holder's lock has no expiry (someone
/// changed the key by hand), before it tries again.
const NO_TTL_RETRY: Duration = Duration::from_millis(100);

/// Runs `body` under the lock `key` (a full backend key) of `client`.
pub(crate) async fn run<T, E, F>(
    client: &LockClient,
    key: String,
    options: LockOptions,
    body: F,
) -> Result<T, E>
where
    F: Future<Output = Result<T, E>>,
    E: From<LockError>,
{
    let inner = &client.inner;
    if let Some(held) = ownership::held(&inner.id, &key) {
        return watch(&held, body).await;
    }
    if key.len() == inner.prefix.len() {
        return Err(E::from(LockError::Invalid {
            key,
            message: "the key is empty",
        }));
    }
    let lease = options.lease_or(inner.lease);
    if lease < Duration::from_millis(1) {
        return Err(E::from(LockError::Invalid {
            key,
            message: "the lease must be at least 1 ms",
        }));
    }
    let wait = options.wait_or(inner.wait);
    let parent = ownership::innermost();
    let owner = match &parent {
        Some(parent) => parent.owner.clone(),
        None => client.new_owner(),
    };
    // Boxed: the acquire state is large, and unboxed it would stay in the
    // call's future for as long as the lock is held.
    let acquiring = acquire(client, key, (owner, parent), lease, wait, options.renews());
    let held = Arc::new(Box::pin(acquiring).await?);
    let guard = ReleaseGuard {
        client,
        held: held.clone(),
        armed: true,
    };
    inner.registry.register(held.clone());
    let result = ownership::enter(held.clone(), watch(&held, body)).await;
    let held_to_the_end = guard.release().await;
    if held_to_the_end {
        return result;
    }
    // The body finished, but the release found the lock gone (a Redis
    // restart, say, before any renewal could notice): mutual exclusion may
    // not have held, which matters more than what the body returned.
    match result {
        Err(lost) if held.is_lost() => Err(lost),
        _ => Err(E::from(LockError::Lost {
            key: held.key.to_string(),
            reason: LossReason::Taken,
        })),
    }
}

/// Polls `body` until it ends or the lock is lost, whichever comes first.
///
/// Before every poll of the body the lock's validity is checked against the
/// clock, so a body resumed after a pause past its lease (a stopped process,
/// a starved runtime) is stopped before it runs on, even if the timer that
/// marks the loss has not fired yet.
async fn watch<T, E, F>(held: &HeldLock, body: F) -> Result<T, E>
where
    F: Future<Output = Result<T, E>>,
    E: From<LockError>,
{
    let lost = held.lost();
    tokio::pin!(lost, body);
    std::future::poll_fn(|cx| {
        let reason = match held.check_now() {
            Some(reason) => Some(reason),
            None => match lost.as_mut().poll(cx) {
                Poll::Ready(reason) => Some(reason),
                Poll::Pending => None,
            },
        };
        match reason {
            Some(reason) => Poll::Ready(Err(E::from(LockError::Lost {
                key: held.key.to_string(),
                reason,
            }))),
            None => body.as_mut().poll(cx),
        }
    })
    .await
}

/// Takes the lock, waiting up to `wait` for wake-ups from releases or for the
/// holder's lease to run out.
async fn acquire(
    client: &LockClient,
    key: String,
    (owner, parent): (Arc<str>, Option<Arc<HeldLock>>),
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
    let held = |key: String, owner: Arc<str>, token: u64, sent: Instant| {
        let id = client.new_lock_id();
        let chain = (inner.id.clone(), parent);
        HeldLock::new(id, chain, (key, prefix), owner, term, token, sent)
    };
    let failed = |key: &str, error| backend_error(key, error);

    // Try at once, unless others here already wait for this key: then queue
    // behind them. A zero wait always tries once.
    if wait.is_zero() || !inner.waiters.is_waited(&key) {
        match attempt(client, &key, &owner, lease).await {
            Ok(Acquire::Acquired(token)) => return Ok(held(key, owner, token, start)),
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
    // need it, while the call's future lives as long as the lock is held.
    let (token, sent) = Box::pin(wait_in_line(client, &key, &owner, lease, start, wait)).await?;
    Ok(held(key, owner, token, sent))
}

/// Waits in this client's line for `key` until the lock is taken (its token
/// and when the winning request was sent) or `wait` is over.
async fn wait_in_line(
    client: &LockClient,
    key: &str,
    owner: &Arc<str>,
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
                    retry_at = (Instant::now() + ttl).min(deadline);
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
/// this owner's hold follows it on the same connection, so the lock is not
/// left to its lease.
async fn attempt(
    client: &LockClient,
    key: &str,
    owner: &Arc<str>,
    lease: Duration,
) -> Result<Acquire, BackendError> {
    struct InFlight<'a> {
        client: &'a LockClient,
        key: &'a str,
        owner: &'a Arc<str>,
        done: bool,
    }
    impl Drop for InFlight<'_> {
        fn drop(&mut self) {
            if self.done {
                return;
            }
            let client = self.client.clone();
            let (key, owner) = (self.key.to_owned(), self.owner.clone());
            self.client.inner.io.spawn(async move {
                let _ = client.inner.backend.release(&key, &owner, 0).await;
            });
        }
    }
    let mut in_flight = InFlight {
        client,
        key,
        owner,
        done: false,
    };
    // Boxed: the request's state is large and short-lived; unboxed it would
    // stay in the call's future for as long as the lock is held.
    let outcome = Box::pin(client.inner.backend.acquire(key, owner, lease)).await;
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

/// Releases the lock: awaited when the body ends, in the background when the
/// call is dropped (cancelled, panicked) or the lock is known lost.
struct ReleaseGuard<'a> {
    client: &'a LockClient,
    held: Arc<HeldLock>,
    armed: bool,
}

impl ReleaseGuard<'_> {
    /// Releases now; false when the release found the lock not held.
    async fn release(mut self) -> bool {
        self.client.inner.registry.unregister(self.held.id);
        if self.held.is_lost() {
            // Redis may be unreachable: do not make the caller wait for it.
            return false;
        }
        let outcome = release(self.client, &self.held).await;
        self.armed = false;
        outcome != Some(Release::NotHeld)
    }
}

impl Drop for ReleaseGuard<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.client.inner.registry.unregister(self.held.id);
        let client = self.client.clone();
        let held = self.held.clone();
        self.client
            .inner
            .io
            .spawn(async move { release(&client, &held).await });
    }
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

/// Gives the hold back; `None` when the backend failed (the lock then
/// expires with its lease).
async fn release(client: &LockClient, held: &HeldLock) -> Option<Release> {
    let inner = &client.inner;
    let releasing = inner.backend.release(&held.key, &held.owner, held.token);
    // Boxed for the same reason as the acquire request.
    match Box::pin(releasing).await {
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
