//! The embedded backend: every lock kind inside this process, with the
//! semantics of the Lua scripts (`lua/exclusive/*.lua` for the plain and
//! write lock, `lua/shared/hash.lua` and `lua/shared/acquire.lua` for
//! readers, permits and fair locks), on the client's [`Clock`].
//!
//! Each key holds one [`State`] while anything in it lives: the exclusive
//! lock's holder, readers or permit holders (each with its own lease, and
//! for readers a waiting writer's claim), or a fair lock's holder and line.
//! Holds, claims and places past their expiry count as absent: every
//! operation drops them first, and drops a key with nothing left, which
//! then takes whatever kind asks next.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use redis::RedisError;
use tokio::time::Instant;

use super::{Acquire, Claim, Kind, Release, RenewItem, Renewal};
use crate::clock::Clock;

/// Locks in a map, behind one mutex. Fencing tokens come from one counter
/// for all keys and kinds, so they increase per key too. Time is the
/// client's runtime's (see [`Clock`]).
#[derive(Clone)]
pub(crate) struct MemoryBackend {
    locks: Arc<Mutex<Locks>>,
    clock: Clock,
    /// Told the key and the next waiter's owner id when a fair lock frees:
    /// the notice a fair release publishes on Redis.
    fair_notices: Arc<OnceLock<FairNotice>>,
}

/// What a fair release tells: the key and the next waiter's owner id.
type FairNotice = Box<dyn Fn(&str, &str) + Send + Sync>;

impl MemoryBackend {
    pub(crate) fn new(clock: Clock) -> Self {
        MemoryBackend {
            locks: Arc::default(),
            clock,
            fair_notices: Arc::default(),
        }
    }

    /// Sets what a fair lock's release tells (once).
    pub(crate) fn on_fair_release(&self, notice: impl Fn(&str, &str) + Send + Sync + 'static) {
        let _ = self.fair_notices.set(Box::new(notice));
    }

    /// Runs `f` on the locks, with the clock's time now.
    fn with<R>(&self, f: impl FnOnce(&mut Locks, Instant) -> R) -> R {
        let now = self.clock.now();
        f(
            &mut self.locks.lock().unwrap_or_else(PoisonError::into_inner),
            now,
        )
    }

    /// Takes `key` for the acquisition `owner` as `claim` asks (see
    /// `lua/shared/acquire.lua` and `lua/exclusive/acquire.lua`); the same
    /// acquisition asking again gets its token back, with its lease reset.
    ///
    /// # Errors
    /// A `LOCKKIND` error, as the scripts give it, when `key` is live as
    /// another kind (see `answers::kind_mismatch`).
    pub(crate) fn acquire(
        &self,
        key: &str,
        owner: &str,
        claim: Claim,
    ) -> Result<Acquire, RedisError> {
        self.with(|locks, now| locks.acquire(key, owner, claim, now))
    }

    /// Frees `owner`'s hold of `key` ([`Release::Freed`]), or withdraws its
    /// place in a line (a writer's claim, a fair waiter's ticket:
    /// [`Release::NotHeld`], as for anything else).
    pub(crate) fn release(&self, key: &str, owner: &str) -> Release {
        let (released, next) = self.with(|locks, now| locks.release(key, owner, now));
        if let (Some(next), Some(notice)) = (next, self.fair_notices.get()) {
            notice(key, &next);
        }
        released
    }

    /// Resets the lease of each item whose owner holds its key (any kind).
    pub(crate) fn renew(&self, items: &[RenewItem<'_>]) -> Vec<Renewal> {
        self.with(|locks, now| locks.renew(items, now))
    }

    /// A holder of `key` now: its owner id and remaining lease, and the
    /// largest fencing token of the key's holders. Of several holders (a
    /// shared kind), the one whose lease ends last.
    pub(crate) fn peek(&self, key: &str) -> Option<(String, Duration, u64)> {
        self.with(|locks, now| locks.peek(key, now))
    }

    /// Frees `key` whoever holds it: every holder, and a waiting writer's
    /// claim (fair waiters keep their places); the largest token freed, if
    /// anything was held.
    pub(crate) fn force_free(&self, key: &str) -> Option<u64> {
        self.with(|locks, now| locks.force_free(key, now))
    }
}

/// One holder's hold: until when, and its fencing token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Hold {
    expires: Instant,
    token: u64,
}

impl Hold {
    /// How long the hold lasts from `now`.
    fn ttl(&self, now: Instant) -> Duration {
        self.expires.saturating_duration_since(now)
    }
}

/// A place in a line: a writer's claim ahead of new readers, or a fair
/// waiter's ticket. It lives until `expires` unless its owner asks again.
#[derive(Debug)]
struct Place {
    owner: Box<str>,
    expires: Instant,
}

/// Readers, or at most `permits` permit holders, each with its own lease.
#[derive(Debug, Default)]
struct Shared {
    /// `None`: readers; `Some(n)`: at most n permit holders.
    permits: Option<u32>,
    holders: HashMap<Box<str>, Hold>,
    /// Readers only: a waiting writer's claim; new readers wait behind it.
    writer: Option<Place>,
}

/// A fair lock: one holder at most, and its waiters in ticket order.
#[derive(Debug, Default)]
struct Fair {
    holder: Option<(Box<str>, Hold)>,
    /// The waiters by ticket number: the first entry is served next.
    line: BTreeMap<u64, Place>,
    next_ticket: u64,
}

