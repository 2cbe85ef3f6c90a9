//! The lock kinds' rules as the scripts keep them, step by step in time:
//! an exclusive lock, readers and a writer's claim, counted permits, a fair
//! line, renewals, inspect and force-unlock, each answer and lease checked,
//! on a redis-server and on the embedded backend's keyspace (each test runs
//! on both, see `both!`). On the embedded keyspace the clock moves only
//! when a test lets time pass, so leases and tokens are checked exactly
//! there; on Redis within the real time that passed (`Executor::assert_ms`).
mod support;

use std::collections::HashMap;
use std::time::Duration;

use redis::{RedisResult, Script, Value};
use support::executor::Executor;

const KEY: &str = "lock:k";
/// Every claim's lease, unless a test says otherwise.
const LEASE: Duration = ms(1000);
/// Every claim's waiter lease, unless a test says otherwise.
const WAITER_LEASE: Duration = ms(300);
/// A release's answer: the hold was freed.
const FREED: i64 = 1;
/// A release's answer: the owner held nothing (a withdrawn place included),
/// and nothing names who freed it.
const NOT_HELD: i64 = -1;
/// A release's answer: the exclusive lock is free, freed by this owner's
/// own earlier release.
const FREED_BEFORE: i64 = -2;
/// A release's answer: another owner holds the exclusive lock.
const TAKEN: i64 = -4;
/// A renewal's answers.
const RENEWED: i64 = 1;
const GONE: i64 = 0;

/// Past the lease: Redis keeps a key through the millisecond of its
/// expiry, and drops it after.
const PAST_LEASE: Duration = ms(1001);

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn script(name: &str) -> Script {
    Script::new(lock_runtime::__private::script_source(name).expect("a script of the library"))
}

/// A lock kind, as the runtime asks for it.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Exclusive,
    Read,
    Permits(u32),
    Fair,
}

/// An acquire script's answer.
#[derive(Debug, PartialEq)]
enum Acquire {
    /// The exclusive lock's grant: its token.
    Acquired(i64),
    /// A shared kind's grant: its token, and whether another caller of the
    /// kind could enter now too.
    Shared { token: i64, room: bool },
    /// Refused: the ms until nothing changes unannounced.
    Held(i64),
    /// Refused, a place kept (a writer's claim, a fair waiter's ticket):
    /// when to ask again (ms), and for a fair waiter the holder's lease
    /// left (ms, 0 when nobody holds it).
    Queued { ttl: i64, held: Option<i64> },
}

impl Acquire {
    fn read(value: Value) -> Acquire {
        match value {
            Value::Int(n) if n > 0 => Acquire::Acquired(n),
            Value::Int(n) => Acquire::Held(-2 - n),
            Value::Array(items) => match items.as_slice() {
                [Value::Int(n)] => Acquire::Queued {
                    ttl: -2 - n,
                    held: None,
                },
                [Value::Int(n), Value::Int(held)] if *n < 0 => Acquire::Queued {
                    ttl: -2 - n,
                    held: Some(*held),
                },
                [Value::Int(token), Value::Int(room)] => Acquire::Shared {
                    token: *token,
                    room: *room == 1,
                },
                other => panic!("unexpected answer {other:?}"),
            },
            other => panic!("unexpected answer {other:?}"),
        }
    }

    fn token(&self) -> Option<i64> {
        match self {
            Acquire::Acquired(token) | Acquire::Shared { token, .. } => Some(*token),
            _ => None,
        }
    }

    fn is_queued(&self) -> bool {
        matches!(self, Acquire::Queued { .. })
    }

    fn is_shared(&self) -> bool {
        matches!(self, Acquire::Shared { .. })
    }
}

/// The scripts called at `KEY` as the runtime calls them, each owner with
/// the kind it last asked for.
struct Bench<'a> {
    x: &'a mut Executor,
    lease: Duration,
    waiter_lease: Duration,
    kinds: HashMap<String, Kind>,
    /// The token of each owner's last grant, which a renewal names.
    tokens: HashMap<String, u64>,
}

