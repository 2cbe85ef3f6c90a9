//! Taking a lock: try at once, or wait in this client's line for wake-ups
//! from releases or for the holder's lease to run out.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::client::LockClient;
use crate::error::{HeldBy, LockError};
use crate::held::{Frame, Grant, HeldLock};
use crate::kind::{kind_mismatch, Acquire, Claim, Kind};
use crate::locking::give_back;
use crate::locking::release::release_later;
use crate::owner_id::OwnerId;
use crate::route::{BackendError, Lane};
use crate::telemetry;

/// How long a waiter sleeps when the holder's lock has no expiry (someone
/// changed the key by hand), before it tries again.
const NO_TTL_RETRY: Duration = Duration::from_millis(100);

/// When a waiter refused at `now` by a holder with `ttl` left (`None`: no
/// expiry) tries again, at the latest at `deadline` (a TTL set by hand may
/// be beyond any deadline); one key or a set.
pub(super) fn next_try(now: Instant, ttl: Option<Duration>, deadline: Instant) -> Instant {
    let ttl = ttl.unwrap_or(NO_TTL_RETRY).max(Duration::from_millis(1));
    now.checked_add(ttl).map_or(deadline, |at| at.min(deadline))
}

/// One call's request to take a lock.
pub(crate) struct Request {
    pub key: String,
    pub parent: Option<Frame>,
    pub grant: Grant,
    pub wait: Duration,
    /// The connection the call's requests take.
    pub lane: Lane,
}

/// Takes the lock for a new acquisition, waiting up to `wait`.
pub(crate) async fn acquire(client: &LockClient, request: Request) -> Result<HeldLock, LockError> {
    let mut outcome = Outcome {
        label: request.grant.label,
        start: Instant::now(),
        attempts: 0,
        known: false,
    };
    let taken = take(client, request, outcome.start, &mut outcome.attempts).await;
    outcome.known = true;
    let (label, start, attempts) = (outcome.label, outcome.start, outcome.attempts);
    match &taken {
        Ok(held) => telemetry::acquired(label, held.token, start, attempts),
        Err(LockError::Timeout { .. }) => telemetry::timed_out(label, start, attempts),
        Err(error) => telemetry::acquire_failed(label, error, attempts),
    }
    taken
}

/// How an acquire went, for its events; one dropped before it ended was
/// cancelled while it waited.
struct Outcome {
    label: &'static str,
    start: Instant,
    attempts: u32,
    known: bool,
}

impl Drop for Outcome {
    fn drop(&mut self) {
        if !self.known {
            telemetry::acquire_cancelled(self.label, self.start, self.attempts);
        }
    }
}

/// [`acquire`]'s steps; counts the requests sent in `attempts`.
async fn take(
    client: &LockClient,
    request: Request,
    start: Instant,
    attempts: &mut u32,
) -> Result<HeldLock, LockError> {
    let inner = &client.inner;
    let Request {
        key,
        parent,
        grant,
        wait,
        lane,
    } = request;
    let id = client.new_lock_id();
    // The acquisition's owner id; the checker's proof can make nested
    // calls share the outermost call's instead.
    let owner = match &parent {
        Some(parent) if cfg!(feature = "defect-shared-owner") => parent.held().owner_number(),
        _ => id,
    };
    let owner_id = OwnerId::new(&inner.tag.id, owner);
    // The hold that a granting answer to a request sent at `sent` gives:
    // the lock, or, when too few replicas acknowledged it, the hold to give
    // back and how many did.
    let won = |key: String, answer: Acquire, sent: Instant| {
        let chain = (inner.tag.clone(), parent);
        let prefix = inner.prefix.len();
        let acked = match answer {
            Acquire::NotReplicated { acked, .. } => Some(acked),
            _ => None,
        };
        let token = answer.token().expect("a refusal grants nothing");
        let since = match answer {
            Acquire::Timed { since, .. } => Some(since),
            _ => None,
        };
        let given = (token, since);
        (
            HeldLock::new(id, chain, (key, prefix), grant, given, sent),
            acked,
        )
    };
    let claim = Claim {
        kind: grant.kind,
        lease: grant.lease,
        waiter_lease: grant.waiter_lease,
        others_wait: false,
        timed: grant.hold_at_least.is_some(),
    };

    // Try at once, unless others here already wait for this key: then queue
    // behind them. A zero wait always tries once. A fair caller always
    // tries at once: its request takes its place in the line across
    // clients, which is the order it is served in.
    let mut queued = false;
    if wait.is_zero() || !inner.waiters.is_waited(&key) || claim.kind == Kind::Fair {
        *attempts += 1;
        match attempt(client, &lane, &key, &owner_id, (claim, start + wait)).await {
            Ok(refused @ (Acquire::Held(_) | Acquire::Queued { .. })) if wait.is_zero() => {
                telemetry::waiting(refused.holder_ttl(), *attempts);
                if matches!(refused, Acquire::Queued { .. }) {
                    // A place taken in a line is given up at once.
                    give_back_later(client, &lane, &key, &owner_id, claim);
                }
                return Err(timed_out(client, key, start.elapsed()));
            }
            Ok(Acquire::Held(ttl)) => telemetry::waiting(ttl, *attempts),
            Ok(Acquire::Queued { holder_ttl, .. }) => {
                telemetry::waiting(holder_ttl, *attempts);
                queued = true;
            }
            Ok(answer) => return settle(client, &lane, won(key, answer, start), start).await,
            Err(source) => return Err(failed(client, source, &key, claim.kind)),
        }
    }

    // The waiting part is boxed: its state is large, and only contended calls
    // need it.
    let line = Line {
        client,
        lane: &lane,
        key: &key,
        owner: &owner_id,
        owner_number: owner,
        claim,
        attempts,
    };
    let (answer, sent) = Box::pin(line.wait(start, start + wait, queued)).await?;
    settle(client, &lane, won(key, answer, sent), start).await
}