/// What one key holds while anything in it lives.
#[derive(Debug)]
enum State {
    /// The plain or write lock: one holder.
    Exclusive { owner: Box<str>, hold: Hold },
    /// Readers or permit holders (and a waiting writer's claim).
    Shared(Shared),
    /// A fair lock's holder and line.
    Fair(Fair),
}

/// The fencing token counter: the last token given, for every key.
#[derive(Debug, Default)]
struct Tokens(u64);

impl Tokens {
    /// The next token: larger than every one given before.
    fn next(&mut self) -> u64 {
        self.0 += 1;
        self.0
    }
}

/// Every key's state, and the token counter: the backend's data, with the
/// time of each operation passed in.
#[derive(Debug, Default)]
struct Locks {
    keys: HashMap<Box<str>, State>,
    tokens: Tokens,
}

/// The state at `key` with its expired entries dropped; `None` (and the key
/// gone) when nothing in it lives.
fn live<'a>(
    keys: &'a mut HashMap<Box<str>, State>,
    key: &str,
    now: Instant,
) -> Option<&'a mut State> {
    match keys.get_mut(key).map(|state| state.prune(now)) {
        Some(true) => keys.get_mut(key),
        Some(false) => {
            keys.remove(key);
            None
        }
        None => None,
    }
}

impl Locks {
    /// [`MemoryBackend::acquire`] at `now`.
    fn acquire(
        &mut self,
        key: &str,
        owner: &str,
        claim: Claim,
        now: Instant,
    ) -> Result<Acquire, RedisError> {
        let Locks { keys, tokens } = self;
        if let Some(state) = live(keys, key, now) {
            return state.meet(key, owner, claim, now, tokens);
        }
        let hold = Hold {
            expires: now + claim.lease,
            token: tokens.next(),
        };
        let (state, answer) = State::granted(claim.kind, owner, hold);
        keys.insert(key.into(), state);
        Ok(answer)
    }

    /// [`MemoryBackend::release`] at `now`, and for a fair lock left free
    /// with waiters, the next one's owner id.
    fn release(&mut self, key: &str, owner: &str, now: Instant) -> (Release, Option<String>) {
        let Some(state) = live(&mut self.keys, key, now) else {
            return (Release::NotHeld, None);
        };
        let (released, lives) = state.give_up(owner);
        let next = match state {
            State::Fair(Fair {
                holder: None, line, ..
            }) => line.values().next().map(|place| place.owner.to_string()),
            _ => None,
        };
        if !lives {
            self.keys.remove(key);
        }
        (released, next)
    }

    /// [`MemoryBackend::renew`] at `now`.
    fn renew(&mut self, items: &[RenewItem<'_>], now: Instant) -> Vec<Renewal> {
        let mut renew = |item: &RenewItem<'_>| {
            let state = live(&mut self.keys, item.key, now)?;
            let hold = state.hold_mut(item.owner)?;
            hold.expires = now + item.lease;
            Some(Renewal::Renewed)
        };
        items
            .iter()
            .map(|item| renew(item).unwrap_or(Renewal::Gone))
            .collect()
    }

    /// [`MemoryBackend::peek`] at `now`; changes nothing.
    fn peek(&self, key: &str, now: Instant) -> Option<(String, Duration, u64)> {
        let holds = self.keys.get(key)?.holds();
        let live = holds.iter().filter(|(_, hold)| hold.expires > now);
        let fence = live.clone().map(|(_, hold)| hold.token).max()?;
        let (owner, last) = live.max_by_key(|(_, hold)| hold.expires)?;
        Some(((*owner).to_owned(), last.ttl(now), fence))
    }

    /// [`MemoryBackend::force_free`] at `now`.
    fn force_free(&mut self, key: &str, now: Instant) -> Option<u64> {
        let state = live(&mut self.keys, key, now)?;
        let (freed, lives) = state.force();
        if !lives {
            self.keys.remove(key);
        }
        freed
    }
}

impl State {
    /// The state of a free key that `owner` takes as `kind` with `hold`,
    /// and the answer.
    fn granted(kind: Kind, owner: &str, hold: Hold) -> (State, Acquire) {
        let token = hold.token;
        let holders = || HashMap::from([(owner.into(), hold)]);
        let shared = |permits| Shared {
            permits,
            holders: holders(),
            writer: None,
        };
        match kind {
            Kind::Exclusive => {
                let owner = owner.into();
                (State::Exclusive { owner, hold }, Acquire::Acquired(token))
            }
            Kind::Read => {
                let room = true;
                (State::Shared(shared(None)), Acquire::Shared { token, room })
            }
            Kind::Permits(n) => {
                let room = 1 < n;
                (
                    State::Shared(shared(Some(n))),
                    Acquire::Shared { token, room },
                )
            }
            Kind::Fair => {
                let fair = Fair {
                    holder: Some((owner.into(), hold)),
                    ..Fair::default()
                };
                let room = false;
                (State::Fair(fair), Acquire::Shared { token, room })
            }
        }
    }

    /// The kind the key is live as.
    fn kind(&self) -> Kind {
        match self {
            State::Exclusive { .. } => Kind::Exclusive,
            State::Shared(Shared { permits: None, .. }) => Kind::Read,
            State::Shared(Shared {
                permits: Some(n), ..
            }) => Kind::Permits(*n),
            State::Fair(_) => Kind::Fair,
        }
    }