impl<'a> Bench<'a> {
    fn new(x: &'a mut Executor) -> Self {
        Bench {
            x,
            lease: LEASE,
            waiter_lease: WAITER_LEASE,
            kinds: HashMap::new(),
            tokens: HashMap::new(),
        }
    }

    /// Starts again on an empty `KEY`.
    fn fresh(&mut self) {
        let () = redis::cmd("DEL").arg(KEY).query(self.x).expect("DEL");
        self.kinds.clear();
        self.tokens.clear();
    }

    fn pass(&mut self, by: Duration) {
        self.x.pass(by);
    }

    fn try_acquire(&mut self, owner: &str, kind: Kind) -> RedisResult<Acquire> {
        self.kinds.insert(owner.to_owned(), kind);
        let (lease, waiter) = (self.lease.as_millis(), self.waiter_lease.as_millis());
        let (letter, count) = match kind {
            Kind::Exclusive => {
                let value: Value = script("acquire")
                    .key(KEY)
                    .arg(owner)
                    .arg(lease)
                    .arg(waiter)
                    .invoke(self.x)?;
                return Ok(Acquire::read(value));
            }
            Kind::Read => ("r", 0),
            Kind::Permits(n) => ("p", n),
            Kind::Fair => ("q", 0),
        };
        let value: Value = script("shared_acquire")
            .key(KEY)
            .arg(owner)
            .arg(lease)
            .arg(letter)
            .arg(waiter)
            .arg(count)
            .arg(0)
            .invoke(self.x)?;
        Ok(Acquire::read(value))
    }

    fn acquire(&mut self, owner: &str, kind: Kind) -> Acquire {
        let answer = self
            .try_acquire(owner, kind)
            .unwrap_or_else(|e| panic!("{owner} ({kind:?}): {e}"));
        if let Some(token) = answer.token() {
            self.tokens.insert(owner.to_owned(), token as u64);
        }
        answer
    }

    /// The token of a grant; panics on a refusal.
    fn token(&mut self, owner: &str, kind: Kind) -> i64 {
        let answer = self.acquire(owner, kind);
        answer
            .token()
            .unwrap_or_else(|| panic!("{owner} refused: {answer:?}"))
    }

    /// Asserts that `token` is the next one after `previous`: the larger of
    /// `previous + 1` and the time in µs (exactly on the embedded keyspace;
    /// on Redis, larger than `previous`).
    fn assert_next_token(&self, token: i64, previous: i64) {
        match self.x.keyspace() {
            Some(keyspace) => {
                let now = i64::try_from(keyspace.time_us()).expect("µs");
                assert_eq!(token, (previous + 1).max(now), "the token after {previous}");
            }
            None => assert!(token > previous, "{token} after {previous}"),
        }
    }

    /// Asserts `owner` is refused for `ttl`.
    fn assert_held(&mut self, owner: &str, kind: Kind, ttl: Duration) {
        match self.acquire(owner, kind) {
            Acquire::Held(left) => self.x.assert_ms(left, ttl, &format!("{owner} refused")),
            other => panic!("{owner} not refused: {other:?}"),
        }
    }

    /// Asserts that the writer `owner` waits behind readers for `ttl`,
    /// its claim kept.
    fn assert_claimed(&mut self, owner: &str, ttl: Duration) {
        match self.acquire(owner, Kind::Exclusive) {
            Acquire::Queued {
                ttl: left,
                held: None,
            } => {
                self.x.assert_ms(left, ttl, &format!("{owner}'s claim"));
            }
            other => panic!("{owner} keeps no writer's claim: {other:?}"),
        }
    }

    /// Asserts that the fair caller `owner` waits in line, told to ask
    /// again in `ttl`, the holder having `held` left.
    fn assert_in_line(&mut self, owner: &str, ttl: Duration, held: Duration) {
        match self.acquire(owner, Kind::Fair) {
            Acquire::Queued {
                ttl: left,
                held: Some(holder),
            } => {
                self.x.assert_ms(left, ttl, &format!("{owner}'s wait"));
                self.x
                    .assert_ms(holder, held, &format!("the holder's lease, to {owner}"));
            }
            other => panic!("{owner} not in line: {other:?}"),
        }
    }