/// The lock; or, for a hold that only `acked` replicas acknowledged (too
/// few), the error once that hold is given back (the call began at
/// `start`).
async fn settle(
    client: &LockClient,
    lane: &Lane,
    (held, acked): (HeldLock, Option<usize>),
    start: Instant,
) -> Result<HeldLock, LockError> {
    match acked {
        None => Ok(held),
        Some(acked) => Err(not_replicated(client, lane, held, acked, start).await),
    }
}

/// The caller's error for a failed acquire request on `key`.
pub(super) fn failed(
    client: &LockClient,
    source: BackendError,
    key: &str,
    kind: Kind,
) -> LockError {
    let inner = &client.inner;
    kind_mismatch(&source, key, kind)
        .unwrap_or_else(|| inner.backend.error_on_key(source, key, &inner.tag.place))
}

/// A contended acquire.
struct Line<'a> {
    client: &'a LockClient,
    lane: &'a Lane,
    key: &'a str,
    owner: &'a OwnerId,
    /// The number in `owner`, by which a fair notice names the waiter.
    owner_number: u64,
    claim: Claim,
    /// Acquire requests sent so far by the call.
    attempts: &'a mut u32,
}

impl Line<'_> {
    /// Waits in this client's line for the key until a request is granted
    /// (its answer, and when it was sent) or `deadline`.
    ///
    /// Joining the line subscribes the client to the key's releases in the
    /// background; no step here waits for that. The line is woken when the
    /// subscription is confirmed, so a release before then is not missed.
    async fn wait(
        self,
        start: Instant,
        deadline: Instant,
        queued: bool,
    ) -> Result<(Acquire, Instant), LockError> {
        let inner = &self.client.inner;
        let fair = self.claim.kind == Kind::Fair;
        let ticket = inner.waiters.join(self.key, self.owner_number, fair);
        // A place the call keeps in a line in the backend (a fair waiter's
        // ticket, a writer's claim ahead of new readers), while armed:
        // dropped armed (the call gave up, failed or was cancelled), it is
        // withdrawn at once, in the background.
        let (client, lane, key, owner, claim) =
            (self.client, self.lane, self.key, self.owner, self.claim);
        let mut place = give_back::OnDrop::new(queued, || {
            give_back_later(client, lane, key, owner, claim);
        });
        // A place is kept alive by asking again at a third of its lease.
        let heartbeat = self.claim.waiter_lease / 3;
        let mut beat_at = Instant::now() + heartbeat;
        // When the head tries again without news: the holder's expiry.
        let mut retry_at = deadline;
        // Whether the last wake-up was the timer's (or the first pass).
        let mut timer = true;
        loop {
            // Listen before trying, so a release in between counts.
            let notified = ticket.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if inner.tag.life.is_closed() {
                return Err(LockError::ShutDown {
                    key: self.key.to_owned(),
                });
            }
            let head = ticket.is_head();
            let beat = place.armed && Instant::now() >= beat_at;
            // A fair hold of this client released: a waiter of another kind
            // is in no fair line, and no notice names it.
            let fair_freed = !fair && ticket.fair_released();
            // A release named another client's waiter, and no news came
            // since: that client tries first; this head, after a pause.
            let held_back = if timer { None } else { ticket.held_back() };
            if let Some(until) = held_back {
                retry_at = until.min(deadline);
            }
            let tries_now =
                held_back.is_none() && tries((head, place.armed), timer, ticket.named());
            if beat || fair_freed || tries_now {
                let sent = Instant::now();
                *self.attempts += 1;
                ticket.asking();
                let claim = Claim {
                    others_wait: ticket.others_wait(),
                    ..self.claim
                };
                let claimed = (claim, deadline);
                let answer = attempt(self.client, self.lane, self.key, self.owner, claimed);
                match answer.await {
                    Ok(refused @ (Acquire::Held(ttl) | Acquire::Queued { ttl, .. })) => {
                        // Only a refusal that kept a place needs a
                        // heartbeat; `Held` means there is none (any more).
                        place.armed = matches!(refused, Acquire::Queued { .. });
                        beat_at = Instant::now() + heartbeat;
                        telemetry::waiting(refused.holder_ttl(), *self.attempts);
                        retry_at = next_try(Instant::now(), ttl, deadline);
                    }
                    Ok(answer) => {
                        place.armed = false;
                        ticket.acquired(next_tries(&answer, self.claim.kind));
                        return Ok((answer, sent));
                    }
                    Err(source) => {
                        return Err(failed(self.client, source, self.key, self.claim.kind));
                    }
                }
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(timed_out(self.client, self.key.to_owned(), now - start));
            }
            let mut wake_at = if head { retry_at } else { deadline };
            if place.armed {
                wake_at = wake_at.min(beat_at);
            }
            // On the client's runtime's timer: the caller's runtime may have
            // none.
            let sleep = inner.io.sleep_until(wake_at);
            timer = tokio::select! {
                () = &mut notified => false,
                () = sleep => true,
            };
        }
    }
}