    /// Drops the holds and places expired at `now`; whether anything lives.
    fn prune(&mut self, now: Instant) -> bool {
        match self {
            State::Exclusive { hold, .. } => hold.expires > now,
            State::Shared(shared) => {
                shared.holders.retain(|_, hold| hold.expires > now);
                if shared.writer.as_ref().is_some_and(|w| w.expires <= now) {
                    shared.writer = None;
                }
                !shared.holders.is_empty() || shared.writer.is_some()
            }
            State::Fair(fair) => {
                if fair.holder.as_ref().is_some_and(|(_, h)| h.expires <= now) {
                    fair.holder = None;
                }
                fair.line.retain(|_, place| place.expires > now);
                fair.holder.is_some() || !fair.line.is_empty()
            }
        }
    }

    /// `owner` asks for the live key as `claim` says (the state pruned at
    /// `now`): its own hold again, a new one, a refusal, a place in a line,
    /// or a `LOCKKIND` error when the key is another kind.
    fn meet(
        &mut self,
        key: &str,
        owner: &str,
        claim: Claim,
        now: Instant,
        tokens: &mut Tokens,
    ) -> Result<Acquire, RedisError> {
        let lease = claim.lease;
        match (claim.kind, &mut *self) {
            (
                Kind::Exclusive,
                State::Exclusive {
                    owner: holder,
                    hold,
                },
            ) if **holder == *owner => {
                hold.expires = now + lease;
                Ok(Acquire::Acquired(hold.token))
            }
            (Kind::Exclusive | Kind::Read, State::Exclusive { hold, .. }) => {
                Ok(Acquire::Held(Some(hold.ttl(now))))
            }
            (Kind::Exclusive, State::Shared(readers)) if readers.permits.is_none() => {
                if let Some(answer) = readers.writer_waits(owner, claim, now) {
                    return Ok(answer);
                }
                let hold = Hold {
                    expires: now + lease,
                    token: tokens.next(),
                };
                let owner = owner.into();
                *self = State::Exclusive { owner, hold };
                Ok(Acquire::Acquired(hold.token))
            }
            (Kind::Read, State::Shared(shared)) if shared.permits.is_none() => {
                Ok(shared.enter(owner, lease, now, tokens))
            }
            (Kind::Permits(n), State::Shared(shared)) if shared.permits == Some(n) => {
                Ok(shared.enter(owner, lease, now, tokens))
            }
            (Kind::Fair, State::Fair(fair)) => Ok(fair.enter(owner, claim, now, tokens)),
            (asked, found) => Err(kind_error(key, found.kind(), asked)),
        }
    }

    /// The hold of `owner`, if it holds the key.
    fn hold_mut(&mut self, owner: &str) -> Option<&mut Hold> {
        match self {
            State::Exclusive {
                owner: holder,
                hold,
            } => (**holder == *owner).then_some(hold),
            State::Shared(shared) => shared.holders.get_mut(owner),
            State::Fair(fair) => match &mut fair.holder {
                Some((holder, hold)) if **holder == *owner => Some(hold),
                _ => None,
            },
        }
    }

    /// Every holder and its hold.
    fn holds(&self) -> Vec<(&str, Hold)> {
        match self {
            State::Exclusive { owner, hold } => vec![(owner, *hold)],
            State::Shared(shared) => shared.holders.iter().map(|(o, h)| (&**o, *h)).collect(),
            State::Fair(fair) => fair.holder.iter().map(|(o, h)| (&**o, *h)).collect(),
        }
    }

    /// `owner` gives up its hold (freed) or its place in a line (not
    /// held, as for anything else); whether anything lives on.
    fn give_up(&mut self, owner: &str) -> (Release, bool) {
        let freed = |yes: bool| {
            if yes {
                Release::Freed
            } else {
                Release::NotHeld
            }
        };
        match self {
            State::Exclusive { owner: holder, .. } => {
                let mine = **holder == *owner;
                (freed(mine), !mine)
            }
            State::Shared(shared) => {
                let held = shared.holders.remove(owner).is_some();
                if !held && shared.writer.as_ref().is_some_and(|w| *w.owner == *owner) {
                    shared.writer = None;
                }
                let lives = !shared.holders.is_empty() || shared.writer.is_some();
                (freed(held), lives)
            }
            State::Fair(fair) => {
                let held = fair.holder.as_ref().is_some_and(|(h, _)| **h == *owner);
                if held {
                    fair.holder = None;
                } else {
                    fair.line.retain(|_, place| *place.owner != *owner);
                }
                let lives = fair.holder.is_some() || !fair.line.is_empty();
                (freed(held), lives)
            }
        }
    }

    /// Frees every hold and drops a waiting writer's claim (fair waiters
    /// keep their places): the largest token freed, and whether anything
    /// lives on.
    fn force(&mut self) -> (Option<u64>, bool) {
        match self {
            State::Exclusive { hold, .. } => (Some(hold.token), false),
            State::Shared(shared) => {
                let freed = shared.holders.drain().map(|(_, hold)| hold.token).max();
                shared.writer = None;
                (freed, false)
            }
            State::Fair(fair) => {
                let freed = fair.holder.take().map(|(_, hold)| hold.token);
                (freed, !fair.line.is_empty())
            }
        }
    }
}

impl Shared {
    /// A reader or permit holder `owner` asks for a hold of `lease`: its
    /// own hold again (its lease reset), a new hold when it may enter, or
    /// the refusal with the time until that may change.
    fn enter(
        &mut self,
        owner: &str,
        lease: Duration,
        now: Instant,
        tokens: &mut Tokens,
    ) -> Acquire {
        let expires = now + lease;
        if let Some(hold) = self.holders.get_mut(owner) {
            hold.expires = expires;
            let token = hold.token;
            return Acquire::Shared { token, room: false };
        }
        if let Some(until) = self.refused_until(owner, now) {
            return Acquire::Held(Some(until.saturating_duration_since(now)));
        }
        let token = tokens.next();
        self.holders.insert(owner.into(), Hold { expires, token });
        let room = match self.permits {
            None => self.writer.is_none(),
            Some(n) => self.holders.len() < n as usize,
        };
        Acquire::Shared { token, room }
    }