    /// The release script of `owner`'s kind: 1 freed, -1 held nothing.
    fn release(&mut self, owner: &str) -> i64 {
        let name = match self.kinds.get(owner) {
            Some(Kind::Exclusive) | None => "release",
            Some(_) => "shared_release",
        };
        script(name)
            .key(KEY)
            .arg(owner)
            .arg("client-a")
            .arg(7)
            .invoke(self.x)
            .map(support::release_answer)
            .expect("release")
    }

    /// renew.lua on `(key, owner)` items with one lease, each owner with
    /// the token of its last grant: 1 renewed, 0 gone.
    fn renew_all(&mut self, lease: Duration, items: &[(&str, &str)]) -> Vec<i64> {
        let locks: Vec<(&str, &str, u64)> = items
            .iter()
            .map(|&(key, owner)| (key, owner, self.tokens.get(owner).copied().unwrap_or(1)))
            .collect();
        let lease = u64::try_from(lease.as_millis()).expect("ms");
        let renewed = support::renew_locks(self.x, lease, &locks);
        renewed
            .into_iter()
            .map(|r| if r { RENEWED } else { GONE })
            .collect()
    }

    fn renew(&mut self, owner: &str) -> i64 {
        self.renew_all(self.lease, &[(KEY, owner)])[0]
    }

    /// inspect.lua: `[]` for an absent key, else fence, state, holder and
    /// the ms left.
    fn inspect(&mut self) -> Vec<String> {
        script("inspect")
            .key(KEY)
            .invoke(self.x)
            .expect("inspect.lua")
    }

    /// force_unlock.lua: the freed hold's fence, or 0.
    fn force_unlock(&mut self) -> i64 {
        script("force_unlock")
            .key(KEY)
            .arg("operator")
            .invoke(self.x)
            .expect("force_unlock.lua")
    }
}

fn exclusive_refuses_others_and_gives_its_holder_its_token_back(x: &mut Executor) {
    let mut b = Bench::new(x);
    let token = b.token("a", Kind::Exclusive);
    b.assert_held("b", Kind::Exclusive, LEASE);
    b.pass(ms(600));
    b.assert_held("b", Kind::Exclusive, ms(400));
    // Asking again resets the lease.
    assert_eq!(b.acquire("a", Kind::Exclusive), Acquire::Acquired(token));
    b.pass(ms(600));
    b.assert_held("b", Kind::Exclusive, ms(400));
    assert_eq!(b.release("b"), TAKEN);
    assert_eq!(b.release("a"), FREED);
    assert_eq!(b.release("a"), FREED_BEFORE);
    let next = b.token("b", Kind::Exclusive);
    b.assert_next_token(next, token);
}

fn an_exclusive_hold_ends_at_its_lease(x: &mut Executor) {
    let mut b = Bench::new(x);
    let token = b.token("a", Kind::Exclusive);
    if b.x.exact() {
        // At its expiry's millisecond the key is there still, 0 ms left
        // (Redis drops a key once its expiry has passed).
        b.pass(LEASE);
        assert_eq!(
            b.inspect(),
            [token.to_string(), "h".into(), "a".into(), "0".into()]
        );
        b.pass(ms(1));
    } else {
        b.pass(PAST_LEASE);
    }
    assert_eq!(b.renew("a"), GONE);
    assert_eq!(b.release("a"), NOT_HELD);
    // The key went with the hold: a new token, from the clock.
    let next = b.token("b", Kind::Exclusive);
    assert!(next > token, "{next} after {token}");
}

