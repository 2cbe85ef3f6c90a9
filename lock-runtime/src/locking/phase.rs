//! Where a locked call is ([`Phase`]), and the steps that lead into a
//! hold: the first poll's checks and the start of the acquire, re-entering
//! a hold around the call (at once, or after the calls made side by side
//! with it), and a lock just taken entering its frame.

use std::future::Future;
use std::panic::Location;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Span;

use super::acquire::{self, Request};
use super::release::{release_later, Released};
use crate::client::{ClientRef, Inner, LockClient};
use crate::error::{HeldBy, KindFoundBy, LockError};
use crate::held::{Frame, Grant, HeldLock, Loss};
use crate::kind::Kind;
use crate::kind_check::Use;
use crate::options::LockOptions;
use crate::ownership;
use crate::route::Lane;
use crate::telemetry::{self, UNLABELLED};
use crate::turn::Take;

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
pub(super) enum Phase<'a, T, E> {
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

/// The first step of a call made `at`, when it is first polled: re-enter a
/// lock held around it, or start taking the lock.
pub(super) fn start<'a, T, E>(
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
    if options.held_at_least().is_some() && kind != Kind::Exclusive {
        let message = "hold_at_least with mode = read, permits or fair: only a plain or \
                       write lock stays taken after its body; drop one of them";
        return Err(LockError::Invalid { key, message });
    }
    if let Some(turn_of) = ownership::held(&inner.tag, &key) {
        return reenter_around(client, key, &options, (kind, turn_of), parent);
    }
    let grant = admit(inner, &key, &options, kind)?;
    note_kind(inner, [key.as_str()], &options, kind, at)?;
    let wait = options.wait_or(inner.wait).min(LockOptions::LONGEST);
    // Chosen here, in the caller's task: a connection of the caller's
    // runtime if it has one.
    let lane = inner.backend.lane();
    let request = Request {
        key,
        parent,
        grant,
        wait,
        lane,
    };
    let lent = client.lend();
    Ok(Phase::Acquiring(Box::pin(async move {
        acquire::acquire(&lent, request).await
    })))
}

/// The client's kind check (a debug build's, see
/// [`LockClientBuilder::kind_check`](crate::LockClientBuilder::kind_check))
/// of a call that takes every key of `keys` as `kind`: all checked, then all
/// recorded.
pub(super) fn note_kind<'k>(
    inner: &Inner,
    keys: impl IntoIterator<Item = &'k str, IntoIter: Clone>,
    options: &LockOptions,
    kind: Kind,
    at: &'static Location<'static>,
) -> Result<(), LockError> {
    let Some(check) = &inner.kind_check else {
        return Ok(());
    };
    let label = options.label_name();
    check.note_all(keys.into_iter(), Use { kind, at, label })
}

/// The grant a new acquisition of `key` of `kind` asks for, as `options` and the
/// client's defaults set them; or why the client takes no such lock now:
/// it is shut down, or the call is invalid. (The kind check is
/// [`note_kind`]'s, once every key is admitted.)
pub(super) fn admit(
    inner: &Inner,
    key: &str,
    options: &LockOptions,
    kind: Kind,
) -> Result<Grant, LockError> {
    if inner.tag.life.is_closed() {
        return Err(LockError::ShutDown { key: key.into() });
    }
    let invalid = |message| LockError::Invalid {
        key: key.into(),
        message,
    };
    if ownership::held_elsewhere(&inner.tag, key) {
        return Err(invalid(
            "the body holds this lock through another client of the same Redis: \
             a nested call through this client would wait for the body's own hold; \
             make the nested call on the client that took the lock",
        ));
    }
    if key.len() == inner.prefix.len() {
        return Err(invalid("the key is empty"));
    }
    let (lease, waiter_lease) = leases(inner, options).map_err(invalid)?;
    if let Some(message) = inner.backend.refuses(kind) {
        return Err(invalid(message));
    }
    Ok(Grant {
        lease,
        drift: lease.mul_f64(inner.drift_factor) + Duration::from_millis(2),
        renew: options.renews(),
        label: options.label_name().unwrap_or(UNLABELLED),
        kind,
        waiter_lease,
        hold_at_least: options
            .held_at_least()
            .filter(|hold| !hold.is_zero())
            .map(|hold| hold.min(LockOptions::LONGEST)),
    })
}