    /// When a new holder `owner` may not enter: the earliest moment that may
    /// change. A reader waits behind another owner's writer claim until the
    /// last of the readers and the claim ends; a permit holder waits while
    /// every permit is taken, until the first one ends.
    fn refused_until(&self, owner: &str, now: Instant) -> Option<Instant> {
        match self.permits {
            None => {
                let claimed = self.writer.as_ref().is_some_and(|w| *w.owner != *owner);
                claimed.then(|| self.latest(now))
            }
            Some(n) if self.holders.len() >= n as usize => {
                let earliest = self.holders.values().map(|hold| hold.expires).min();
                Some(earliest.unwrap_or(now))
            }
            Some(_) => None,
        }
    }

    /// The last expiry among the holders and the writer's claim, or `now`.
    fn latest(&self, now: Instant) -> Instant {
        let holds = self.holders.values().map(|hold| hold.expires);
        let claim = self.writer.iter().map(|place| place.expires);
        holds.chain(claim).fold(now, Instant::max)
    }

    /// A writer `owner` meets readers (with the claim's waiter lease):
    /// `None` when it may take the key (no reader, and no claim but its
    /// own). Behind readers it keeps (or takes) the claim and is queued
    /// until the last reader's expiry; behind another writer's claim it is
    /// refused until the last of the readers and that claim ends.
    fn writer_waits(&mut self, owner: &str, claim: Claim, now: Instant) -> Option<Acquire> {
        let theirs = self.writer.as_ref().is_some_and(|w| *w.owner != *owner);
        if theirs {
            let ttl = self.latest(now).saturating_duration_since(now);
            return Some(Acquire::Held(Some(ttl)));
        }
        let last_reader = self.holders.values().map(|hold| hold.expires).max()?;
        self.writer = Some(Place {
            owner: owner.into(),
            expires: now + claim.waiter_lease,
        });
        let ttl = Some(last_reader.saturating_duration_since(now));
        Some(Acquire::Queued {
            ttl,
            holder_ttl: ttl,
        })
    }
}

impl Fair {
    /// A fair caller `owner` asks: its own hold again (its lease reset); the
    /// lock when nobody holds it and nobody waits ahead of it (its ticket
    /// given up); otherwise a place in the line (kept or taken, for the
    /// waiter lease from now), queued until the holder's expiry or the
    /// earliest expiry of a place ahead, whichever comes first, with the
    /// holder's lease left (zero when nobody holds it).
    fn enter(&mut self, owner: &str, claim: Claim, now: Instant, tokens: &mut Tokens) -> Acquire {
        if let Some((holder, hold)) = &mut self.holder {
            if **holder == *owner {
                hold.expires = now + claim.lease;
                let token = hold.token;
                return Acquire::Shared { token, room: false };
            }
        }
        // The holder's expiry, and the places ahead: a waiter ahead whose
        // place lapses (its process died) is unannounced.
        let ahead = self
            .line
            .values()
            .take_while(|place| *place.owner != *owner);
        let wait_until = ahead
            .map(|place| place.expires)
            .chain(self.holder.as_ref().map(|(_, hold)| hold.expires))
            .min();
        if let Some(until) = wait_until {
            self.keep_place(owner, now + claim.waiter_lease);
            let held = self.holder.as_ref().map(|(_, hold)| hold.ttl(now));
            return Acquire::Queued {
                ttl: Some(until.saturating_duration_since(now)),
                holder_ttl: Some(held.unwrap_or_default()),
            };
        }
        self.line.retain(|_, place| *place.owner != *owner);
        let hold = Hold {
            expires: now + claim.lease,
            token: tokens.next(),
        };
        self.holder = Some((owner.into(), hold));
        let token = hold.token;
        Acquire::Shared { token, room: false }
    }

    /// Refreshes `owner`'s place in the line to `expires`, or gives it the
    /// next ticket.
    fn keep_place(&mut self, owner: &str, expires: Instant) {
        if let Some(place) = self.line.values_mut().find(|p| *p.owner == *owner) {
            place.expires = expires;
            return;
        }
        let place = Place {
            owner: owner.into(),
            expires,
        };
        self.line.insert(self.next_ticket, place);
        self.next_ticket += 1;
    }
}

/// The error the scripts give for a call asking for `asked` on `key`, live
/// as `found`: code `LOCKKIND`, detail `<key> is <found>; asked for
/// <asked>` (see `answers::kind_mismatch`, which reads it).
fn kind_error(key: &str, found: Kind, asked: Kind) -> RedisError {
    let detail = format!(
        "{key} is {}; asked for {}",
        script_name(found),
        script_name(asked)
    );
    redis::make_extension_error("LOCKKIND".into(), Some(detail))
}

/// A kind as `hash.lua`'s `kind_name` writes it: [`Kind::name`], but a key
/// live as readers is "held by readers".
fn script_name(kind: Kind) -> String {
    match kind {
        Kind::Read => "a read-write lock held by readers (mode = \"read\")".into(),
        other => other.name(),
    }
}

#[cfg(test)]
mod tests {
    //! The rules, on [`Locks`] with the time passed in: a test moves its
    //! own clock (this crate's tests have no paused tokio time), and one
    //! test drives [`MemoryBackend`] on a runtime's clock.