fn readers_share_the_key_each_with_its_own_token(x: &mut Executor) {
    let mut b = Bench::new(x);
    let Acquire::Shared { token: first, room } = b.acquire("r1", Kind::Read) else {
        panic!("a reader's grant")
    };
    assert!(room);
    let second = b.token("r2", Kind::Read);
    b.assert_next_token(second, first);
    let Acquire::Shared { token: third, room } = b.acquire("r3", Kind::Read) else {
        panic!("a reader's grant")
    };
    assert!(room);
    b.assert_next_token(third, second);
    assert_eq!(b.release("r1"), FREED);
    assert_eq!(b.release("r1"), NOT_HELD);
    assert_eq!(b.renew("r2"), RENEWED);
}

fn an_unrenewed_reader_frees_its_share_at_its_own_expiry(x: &mut Executor) {
    let mut b = Bench::new(x);
    b.token("r1", Kind::Read);
    b.pass(ms(500));
    let second = b.token("r2", Kind::Read);
    b.pass(ms(500));
    // r1's lease ended; r2 keeps its own for 500 ms more.
    assert_eq!(b.renew("r1"), GONE);
    assert_eq!(b.release("r1"), NOT_HELD);
    let inspected = b.inspect();
    assert_eq!(
        inspected[..3],
        [second.to_string(), "h".into(), "r2".into()]
    );
    let left: i64 = inspected[3].parse().expect("ms");
    b.x.assert_ms(left, ms(500), "r2's lease");
    b.assert_claimed("w", ms(500));
    b.pass(ms(500));
    assert!(matches!(
        b.acquire("w", Kind::Exclusive),
        Acquire::Acquired(_)
    ));
}

fn a_writer_behind_readers_keeps_a_claim_that_new_readers_wait_behind(x: &mut Executor) {
    let mut b = Bench::new(x);
    let reader = b.token("r1", Kind::Read);
    b.pass(ms(200));
    b.assert_claimed("w", ms(800));
    // A new reader waits behind the claim: told to ask again when the
    // claim would lapse unrenewed (the writer's take or give-up is
    // announced).
    b.assert_held("r2", Kind::Read, WAITER_LEASE);
    // The reader inside keeps its hold.
    assert_eq!(
        b.acquire("r1", Kind::Read),
        Acquire::Shared {
            token: reader,
            room: false
        }
    );
    assert_eq!(b.release("r1"), FREED);
    let Acquire::Acquired(writer) = b.acquire("w", Kind::Exclusive) else {
        panic!("the writer takes the key its claim kept")
    };
    b.assert_next_token(writer, reader);
    b.assert_held("r2", Kind::Read, LEASE);
    assert_eq!(b.release("w"), FREED);
    let Acquire::Shared { token, room: true } = b.acquire("r2", Kind::Read) else {
        panic!("a reader's grant, with room")
    };
    b.assert_next_token(token, writer);
}

fn the_writer_claim_is_kept_by_asking_again(x: &mut Executor) {
    let mut b = Bench::new(x);
    // Room for Redis's own clock: 400 ms between a request and the claim's
    // end, and a reader that outlives the test.
    b.lease = ms(10_000);
    b.waiter_lease = ms(1000);
    b.token("r1", Kind::Read);
    assert!(b.acquire("w", Kind::Exclusive).is_queued());
    for _ in 0..3 {
        b.pass(ms(600));
        assert!(b.acquire("w", Kind::Exclusive).is_queued());
        assert!(matches!(b.acquire("r2", Kind::Read), Acquire::Held(_)));
    }
}

fn another_writers_claim_refuses_a_writer_without_a_claim(x: &mut Executor) {
    let mut b = Bench::new(x);
    b.token("r1", Kind::Read);
    b.assert_claimed("w1", LEASE);
    b.assert_held("w2", Kind::Exclusive, LEASE);
    assert_eq!(b.release("r1"), FREED);
    // Only w1's claim lives: w2 still waits, for the claim's end.
    b.assert_held("w2", Kind::Exclusive, WAITER_LEASE);
    assert!(matches!(
        b.acquire("w1", Kind::Exclusive),
        Acquire::Acquired(_)
    ));
}