/// The lease and the waiter lease of a call with `options`, or what is
/// wrong with them.
fn leases(inner: &Inner, options: &LockOptions) -> Result<(Duration, Duration), &'static str> {
    let lease = options.lease_or(inner.lease).min(LockOptions::LONGEST);
    if lease < LockOptions::SHORTEST_LEASE {
        return Err(
            "the lease must be at least 10 ms (shorter ones end within the clock-drift margin)",
        );
    }
    let waiter_lease = options.waiter_lease_or_default().min(LockOptions::LONGEST);
    if waiter_lease < LockOptions::SHORTEST_LEASE {
        return Err("the waiter lease must be at least 10 ms");
    }
    Ok((lease, waiter_lease))
}

/// A call on `key` asking for `kind` inside the hold `turn_of` of the same
/// key, made in the chain `parent`: re-enters it, or fails when the kinds
/// do not match or the call would upgrade a read hold.
fn reenter_around<'a, T, E>(
    client: &ClientRef<'a>,
    key: String,
    options: &LockOptions,
    (kind, turn_of): (Kind, Frame),
    parent: Option<Frame>,
) -> Result<Phase<'a, T, E>, LockError> {
    reenters(&turn_of, kind, &key)?;
    let outer = parent.expect("a held lock is in a chain");
    reenter(client, key, options, turn_of, outer)
}

/// Whether the hold `frame` around a call lets a call of `kind` on `key`
/// in, one key or a key of a set: not when the kinds differ, nor to
/// upgrade a read hold.
pub(super) fn reenters(frame: &Frame, kind: Kind, key: &str) -> Result<(), LockError> {
    let held = frame.held().kind;
    match held.reenters(kind) {
        Ok(true) => Ok(()),
        Ok(false) => Err(LockError::KindMismatch {
            key: key.to_owned(),
            asked: kind.name(),
            found: format!("{}, held around this call", held.name()),
            found_by: KindFoundBy::HeldAround,
        }),
        Err(message) => Err(LockError::Invalid {
            key: key.to_owned(),
            message,
        }),
    }
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
pub(super) async fn wait_turn(
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

/// The error of a nested call on `key` made or polled after the hold it
/// re-entered ended.
fn detached(key: String) -> LockError {
    LockError::Lost {
        key,
        reason: Loss::DETACHED.reason,
        found_by: Loss::DETACHED.found_by,
    }
}

/// A lock just taken, as the frame its body runs in: registered with the
/// watchdog, then checked against a shutdown. Registered first: a shutdown
/// that closes after the check finds the lock among the registered ones,
/// and one that closed before it is seen here, and the lock is given back.
pub(super) fn enter_hold(client: &LockClient, held: HeldLock) -> Result<Frame, LockError> {
    let held = Arc::new(held);
    client.inner.registry.register(held.clone());
    if client.inner.tag.life.is_closed() {
        client.inner.registry.unregister(held.id);
        let key = held.key.clone();
        // Lost to the shutdown: its body never runs, so no hold is kept.
        held.lose(Loss::SHUT_DOWN);
        release_later(client, held, Lane::Home);
        return Err(LockError::ShutDown { key });
    }
    Ok(Frame::Taken(held))
}

/// The span of a call on `key` with `options`, if a subscriber records it.
pub(super) fn call_span(
    client: &LockClient,
    key: &str,
    options: &LockOptions,
) -> Option<Box<Span>> {
    let label = options.label_name().unwrap_or(UNLABELLED);
    let (lease, wait) = (client.inner.lease, client.inner.wait);
    let span = telemetry::span(key, label, options.lease_or(lease), options.wait_or(wait));
    (!span.is_disabled()).then(|| Box::new(span))
}