    use super::*;
    use crate::error::{KindFoundBy, LockError};
    use crate::kind::kind_mismatch;
    use crate::route::BackendError;

    const KEY: &str = "lock:k";
    /// Every claim's lease.
    const LEASE: Duration = Duration::from_millis(1000);
    /// Every claim's waiter lease.
    const WAITER_LEASE: Duration = Duration::from_millis(300);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A writer's claim kept behind readers, until `ttl`.
    fn claimed(ttl: Duration) -> Acquire {
        Acquire::Queued {
            ttl: Some(ttl),
            holder_ttl: Some(ttl),
        }
    }

    /// A fair waiter's place kept, until `ttl`, the holder's lease having
    /// `held` left.
    fn in_line(ttl: Duration, held: Duration) -> Acquire {
        Acquire::Queued {
            ttl: Some(ttl),
            holder_ttl: Some(held),
        }
    }

    fn claim(kind: Kind) -> Claim {
        Claim {
            kind,
            lease: LEASE,
            waiter_lease: WAITER_LEASE,
            others_wait: false,
        }
    }

    /// The backend's data and a clock that the test moves.
    struct Bench {
        locks: Locks,
        now: Instant,
    }

    impl Bench {
        fn new() -> Self {
            Bench {
                locks: Locks::default(),
                now: Instant::now(),
            }
        }

        fn advance(&mut self, by: Duration) {
            self.now += by;
        }

        fn try_acquire(&mut self, owner: &str, kind: Kind) -> Result<Acquire, RedisError> {
            self.locks.acquire(KEY, owner, claim(kind), self.now)
        }

        fn acquire(&mut self, owner: &str, kind: Kind) -> Acquire {
            self.try_acquire(owner, kind).expect("no kind mismatch")
        }

        /// The token of a granting answer; panics on a refusal.
        fn token(&mut self, owner: &str, kind: Kind) -> u64 {
            let answer = self.acquire(owner, kind);
            answer
                .token()
                .unwrap_or_else(|| panic!("{owner} refused: {answer:?}"))
        }

        fn release(&mut self, owner: &str) -> Release {
            self.locks.release(KEY, owner, self.now).0
        }

        fn renew(&mut self, owner: &str) -> Renewal {
            let item = RenewItem {
                key: KEY,
                owner,
                lease: LEASE,
            };
            self.locks.renew(&[item], self.now)[0]
        }

        /// The caller's error for a mismatch answered to `asked`.
        fn mismatch(&mut self, owner: &str, asked: Kind) -> LockError {
            let error = self.try_acquire(owner, asked).expect_err("a kind mismatch");
            kind_mismatch(&BackendError::Redis(error), KEY, asked).expect("a LOCKKIND error")
        }
    }

    fn shared(token: u64, room: bool) -> Acquire {
        Acquire::Shared { token, room }
    }

    #[test]
    fn exclusive_refuses_others_and_gives_its_holder_its_token_back() {
        let mut b = Bench::new();
        let token = b.token("a", Kind::Exclusive);
        assert_eq!(b.acquire("b", Kind::Exclusive), Acquire::Held(Some(LEASE)));
        b.advance(ms(600));
        assert_eq!(
            b.acquire("b", Kind::Exclusive),
            Acquire::Held(Some(ms(400)))
        );
        // Asking again resets the lease.
        assert_eq!(b.acquire("a", Kind::Exclusive), Acquire::Acquired(token));
        b.advance(ms(600));
        assert_eq!(
            b.acquire("b", Kind::Exclusive),
            Acquire::Held(Some(ms(400)))
        );
        assert_eq!(b.release("b"), Release::NotHeld);
        assert_eq!(b.release("a"), Release::Freed);
        assert_eq!(b.release("a"), Release::NotHeld);
        assert!(b.token("b", Kind::Exclusive) > token);
    }

    #[test]
    fn an_exclusive_hold_ends_at_its_lease() {
        let mut b = Bench::new();
        let token = b.token("a", Kind::Exclusive);
        b.advance(LEASE);
        assert_eq!(b.renew("a"), Renewal::Gone);
        assert_eq!(b.release("a"), Release::NotHeld);
        assert!(b.token("b", Kind::Exclusive) > token);
    }

    #[test]
    fn readers_share_the_key_each_with_its_own_token() {
        let mut b = Bench::new();
        let Acquire::Shared { token: first, room } = b.acquire("r1", Kind::Read) else {
            panic!("a reader's grant")
        };
        assert!(room);
        let second = b.token("r2", Kind::Read);
        assert!(second > first);
        assert_eq!(b.acquire("r3", Kind::Read), shared(second + 1, true));
        assert_eq!(b.release("r1"), Release::Freed);
        assert_eq!(b.release("r1"), Release::NotHeld);
        assert_eq!(b.renew("r2"), Renewal::Renewed);
    }

    #[test]
    fn an_unrenewed_reader_frees_its_share_at_its_own_expiry() {
        let mut b = Bench::new();
        b.token("r1", Kind::Read);
        b.advance(ms(500));
        b.token("r2", Kind::Read);
        b.advance(ms(500));
        // r1's lease ended; r2 keeps its own for 500 ms more.
        assert_eq!(b.renew("r1"), Renewal::Gone);
        assert_eq!(b.release("r1"), Release::NotHeld);
        let (owner, ttl, _) = b.locks.peek(KEY, b.now).expect("r2 holds");
        assert_eq!((owner.as_str(), ttl), ("r2", ms(500)));
        assert_eq!(b.acquire("w", Kind::Exclusive), claimed(ms(500)));
        b.advance(ms(500));
        assert!(matches!(
            b.acquire("w", Kind::Exclusive),
            Acquire::Acquired(_)
        ));
    }