fn a_withdrawn_claim_lets_readers_in_at_once(x: &mut Executor) {
    let mut b = Bench::new(x);
    b.token("r1", Kind::Read);
    assert!(b.acquire("w", Kind::Exclusive).is_queued());
    assert!(matches!(b.acquire("r2", Kind::Read), Acquire::Held(_)));
    assert_eq!(b.release("w"), NOT_HELD);
    assert!(matches!(
        b.acquire("r2", Kind::Read),
        Acquire::Shared { room: true, .. }
    ));
}

fn a_claim_not_kept_lapses_after_the_waiter_lease(x: &mut Executor) {
    let mut b = Bench::new(x);
    b.token("r1", Kind::Read);
    assert!(b.acquire("w", Kind::Exclusive).is_queued());
    // The last instant of the claim where the clock stands still; on
    // Redis, well before it.
    let before = if b.x.exact() {
        WAITER_LEASE - ms(1)
    } else {
        WAITER_LEASE / 3
    };
    b.pass(before);
    assert!(matches!(b.acquire("r2", Kind::Read), Acquire::Held(_)));
    b.pass(WAITER_LEASE - before);
    assert!(matches!(
        b.acquire("r2", Kind::Read),
        Acquire::Shared { room: true, .. }
    ));
}

fn readers_wait_for_an_exclusive_holder(x: &mut Executor) {
    let mut b = Bench::new(x);
    b.token("x", Kind::Exclusive);
    b.pass(ms(100));
    b.assert_held("r", Kind::Read, ms(900));
    b.pass(ms(901));
    assert!(b.acquire("r", Kind::Read).is_shared());
}

fn permits_admit_at_most_n_holders(x: &mut Executor) {
    let mut b = Bench::new(x);
    let three = Kind::Permits(3);
    let first = b.token("p1", three);
    b.pass(ms(100));
    let Acquire::Shared {
        token: second,
        room: true,
    } = b.acquire("p2", three)
    else {
        panic!("a permit, with room")
    };
    b.assert_next_token(second, first);
    let Acquire::Shared {
        token: third,
        room: false,
    } = b.acquire("p3", three)
    else {
        panic!("the last permit")
    };
    b.assert_next_token(third, second);
    // Full: refused until the earliest holder's expiry.
    b.assert_held("p4", three, ms(900));
    assert_eq!(b.release("p2"), FREED);
    let Acquire::Shared {
        token: fourth,
        room: false,
    } = b.acquire("p4", three)
    else {
        panic!("the freed permit")
    };
    b.assert_next_token(fourth, third);
    b.assert_held("p2", three, ms(900));
}

fn a_permit_holder_that_dies_frees_its_permit_at_its_own_expiry(x: &mut Executor) {
    let mut b = Bench::new(x);
    let two = Kind::Permits(2);
    b.token("dead", two);
    b.pass(ms(400));
    b.token("alive", two);
    b.assert_held("next", two, ms(600));
    b.pass(ms(600));
    // "dead" never renewed: its permit is free; "alive" keeps its own.
    assert_eq!(b.renew("alive"), RENEWED);
    assert!(b.acquire("next", two).is_shared());
    b.assert_held("last", two, LEASE);
}