/// Whether a waiter tries now (apart from its heartbeat): the head tries
/// on its timer and on news, except news of a fair release that named
/// another waiter here (`named`: see [`crate::wakeup::Ticket::named`]),
/// which that waiter tries instead. A waiter that keeps a place in the
/// backend's line (`placed`) tries on other news too, even behind the
/// head: the backend may serve it first (a writer whose claim holds back
/// the reader at the head here).
fn tries((head, placed): (bool, bool), timer: bool, named: Option<bool>) -> bool {
    match named {
        Some(true) => true,
        Some(false) => head && timer,
        None => head || (placed && !timer),
    }
}

/// Whether the next waiter here tries at once when this one leaves the line
/// with the lock (`answer`, for a claim of `kind`): when there is room for
/// it too; and after a permit, always. The next waiter has never asked as
/// head, so it knows no holder's expiry to try again at (a permit that frees
/// unannounced, its holder's lease run out, would leave it waiting for its
/// deadline), and a notice that came while this waiter's request was out
/// found it behind this one: its one request learns both. The exclusive
/// lock's next head needs no such try: this holder's release wakes it.
fn next_tries(answer: &Acquire, kind: Kind) -> bool {
    match answer {
        Acquire::Shared { room, .. } => *room || matches!(kind, Kind::Permits(_)),
        _ => false,
    }
}

/// The error of a call that waited for `key` in vain, naming this client as
/// the holder when one of its own bodies holds the lock.
pub(super) fn timed_out(client: &LockClient, key: String, waited: Duration) -> LockError {
    let held_by = if client.inner.registry.holds(&key) {
        HeldBy::ThisClient
    } else {
        HeldBy::Other
    };
    LockError::Timeout {
        key,
        waited,
        held_by,
    }
}

/// Gives back a lock taken without enough replicas acknowledging it, and
/// gives the caller's error. The release runs in the background, where it
/// is sent again if it fails, as any release is, and goes on if the call is
/// dropped; one that fails twice leaves the lock to its lease. The call
/// waits for it, so that the same call made again at once finds the lock
/// free. The body never runs.
async fn not_replicated(
    client: &LockClient,
    lane: &Lane,
    held: HeldLock,
    acked: usize,
    start: Instant,
) -> LockError {
    let key = held.key.clone();
    let giving_back = release_later(client, Arc::new(held), lane.clone());
    let _ = giving_back.await;
    not_replicated_error(client, key, acked, start)
}

/// The error of a call (begun at `start`) whose lock or set, named by
/// `key`, `acked` replicas acknowledged: fewer than `sync_replicas` asks.
pub(super) fn not_replicated_error(
    client: &LockClient,
    key: String,
    acked: usize,
    start: Instant,
) -> LockError {
    let (needed, timeout) = client
        .inner
        .sync_replicas
        .map_or((0, Duration::ZERO), |sync| (sync.replicas, sync.timeout));
    LockError::NotReplicated {
        key,
        needed,
        acked,
        timeout,
        waited: start.elapsed(),
    }
}

/// Releases `owner`'s acquisition of `key` in the background, first on
/// `lane` (see [`give_back::later`]).
fn give_back_later(client: &LockClient, lane: &Lane, key: &str, owner: &OwnerId, claim: Claim) {
    give_back::later(client, lane, vec![(key.to_owned(), *owner)], claim);
}

/// One acquire request, for a call whose wait ends at `until` (on Cluster
/// the request follows a slot's master that is changing until then). If
/// the call is dropped while the request is in flight, or the request
/// fails with its outcome unknown (a timeout, a dropped connection), it may
/// still take the lock in the backend: a release of this acquisition
/// follows it on the same connection (the same lane), so the lock is not
/// left to its lease.
async fn attempt(
    client: &LockClient,
    lane: &Lane,
    key: &str,
    owner: &OwnerId,
    (claim, until): (Claim, Instant),
) -> Result<Acquire, BackendError> {
    let mut in_flight = give_back::OnDrop::new(true, || {
        give_back_later(client, lane, key, owner, claim);
    });
    let outcome = client
        .inner
        .backend
        .acquire(lane, key, owner, (claim, until))
        .await;
    in_flight.armed = matches!(&outcome, Err(error) if error.outcome_unknown());
    outcome
}