    #[test]
    fn a_writer_behind_readers_keeps_a_claim_that_new_readers_wait_behind() {
        let mut b = Bench::new();
        let reader = b.token("r1", Kind::Read);
        b.advance(ms(200));
        assert_eq!(b.acquire("w", Kind::Exclusive), claimed(ms(800)));
        // New readers wait for the last of the readers and the claim.
        assert_eq!(b.acquire("r2", Kind::Read), Acquire::Held(Some(ms(800))));
        // The reader inside keeps its hold.
        assert_eq!(b.acquire("r1", Kind::Read), shared(reader, false));
        assert_eq!(b.release("r1"), Release::Freed);
        let Acquire::Acquired(writer) = b.acquire("w", Kind::Exclusive) else {
            panic!("the writer takes the key its claim kept")
        };
        assert!(writer > reader);
        assert_eq!(b.acquire("r2", Kind::Read), Acquire::Held(Some(LEASE)));
        assert_eq!(b.release("w"), Release::Freed);
        assert_eq!(b.acquire("r2", Kind::Read), shared(writer + 1, true));
    }

    #[test]
    fn the_writer_claim_is_kept_by_asking_again() {
        let mut b = Bench::new();
        b.token("r1", Kind::Read);
        assert!(matches!(
            b.acquire("w", Kind::Exclusive),
            Acquire::Queued { .. }
        ));
        for _ in 0..3 {
            b.advance(ms(200));
            assert!(matches!(
                b.acquire("w", Kind::Exclusive),
                Acquire::Queued { .. }
            ));
            assert!(matches!(b.acquire("r2", Kind::Read), Acquire::Held(_)));
        }
    }

    #[test]
    fn another_writers_claim_refuses_a_writer_without_a_claim() {
        let mut b = Bench::new();
        b.token("r1", Kind::Read);
        assert_eq!(b.acquire("w1", Kind::Exclusive), claimed(LEASE));
        assert_eq!(b.acquire("w2", Kind::Exclusive), Acquire::Held(Some(LEASE)));
        assert_eq!(b.release("r1"), Release::Freed);
        // Only w1's claim lives: w2 still waits, for the claim's end.
        assert_eq!(
            b.acquire("w2", Kind::Exclusive),
            Acquire::Held(Some(WAITER_LEASE))
        );
        assert!(matches!(
            b.acquire("w1", Kind::Exclusive),
            Acquire::Acquired(_)
        ));
    }

    #[test]
    fn a_withdrawn_claim_lets_readers_in_at_once() {
        let mut b = Bench::new();
        b.token("r1", Kind::Read);
        assert!(matches!(
            b.acquire("w", Kind::Exclusive),
            Acquire::Queued { .. }
        ));
        assert!(matches!(b.acquire("r2", Kind::Read), Acquire::Held(_)));
        assert_eq!(b.release("w"), Release::NotHeld);
        assert!(matches!(
            b.acquire("r2", Kind::Read),
            Acquire::Shared { room: true, .. }
        ));
    }

    #[test]
    fn a_claim_not_kept_lapses_after_the_waiter_lease() {
        let mut b = Bench::new();
        b.token("r1", Kind::Read);
        assert!(matches!(
            b.acquire("w", Kind::Exclusive),
            Acquire::Queued { .. }
        ));
        b.advance(WAITER_LEASE - ms(1));
        assert!(matches!(b.acquire("r2", Kind::Read), Acquire::Held(_)));
        b.advance(ms(1));
        assert!(matches!(
            b.acquire("r2", Kind::Read),
            Acquire::Shared { room: true, .. }
        ));
    }

    #[test]
    fn readers_wait_for_an_exclusive_holder() {
        let mut b = Bench::new();
        b.token("x", Kind::Exclusive);
        b.advance(ms(100));
        assert_eq!(b.acquire("r", Kind::Read), Acquire::Held(Some(ms(900))));
        b.advance(ms(900));
        assert!(matches!(b.acquire("r", Kind::Read), Acquire::Shared { .. }));
    }

    #[test]
    fn permits_admit_at_most_n_holders() {
        let mut b = Bench::new();
        let three = Kind::Permits(3);
        let first = b.token("p1", three);
        b.advance(ms(100));
        assert_eq!(b.acquire("p2", three), shared(first + 1, true));
        assert_eq!(b.acquire("p3", three), shared(first + 2, false));
        // Full: refused until the earliest holder's expiry.
        assert_eq!(b.acquire("p4", three), Acquire::Held(Some(ms(900))));
        assert_eq!(b.release("p2"), Release::Freed);
        assert_eq!(b.acquire("p4", three), shared(first + 3, false));
        assert_eq!(b.acquire("p2", three), Acquire::Held(Some(ms(900))));
    }

    #[test]
    fn a_permit_holder_that_dies_frees_its_permit_at_its_own_expiry() {
        let mut b = Bench::new();
        let two = Kind::Permits(2);
        b.token("dead", two);
        b.advance(ms(400));
        b.token("alive", two);
        assert_eq!(b.acquire("next", two), Acquire::Held(Some(ms(600))));
        b.advance(ms(600));
        // "dead" never renewed: its permit is free; "alive" keeps its own.
        assert_eq!(b.renew("alive"), Renewal::Renewed);
        assert!(matches!(b.acquire("next", two), Acquire::Shared { .. }));
        assert_eq!(b.acquire("last", two), Acquire::Held(Some(LEASE)));
    }