fn fair_serves_three_waiters_in_order(x: &mut Executor) {
    let mut b = Bench::new(x);
    let held = b.token("h", Kind::Fair);
    b.pass(ms(100));
    // The first waits for the holder; the others for the place ahead of
    // them too, whose lapse nobody would announce. Each is told the
    // holder's lease left too.
    for (waiter, until) in [("a", ms(900)), ("b", WAITER_LEASE), ("c", WAITER_LEASE)] {
        b.assert_in_line(waiter, until, ms(900));
    }
    assert_eq!(b.release("h"), FREED);
    // Free, but "a" is first: the others wait for its place's expiry.
    b.assert_in_line("c", WAITER_LEASE, Duration::ZERO);
    b.assert_in_line("b", WAITER_LEASE, Duration::ZERO);
    let Acquire::Shared {
        token: a,
        room: false,
    } = b.acquire("a", Kind::Fair)
    else {
        panic!("a's turn")
    };
    b.assert_next_token(a, held);
    b.assert_in_line("c", WAITER_LEASE, LEASE);
    assert_eq!(b.release("a"), FREED);
    assert!(b.acquire("c", Kind::Fair).is_queued());
    let Acquire::Shared {
        token: b_token,
        room: false,
    } = b.acquire("b", Kind::Fair)
    else {
        panic!("b's turn")
    };
    b.assert_next_token(b_token, a);
    assert_eq!(b.release("b"), FREED);
    let Acquire::Shared {
        token: c,
        room: false,
    } = b.acquire("c", Kind::Fair)
    else {
        panic!("c's turn")
    };
    b.assert_next_token(c, b_token);
}

fn a_fair_waiter_that_stops_asking_loses_its_place(x: &mut Executor) {
    let mut b = Bench::new(x);
    // Room for Redis's own clock: 300 ms between a request and the end of
    // the place it keeps.
    b.waiter_lease = ms(900);
    b.token("h", Kind::Fair);
    assert!(b.acquire("gone", Kind::Fair).is_queued());
    assert!(b.acquire("next", Kind::Fair).is_queued());
    assert_eq!(b.release("h"), FREED);
    // "next" keeps its place by asking; "gone" never asks again.
    b.pass(ms(600));
    b.assert_in_line("next", ms(300), Duration::ZERO);
    b.pass(ms(300));
    assert!(b.acquire("next", Kind::Fair).is_shared());
    // Back, it queues at the end of the line.
    b.assert_in_line("gone", LEASE, LEASE);
}

fn a_fair_waiter_that_gives_up_leaves_the_line(x: &mut Executor) {
    let mut b = Bench::new(x);
    b.token("h", Kind::Fair);
    assert!(b.acquire("a", Kind::Fair).is_queued());
    assert!(b.acquire("b", Kind::Fair).is_queued());
    assert_eq!(b.release("a"), NOT_HELD);
    assert_eq!(b.release("h"), FREED);
    assert!(b.acquire("b", Kind::Fair).is_shared());
}

fn a_holder_asking_again_keeps_its_token_and_resets_its_lease(x: &mut Executor) {
    let mut b = Bench::new(x);
    for kind in [Kind::Read, Kind::Permits(2), Kind::Fair] {
        b.fresh();
        let token = b.token("a", kind);
        b.pass(ms(600));
        assert_eq!(
            b.acquire("a", kind),
            Acquire::Shared { token, room: false },
            "{kind:?}"
        );
        // Past the first lease: the second request's holds.
        b.pass(ms(600));
        assert_eq!(b.renew("a"), RENEWED, "{kind:?}");
        assert_eq!(b.release("a"), FREED, "{kind:?}");
    }
}

fn renewal_finds_holders_of_every_kind_and_nothing_else(x: &mut Executor) {
    let mut b = Bench::new(x);
    for kind in [Kind::Exclusive, Kind::Read, Kind::Permits(1), Kind::Fair] {
        b.token("a", kind);
        assert_eq!(b.renew("a"), RENEWED, "{kind:?}");
        assert_eq!(b.renew("b"), GONE, "{kind:?}");
        b.pass(PAST_LEASE);
        assert_eq!(b.renew("a"), GONE, "{kind:?}");
    }
    // A place in a line is no hold.
    b.token("r", Kind::Read);
    assert!(b.acquire("w", Kind::Exclusive).is_queued());
    assert_eq!(b.renew("w"), GONE);
    let renewed = b.renew_all(ms(3000), &[(KEY, "r"), ("lock:other", "r")]);
    assert_eq!(renewed, [RENEWED, GONE]);
    // The renewal's lease holds past the first one.
    b.pass(ms(2000));
    assert_eq!(b.renew("r"), RENEWED);
}

fn a_free_key_takes_any_kind_and_tokens_keep_rising(x: &mut Executor) {
    let mut b = Bench::new(x);
    let mut last = 0;
    let kinds = [Kind::Exclusive, Kind::Read, Kind::Permits(2), Kind::Fair];
    for kind in kinds.into_iter().chain(kinds) {
        let token = b.token("a", kind);
        b.assert_next_token(token, last);
        last = token;
        assert_eq!(b.release("a"), FREED, "{kind:?}");
    }
    // A key whose holder expired is free too.
    b.token("a", Kind::Fair);
    b.pass(LEASE);
    assert!(b.token("b", Kind::Permits(5)) > last);
}

/// What the scripts call each kind in a `LOCKKIND` error.
fn kind_name(kind: Kind) -> String {
    match kind {
        Kind::Exclusive => "a plain or write lock (no mode, or mode = \"write\")".into(),
        Kind::Read => "a read-write lock held by readers (mode = \"read\")".into(),
        Kind::Permits(n) => format!("a counted lock (permits = {n})"),
        Kind::Fair => "a fair lock (fair = true)".into(),
    }
}

fn a_live_key_refuses_another_kind(x: &mut Executor) {
    let cases = [
        (Kind::Exclusive, Kind::Permits(2)),
        (Kind::Exclusive, Kind::Fair),
        (Kind::Read, Kind::Permits(2)),
        (Kind::Read, Kind::Fair),
        (Kind::Permits(2), Kind::Permits(3)),
        (Kind::Permits(2), Kind::Exclusive),
        (Kind::Fair, Kind::Read),
    ];
    let mut b = Bench::new(x);
    for (held, asked) in cases {
        b.fresh();
        b.token("a", held);
        let error = b
            .try_acquire("b", asked)
            .expect_err("another kind on a live key");
        assert_eq!(error.code(), Some("LOCKKIND"), "{held:?} then {asked:?}");
        let detail = format!(
            "{KEY} is {}; asked for {}",
            kind_name(held),
            kind_name(asked)
        );
        assert_eq!(error.detail(), Some(detail.as_str()));
        // Nothing changed.
        assert_eq!(b.release("a"), FREED, "{held:?} then {asked:?}");
    }
}

fn the_mismatch_names_both_counts_and_the_kind_of_a_waiting_line(x: &mut Executor) {
    let mut b = Bench::new(x);
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
    b.fresh();
    b.token("r", Kind::Read);
    assert!(b.acquire("w", Kind::Exclusive).is_queued());
    assert_eq!(b.release("r"), FREED);
    assert!(b.try_acquire("f", Kind::Fair).is_err());
    b.pass(WAITER_LEASE);
    assert!(b.try_acquire("f", Kind::Fair).is_ok());
}

fn inspect_names_the_holder_whose_lease_ends_last(x: &mut Executor) {
    let mut b = Bench::new(x);
    assert!(b.inspect().is_empty());
    b.token("r1", Kind::Read);
    b.pass(ms(100));
    let second = b.token("r2", Kind::Read);
    b.pass(ms(100));
    let inspected = b.inspect();
    assert_eq!(
        inspected[..3],
        [second.to_string(), "h".into(), "r2".into()]
    );
    let left: i64 = inspected[3].parse().expect("ms");
    b.x.assert_ms(left, ms(900), "r2's lease");
    b.pass(ms(901));
    assert!(b.inspect().is_empty(), "the key ends with its last holder");
}

fn inspect_of_a_freed_key_shows_its_kept_fence(x: &mut Executor) {
    let mut b = Bench::new(x);
    for kind in [Kind::Exclusive, Kind::Read, Kind::Permits(2), Kind::Fair] {
        b.fresh();
        let token = b.token("a", kind);
        assert_eq!(b.release("a"), FREED);
        let inspected = b.inspect();
        // The exclusive lock's freed value names the owner that freed it.
        let freer = if matches!(kind, Kind::Exclusive) {
            "a"
        } else {
            ""
        };
        assert_eq!(
            inspected[..3],
            [token.to_string(), "f".into(), freer.into()],
            "{kind:?}"
        );
        let left: i64 = inspected[3].parse().expect("ms");
        b.x.assert_ms(left, LEASE, "the kept fence's lease");
    }
}