    #[test]
    fn fair_serves_three_waiters_in_order() {
        let mut b = Bench::new();
        b.token("h", Kind::Fair);
        b.advance(ms(100));
        // The first waits for the holder; the others for the place ahead
        // of them too, whose lapse nobody would announce.
        // Each is told the holder's lease left too.
        for (waiter, until) in [("a", ms(900)), ("b", WAITER_LEASE), ("c", WAITER_LEASE)] {
            assert_eq!(b.acquire(waiter, Kind::Fair), in_line(until, ms(900)));
        }
        assert_eq!(b.release("h"), Release::Freed);
        // Free, but "a" is first: the others wait for its place's expiry.
        let place_left = in_line(WAITER_LEASE, Duration::ZERO);
        assert_eq!(b.acquire("c", Kind::Fair), place_left);
        assert_eq!(b.acquire("b", Kind::Fair), place_left);
        assert_eq!(b.acquire("a", Kind::Fair), shared(2, false));
        assert_eq!(b.acquire("c", Kind::Fair), in_line(WAITER_LEASE, LEASE));
        assert_eq!(b.release("a"), Release::Freed);
        assert!(matches!(b.acquire("c", Kind::Fair), Acquire::Queued { .. }));
        assert_eq!(b.acquire("b", Kind::Fair), shared(3, false));
        assert_eq!(b.release("b"), Release::Freed);
        assert_eq!(b.acquire("c", Kind::Fair), shared(4, false));
    }

    #[test]
    fn a_fair_waiter_that_stops_asking_loses_its_place() {
        let mut b = Bench::new();
        b.token("h", Kind::Fair);
        assert!(matches!(
            b.acquire("gone", Kind::Fair),
            Acquire::Queued { .. }
        ));
        assert!(matches!(
            b.acquire("next", Kind::Fair),
            Acquire::Queued { .. }
        ));
        assert_eq!(b.release("h"), Release::Freed);
        // "next" keeps its place by asking; "gone" never asks again.
        b.advance(ms(200));
        assert_eq!(
            b.acquire("next", Kind::Fair),
            in_line(ms(100), Duration::ZERO)
        );
        b.advance(ms(100));
        assert!(matches!(
            b.acquire("next", Kind::Fair),
            Acquire::Shared { .. }
        ));
        // Back, it queues at the end of the line.
        assert_eq!(b.acquire("gone", Kind::Fair), in_line(LEASE, LEASE));
    }

    #[test]
    fn a_fair_waiter_that_gives_up_leaves_the_line() {
        let mut b = Bench::new();
        b.token("h", Kind::Fair);
        assert!(matches!(b.acquire("a", Kind::Fair), Acquire::Queued { .. }));
        assert!(matches!(b.acquire("b", Kind::Fair), Acquire::Queued { .. }));
        assert_eq!(b.release("a"), Release::NotHeld);
        assert_eq!(b.release("h"), Release::Freed);
        assert!(matches!(b.acquire("b", Kind::Fair), Acquire::Shared { .. }));
    }

    #[test]
    fn a_holder_asking_again_keeps_its_token_and_resets_its_lease() {
        for kind in [Kind::Read, Kind::Permits(2), Kind::Fair] {
            let mut b = Bench::new();
            let token = b.token("a", kind);
            b.advance(ms(900));
            assert_eq!(b.acquire("a", kind), shared(token, false), "{kind:?}");
            b.advance(ms(900));
            assert_eq!(b.renew("a"), Renewal::Renewed, "{kind:?}");
            assert_eq!(b.release("a"), Release::Freed, "{kind:?}");
        }
    }

    #[test]
    fn renewal_finds_holders_of_every_kind_and_nothing_else() {
        let mut b = Bench::new();
        for kind in [Kind::Exclusive, Kind::Read, Kind::Permits(1), Kind::Fair] {
            b.token("a", kind);
            assert_eq!(b.renew("a"), Renewal::Renewed, "{kind:?}");
            assert_eq!(b.renew("b"), Renewal::Gone, "{kind:?}");
            b.advance(LEASE);
            assert_eq!(b.renew("a"), Renewal::Gone, "{kind:?}");
        }
        // A place in a line is no hold.
        b.token("r", Kind::Read);
        assert!(matches!(
            b.acquire("w", Kind::Exclusive),
            Acquire::Queued { .. }
        ));
        assert_eq!(b.renew("w"), Renewal::Gone);
        let items = [
            RenewItem {
                key: KEY,
                owner: "r",
                lease: ms(5000),
            },
            RenewItem {
                key: "lock:other",
                owner: "r",
                lease: ms(5000),
            },
        ];
        let renewed = b.locks.renew(&items, b.now);
        assert_eq!(renewed, [Renewal::Renewed, Renewal::Gone]);
        b.advance(ms(4000));
        assert_eq!(b.renew("r"), Renewal::Renewed);
    }

    #[test]
    fn a_free_key_takes_any_kind_and_tokens_keep_rising() {
        let mut b = Bench::new();
        let mut last = 0;
        let kinds = [Kind::Exclusive, Kind::Read, Kind::Permits(2), Kind::Fair];
        for kind in kinds.into_iter().chain(kinds) {
            let token = b.token("a", kind);
            assert!(token > last, "{kind:?}");
            last = token;
            assert_eq!(b.release("a"), Release::Freed);
        }
        // A key whose holder expired is free too.
        b.token("a", Kind::Fair);
        b.advance(LEASE);
        assert!(b.token("b", Kind::Permits(5)) > last);
    }