fn force_unlock_frees_every_holder_and_the_writer_claim(x: &mut Executor) {
    let mut b = Bench::new(x);
    b.token("r1", Kind::Read);
    let second = b.token("r2", Kind::Read);
    assert!(b.acquire("w", Kind::Exclusive).is_queued());
    let mut notices = b.x.subscribe(KEY);
    assert_eq!(b.force_unlock(), second);
    assert_eq!(notices.next(), format!("operator:{second}"));
    assert_eq!(b.force_unlock(), 0);
    assert_eq!(b.renew("r1"), GONE);
    // The claim went too: the key is free for any kind.
    assert!(b.acquire("p", Kind::Permits(1)).is_shared());
}

fn force_unlock_of_a_fair_lock_keeps_its_line(x: &mut Executor) {
    let mut b = Bench::new(x);
    let held = b.token("h", Kind::Fair);
    assert!(b.acquire("a", Kind::Fair).is_queued());
    let mut notices = b.x.subscribe(KEY);
    assert_eq!(b.force_unlock(), held);
    assert_eq!(notices.next(), ">a", "the next in line is told");
    assert!(b.acquire("b", Kind::Fair).is_queued());
    assert!(b.acquire("a", Kind::Fair).is_shared());
}

fn a_reader_is_inspected_renewed_and_released_and_refuses_another_kind(x: &mut Executor) {
    let mut b = Bench::new(x);
    let Acquire::Shared { token, room: true } = b.acquire("r", Kind::Read) else {
        panic!("a reader's grant")
    };
    let inspected = b.inspect();
    assert_eq!(inspected[..3], [token.to_string(), "h".into(), "r".into()]);
    let left: i64 = inspected[3].parse().expect("ms");
    b.x.assert_ms(left, LEASE, "the reader's lease");
    let error = b.try_acquire("f", Kind::Fair).expect_err("a mismatch");
    assert_eq!(error.code(), Some("LOCKKIND"));
    assert_eq!(b.renew("r"), RENEWED);
    assert_eq!(b.release("r"), FREED);
    assert_eq!(b.force_unlock(), 0);
}

both!(
    exclusive_refuses_others_and_gives_its_holder_its_token_back,
    an_exclusive_hold_ends_at_its_lease,
    readers_share_the_key_each_with_its_own_token,
    an_unrenewed_reader_frees_its_share_at_its_own_expiry,
    a_writer_behind_readers_keeps_a_claim_that_new_readers_wait_behind,
    the_writer_claim_is_kept_by_asking_again,
    another_writers_claim_refuses_a_writer_without_a_claim,
    a_withdrawn_claim_lets_readers_in_at_once,
    a_claim_not_kept_lapses_after_the_waiter_lease,
    readers_wait_for_an_exclusive_holder,
    permits_admit_at_most_n_holders,
    a_permit_holder_that_dies_frees_its_permit_at_its_own_expiry,
    fair_serves_three_waiters_in_order,
    a_fair_waiter_that_stops_asking_loses_its_place,
    a_fair_waiter_that_gives_up_leaves_the_line,
    a_holder_asking_again_keeps_its_token_and_resets_its_lease,
    renewal_finds_holders_of_every_kind_and_nothing_else,
    a_free_key_takes_any_kind_and_tokens_keep_rising,
    a_live_key_refuses_another_kind,
    the_mismatch_names_both_counts_and_the_kind_of_a_waiting_line,
    inspect_names_the_holder_whose_lease_ends_last,
    inspect_of_a_freed_key_shows_its_kept_fence,
    force_unlock_frees_every_holder_and_the_writer_claim,
    force_unlock_of_a_fair_lock_keeps_its_line,
    a_reader_is_inspected_renewed_and_released_and_refuses_another_kind,
);