    #[test]
    fn a_live_key_refuses_another_kind() {
        let readers = "a read-write lock held by readers (mode = \"read\")";
        let cases: [(Kind, Kind, String); 7] = [
            (Kind::Exclusive, Kind::Permits(2), Kind::Exclusive.name()),
            (Kind::Exclusive, Kind::Fair, Kind::Exclusive.name()),
            (Kind::Read, Kind::Permits(2), readers.into()),
            (Kind::Read, Kind::Fair, readers.into()),
            (Kind::Permits(2), Kind::Permits(3), Kind::Permits(2).name()),
            (Kind::Permits(2), Kind::Exclusive, Kind::Permits(2).name()),
            (Kind::Fair, Kind::Read, Kind::Fair.name()),
        ];
        for (held, asked, found_name) in cases {
            let mut b = Bench::new();
            b.token("a", held);
            let LockError::KindMismatch {
                key,
                asked: asked_name,
                found,
                found_by,
            } = b.mismatch("b", asked)
            else {
                panic!("a kind mismatch")
            };
            assert_eq!((key.as_str(), found), (KEY, found_name));
            assert_eq!(asked_name, asked.name());
            assert_eq!(found_by, KindFoundBy::Backend);
            // Nothing changed.
            assert_eq!(b.release("a"), Release::Freed);
        }
    }

    #[test]
    fn the_mismatch_names_both_counts_and_the_kind_of_a_waiting_line() {
        let mut b = Bench::new();
        b.token("a", Kind::Permits(2));
        let error = b
            .try_acquire("b", Kind::Permits(3))
            .expect_err("a mismatch");
        assert_eq!(error.code(), Some("LOCKKIND"));
        assert_eq!(
            error.detail(),
            Some("lock:k is a counted lock (permits = 2); asked for a counted lock (permits = 3)")
        );
        // A line alone keeps the key's kind.
        let mut b = Bench::new();
        b.token("r", Kind::Read);
        assert!(matches!(
            b.acquire("w", Kind::Exclusive),
            Acquire::Queued { .. }
        ));
        assert_eq!(b.release("r"), Release::Freed);
        assert!(b.try_acquire("f", Kind::Fair).is_err());
        b.advance(WAITER_LEASE);
        assert!(b.try_acquire("f", Kind::Fair).is_ok());
    }

    #[test]
    fn peek_names_the_holder_whose_lease_ends_last() {
        let mut b = Bench::new();
        assert_eq!(b.locks.peek(KEY, b.now), None);
        b.token("r1", Kind::Read);
        b.advance(ms(100));
        let second = b.token("r2", Kind::Read);
        b.advance(ms(100));
        let (owner, ttl, fence) = b.locks.peek(KEY, b.now).expect("held");
        assert_eq!((owner.as_str(), ttl, fence), ("r2", ms(900), second));
        b.advance(ms(900));
        assert_eq!(b.locks.peek(KEY, b.now), None);
    }

    #[test]
    fn force_free_frees_every_holder_and_the_writer_claim() {
        let mut b = Bench::new();
        b.token("r1", Kind::Read);
        let second = b.token("r2", Kind::Read);
        assert!(matches!(
            b.acquire("w", Kind::Exclusive),
            Acquire::Queued { .. }
        ));
        assert_eq!(b.locks.force_free(KEY, b.now), Some(second));
        assert_eq!(b.locks.force_free(KEY, b.now), None);
        assert_eq!(b.renew("r1"), Renewal::Gone);
        // The claim went too: the key is free for any kind.
        assert!(matches!(
            b.acquire("p", Kind::Permits(1)),
            Acquire::Shared { .. }
        ));
    }

    #[test]
    fn force_free_of_a_fair_lock_keeps_its_line() {
        let mut b = Bench::new();
        let held = b.token("h", Kind::Fair);
        assert!(matches!(b.acquire("a", Kind::Fair), Acquire::Queued { .. }));
        assert_eq!(b.locks.force_free(KEY, b.now), Some(held));
        assert!(matches!(b.acquire("b", Kind::Fair), Acquire::Queued { .. }));
        assert!(matches!(b.acquire("a", Kind::Fair), Acquire::Shared { .. }));
    }

    #[tokio::test]
    async fn the_backend_runs_on_its_clock_and_errs_as_the_scripts_do() {
        let backend = MemoryBackend::new(Clock::of(tokio::runtime::Handle::current()));
        let read = claim(Kind::Read);
        let Ok(Acquire::Shared { token, room: true }) = backend.acquire(KEY, "r", read) else {
            panic!("a reader's grant")
        };
        let (owner, ttl, fence) = backend.peek(KEY).expect("held");
        assert_eq!((owner.as_str(), fence), ("r", token));
        assert!(ttl <= LEASE && ttl > LEASE / 2);
        let error = backend
            .acquire(KEY, "f", claim(Kind::Fair))
            .expect_err("a mismatch");
        let error = kind_mismatch(&BackendError::Redis(error), KEY, Kind::Fair);
        assert!(matches!(error, Some(LockError::KindMismatch { .. })));
        let item = RenewItem {
            key: KEY,
            owner: "r",
            lease: LEASE,
        };
        assert_eq!(backend.renew(&[item]), [Renewal::Renewed]);
        assert_eq!(backend.release(KEY, "r"), Release::Freed);
        assert_eq!(backend.force_free(KEY), None);
    }
}
