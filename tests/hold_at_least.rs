//! `hold_at_least`: after its body, a lock stays taken until at least that
//! long after it was acquired, by the server's clock, then frees itself.
//!
//! First the scripts' part, on a redis-server and on the embedded
//! backend's keyspace (each test runs on both, see `both!`): a timed
//! acquire answers the node's time, and a release carries the hold's
//! absolute end, which the same release sent again does not move. Then the
//! calls, on Redis and on the embedded backend, with short real durations:
//! every lower bound is read from the server's own clock (the fencing token
//! of a fresh key is the server's time in µs when it was taken), upper
//! bounds leave seconds of room; and two tests on the embedded backend
//! under tokio's paused clock, where times are exact.
mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lock_runtime::{EmbeddedConnection, EmbeddedKeyspace, LockClient, LockError, LockMode};
use lock_runtime::{LockOptions, LossReason};
use redis::aio::MultiplexedConnection;
use redis::{ConnectionLike, Script, Value};
use support::executor::Executor;
use support::{expiry_ms, parse_lock, RedisServer};

// ---------------------------------------------------------------------------
// The scripts

const KEY: &str = "lock:hold";
const LEASE_MS: u64 = 1_000;

fn script(name: &str) -> Script {
    Script::new(lock_runtime::__private::script_source(name).expect("a script of the library"))
}

/// The server's time in ms (`TIME`).
fn time_ms(x: &mut impl ConnectionLike) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(x).expect("TIME");
    secs * 1000 + micros / 1000
}

fn value(x: &mut Executor) -> Option<(u64, String, String)> {
    let value: Option<String> = redis::cmd("GET").arg(KEY).query(x).expect("GET");
    value.map(|v| parse_lock(&v).expect("layout 1"))
}

/// acquire.lua as a timed call sends it: its answer as it comes.
fn timed_acquire(x: &mut Executor, owner: &str) -> Value {
    script("acquire")
        .key(KEY)
        .arg(owner)
        .arg(LEASE_MS)
        .arg(5_000)
        .arg(1)
        .invoke(x)
        .expect("acquire.lua")
}

/// A timed grant's token and node time.
fn timed_grant(x: &mut Executor, owner: &str) -> (u64, u64) {
    match timed_acquire(x, owner) {
        Value::Array(items) => match items.as_slice() {
            [Value::Int(token @ 1..), Value::Int(now @ 1..)] => (*token as u64, *now as u64),
            other => panic!("not a timed grant: {other:?}"),
        },
        other => panic!("not a timed grant: {other:?}"),
    }
}

/// release.lua with the hold's end `end_ms` (by the node's clock).
fn release_until(x: &mut Executor, owner: &str, token: u64, end_ms: u64) -> i64 {
    script("release")
        .key(KEY)
        .arg(owner)
        .arg("client-a")
        .arg(token)
        .arg(end_ms)
        .invoke(x)
        .map(support::release_answer)
        .expect("release.lua")
}

/// Asserts that the lock expires at `end` by the server's clock: exactly on
/// the embedded keyspace, within 2 ms on Redis (`PEXPIRE` counts from the
/// script's start, `TIME` is read in it).
fn assert_expires_at(x: &mut Executor, end: u64, what: &str) {
    let at = expiry_ms(x, KEY).unwrap_or_else(|| panic!("{what}: the lock is gone"));
    if x.exact() {
        assert_eq!(at, end, "{what} on {}", x.name());
    } else {
        assert!(
            at.abs_diff(end) <= 2,
            "{what} on {}: expires at {at}, the end is {end}",
            x.name()
        );
    }
}

fn a_timed_acquire_answers_its_token_and_the_node_time(x: &mut Executor) {
    let before = time_ms(x);
    let (token, now) = timed_grant(x, "a:1");
    let after = time_ms(x);
    assert!(
        before <= now && now <= after,
        "the node's TIME: {before} <= {now} <= {after}"
    );
    // A fresh key's token is the same reading, in µs.
    assert_eq!(token / 1000, now, "token {token}");

    // The same acquisition asked again (a retried request): its token, and
    // the time now.
    x.pass(Duration::from_millis(50));
    let (again, later) = timed_grant(x, "a:1");
    assert_eq!(again, token);
    assert!(later >= now + 50, "{now} then {later}");

    // A refusal answers as without ARGV[4].
    match timed_acquire(x, "b:1") {
        Value::Int(n) => assert!(n <= -2, "{n}"),
        other => panic!("a refusal is an integer: {other:?}"),
    }

    // Without ARGV[4], the bare token, as ever.
    let plain: Value = script("acquire")
        .key("lock:plain")
        .arg("a:2")
        .arg(LEASE_MS)
        .invoke(x)
        .expect("acquire.lua");
    assert!(matches!(plain, Value::Int(1..)), "{plain:?}");
}

fn a_release_with_an_end_ahead_keeps_the_hold_until_then(x: &mut Executor) {
    let (token, since) = timed_grant(x, "a:1");
    // Past the lease of 1 s: a hold may outlast it.
    let end = since + 2_500;
    x.pass(Duration::from_millis(100));
    assert_eq!(release_until(x, "a:1", token, end), 1);
    assert_eq!(
        value(x),
        Some((token, "h".into(), "a:1/kept".into())),
        "still held, by its owner marked as kept"
    );
    assert_expires_at(x, end, "kept until the end");
    match timed_acquire(x, "b:1") {
        Value::Int(n) => assert!(n <= -2, "{n}"),
        other => panic!("refused: {other:?}"),
    }

    // The same release again, later (a replay after a failover): the same
    // end, not a new one.
    x.pass(Duration::from_millis(300));
    assert_eq!(release_until(x, "a:1", token, end), 1);
    assert_expires_at(x, end, "sent again");
    assert_eq!(value(x).expect("kept").2, "a:1/kept", "marked once");
    // A release of the same owner without an end does not cut it short.
    assert_eq!(release(x, "a:1", token), 1);
    assert_expires_at(x, end, "a release without an end");

    // Past the end, it is gone, and another owner takes it.
    let left = end.saturating_sub(time_ms(x));
    x.pass(Duration::from_millis(left + 5));
    let (next, _) = timed_grant(x, "b:1");
    assert!(next > token, "{token} then {next}");
}

fn a_release_with_an_end_passed_frees_the_lock(x: &mut Executor) {
    let (token, since) = timed_grant(x, "a:1");
    x.pass(Duration::from_millis(300));
    assert_eq!(release_until(x, "a:1", token, since + 200), 1);
    let (fence, state, owner) = value(x).expect("the freed lock keeps its fence");
    // Freed, naming the owner whose release freed it.
    assert_eq!((fence, state.as_str(), owner.as_str()), (token, "f", "a:1"));
    // Another owner's release changes nothing, end or not (-4: taken; a
    // free nobody waited for keeps no record of who freed it).
    let (next, since) = timed_grant(x, "b:1");
    assert_eq!(release_until(x, "a:1", token, since + 10_000), -4);
    assert_eq!(value(x).expect("held").2, "b:1");
    assert!(next > token);
}

fn a_kept_hold_that_was_waited_for_tells_the_waiters(x: &mut Executor) {
    let mut heard = x.subscribe(KEY);
    x.reset_stats();
    let (token, since) = timed_grant(x, "a:1");
    // An uncontended hold publishes nothing when kept.
    assert_eq!(release_until(x, "a:1", token, since + 2_000), 1);
    assert_eq!(x.command_calls("publish"), 0, "nobody waited");
    let _: () = redis::cmd("DEL").arg(KEY).query(x).expect("DEL");

    let (token, since) = timed_grant(x, "a:2");
    assert!(matches!(timed_acquire(x, "b:1"), Value::Int(..=-2)));
    assert_eq!(value(x).expect("held").1, "w", "marked");
    assert_eq!(release_until(x, "a:2", token, since + 2_000), 1);
    assert_eq!(x.command_calls("publish"), 1);
    assert_eq!(heard.next(), format!("client-a:{token}"));
    // Kept as it was, its owner marked: the waiter asks again and learns
    // the new expiry.
    assert_eq!(value(x), Some((token, "w".into(), "a:2/kept".into())));
    assert_expires_at(x, since + 2_000, "kept");
}

/// release.lua without an end.
fn release(x: &mut Executor, owner: &str, token: u64) -> i64 {
    script("release")
        .key(KEY)
        .arg(owner)
        .arg("client-a")
        .arg(token)
        .invoke(x)
        .map(support::release_answer)
        .expect("release.lua")
}

/// renew.lua for the one lock at KEY, as the watchdog sends it: the indexes
/// of the locks not renewed.
fn renew(x: &mut Executor, owner: &str, token: u64, lease_ms: u64) -> Vec<i64> {
    support::renew_one(x, KEY, (owner, token), lease_ms)
}

/// A renewal that reaches the node after the release that kept the hold
/// (sent before it, or on another connection) leaves the kept end where it
/// is, whether the end comes before or after the lease it would set; the
/// release sent again still sets the same end.
fn a_renewal_after_the_release_does_not_move_the_kept_end(x: &mut Executor) {
    for (at_least, lease) in [(300, 5_000), (5_000, 300)] {
        let _: () = redis::cmd("DEL").arg(KEY).query(x).expect("DEL");
        let (token, since) = timed_grant(x, "a:1");
        let end = since + at_least;
        assert_eq!(release_until(x, "a:1", token, end), 1);
        // Lock 1 not renewed: its holder is the kept mark, another owner
        // to a renewal (4 * 1 + 0, see renew.lua).
        assert_eq!(renew(x, "a:1", token, lease), vec![4], "not renewed");
        assert_expires_at(x, end, "after a late renewal");
        assert_eq!(release_until(x, "a:1", token, end), 1, "sent again");
        assert_expires_at(x, end, "a replayed release after the renewal");
        // Waited for meanwhile: a renewal of the marked value still fails.
        assert!(matches!(timed_acquire(x, "b:1"), Value::Int(..=-2)));
        assert_eq!(renew(x, "a:1", token, lease), vec![4], "marked w");
        assert_expires_at(x, end, "waited for, after a late renewal");
    }
}

both!(
    a_renewal_after_the_release_does_not_move_the_kept_end,
    a_timed_acquire_answers_its_token_and_the_node_time,
    a_release_with_an_end_ahead_keeps_the_hold_until_then,
    a_release_with_an_end_passed_frees_the_lock,
    a_kept_hold_that_was_waited_for_tells_the_waiters,
);

// ---------------------------------------------------------------------------
// The calls

/// How long past the end a lock may take to be free, at most: seconds of
/// room for a busy machine, and still well inside the 30 s lease that a
/// lock kept without its end would last.
const ROOM: Duration = Duration::from_secs(6);

/// A backend with two clients on it (another process, as far as the locks
/// can tell) and a connection that reads the server's time and keys.
struct Place {
    name: &'static str,
    holder: LockClient,
    other: LockClient,
    con: Con,
    _server: Option<RedisServer>,
}

enum Con {
    Redis(MultiplexedConnection),
    Embedded(EmbeddedConnection),
}

impl Place {
    async fn redis() -> Place {
        Place::redis_with(LockClient::builder()).await
    }

    /// A redis-server whose holder is built by `builder`.
    async fn redis_with(builder: lock_runtime::LockClientBuilder) -> Place {
        let server = RedisServer::start();
        let url = server.url();
        let (holder, other) = (builder.connect(&url).await, LockClient::connect(&url).await);
        let con = redis::Client::open(url.as_str())
            .expect("url")
            .get_multiplexed_async_connection()
            .await
            .expect("connect");
        Place {
            name: "redis",
            holder: holder.expect("connect"),
            other: other.expect("connect"),
            con: Con::Redis(con),
            _server: Some(server),
        }
    }

    fn embedded() -> Place {
        Place::embedded_with(LockClient::builder())
    }

    /// The embedded backend, whose holder is built by `builder`.
    fn embedded_with(builder: lock_runtime::LockClientBuilder) -> Place {
        let keyspace = EmbeddedKeyspace::new();
        Place {
            name: "embedded",
            holder: builder.in_memory_shared(&keyspace),
            other: LockClient::builder().in_memory_shared(&keyspace),
            con: Con::Embedded(keyspace.connection()),
            _server: None,
        }
    }

    async fn query<T: redis::FromRedisValue>(&mut self, cmd: &redis::Cmd) -> T {
        match &mut self.con {
            Con::Redis(con) => cmd.query_async(con).await,
            Con::Embedded(con) => cmd.query_async(con).await,
        }
        .expect("a read of the backend")
    }

    /// The server's time in ms.
    async fn time_ms(&mut self) -> u64 {
        let (secs, micros): (u64, u64) = self.query(&redis::cmd("TIME")).await;
        secs * 1000 + micros / 1000
    }

    /// A `wait = 0s` call on the other client: the token it took, or its
    /// error.
    async fn probe(&self, key: &str) -> Result<u64, LockError> {
        let options = LockOptions::new().wait(Duration::ZERO);
        let body = async { Ok(lock_runtime::fencing_token().expect("held")) };
        self.other.run_locked(key, options, body).await
    }
}

/// Writes each test `async fn name(place: Place)` as `name::redis` and
/// `name::embedded`.
macro_rules! on_both {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn redis() {
                    super::$name(super::Place::redis().await).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn embedded() {
                    super::$name(super::Place::embedded()).await;
                }
            }
        )*
    };
}

/// Asserts that `key`, taken with the fresh token `token` (the server's
/// time in µs when it was taken) and `hold_at_least = hold`, stays taken
/// until at least `hold` after that by the server's clock, and is free
/// within `room` after it: another client's `wait = 0s` calls time out
/// until it takes the lock, with a token (its own acquisition's server
/// time) at or past the end. Returns that token.
async fn assert_kept_until_the_end(
    place: &mut Place,
    key: &str,
    (token, hold): (u64, Duration),
    room: Duration,
) -> u64 {
    let end = token / 1000 + ms(hold);
    let name = place.name;
    // Once the release has landed (in the background after a panic or a
    // cancellation): held for what is left of the hold (not the 30 s
    // lease), unless the server's clock is already past the end.
    let mut landed = false;
    for _ in 0..250 {
        let info = place.holder.inspect(key).await.expect("inspect");
        let now = place.time_ms().await;
        if !info.is_held() {
            assert!(now >= end, "{name}: free at {now}, before the end {end}");
        }
        if info.ttl.is_none_or(|ttl| ttl <= hold) {
            landed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        landed,
        "{name}: the lock still runs on its lease, not the hold"
    );
    for _ in 0..2_000 {
        let before = place.time_ms().await;
        match place.probe(key).await {
            Ok(next) => {
                let at = next / 1000;
                assert!(
                    at >= end,
                    "{name}: taken again at {at}, before the end {end}"
                );
                assert!(
                    at <= end + ms(room),
                    "{name}: taken again at {at}, {} ms after the end",
                    at - end
                );
                println!("{name}: taken again {} ms after the end", at - end);
                return next;
            }
            Err(error) if error.is_timeout() => assert!(
                before <= end + ms(room),
                "{name}: still held {} ms after the end",
                before - end
            ),
            Err(error) => panic!("{name}: {error}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{name}: 2,000 probes in vain");
}

fn ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).expect("ms")
}

/// The error of a body that fails.
#[derive(Debug, PartialEq)]
enum JobError {
    Failed,
    Lock(String),
}

impl From<LockError> for JobError {
    fn from(error: LockError) -> Self {
        JobError::Lock(error.to_string())
    }
}

fn hold(at_least: Duration) -> LockOptions {
    LockOptions::new()
        .wait(Duration::ZERO)
        .hold_at_least(at_least)
}

async fn kept_after_its_body_until_hold_at_least_after_it_was_taken(mut place: Place) {
    let at_least = Duration::from_millis(800);
    let holder = place.holder.clone();
    let body = async { Ok::<_, LockError>(lock_runtime::fencing_token().expect("held")) };
    let token = holder
        .run_locked("job", hold(at_least), body)
        .await
        .expect("ran");
    // The call returned at once: nothing of this client holds it now, and
    // the client may go; the hold stays in the backend all the same.
    assert!(holder.held().is_empty());
    holder.shutdown(Duration::from_secs(5)).await;
    assert_kept_until_the_end(&mut place, "job", (token, at_least), ROOM).await;
}

async fn a_body_that_fails_keeps_it_the_same(mut place: Place) {
    let at_least = Duration::from_millis(800);
    let token = Arc::new(AtomicU64::new(0));
    let seen = token.clone();
    let body = async move {
        seen.store(
            lock_runtime::fencing_token().expect("held"),
            Ordering::SeqCst,
        );
        Err::<(), _>(JobError::Failed)
    };
    let outcome = place.holder.run_locked("job", hold(at_least), body).await;
    assert_eq!(outcome, Err(JobError::Failed));
    let token = token.load(Ordering::SeqCst);
    assert_kept_until_the_end(&mut place, "job", (token, at_least), ROOM).await;
}

async fn a_body_that_panics_keeps_it_the_same(mut place: Place) {
    let at_least = Duration::from_millis(800);
    let token = Arc::new(AtomicU64::new(0));
    let seen = token.clone();
    let holder = place.holder.clone();
    let call = tokio::spawn(async move {
        let body = async move {
            seen.store(
                lock_runtime::fencing_token().expect("held"),
                Ordering::SeqCst,
            );
            if seen.load(Ordering::SeqCst) > 0 {
                panic!("the job broke");
            }
            Ok::<_, LockError>(())
        };
        holder.run_locked("job", hold(at_least), body).await
    });
    assert!(call.await.expect_err("panicked").is_panic());
    let token = token.load(Ordering::SeqCst);
    assert_kept_until_the_end(&mut place, "job", (token, at_least), ROOM).await;
}

async fn a_cancelled_call_keeps_it_the_same(mut place: Place) {
    let at_least = Duration::from_millis(800);
    let (held_tx, held_rx) = tokio::sync::oneshot::channel();
    let holder = place.holder.clone();
    let call = tokio::spawn(async move {
        let body = async move {
            let _ = held_tx.send(lock_runtime::fencing_token().expect("held"));
            std::future::pending::<()>().await;
            Ok::<_, LockError>(())
        };
        holder.run_locked("job", hold(at_least), body).await
    });
    let token = held_rx.await.expect("the body ran");
    call.abort();
    assert!(call.await.expect_err("cancelled").is_cancelled());
    assert_kept_until_the_end(&mut place, "job", (token, at_least), ROOM).await;
}

async fn a_reentered_call_neither_extends_nor_adds_a_hold(mut place: Place) {
    // The outer call's hold counts; the inner call's longer one does not.
    let (outer, inner) = (Duration::from_millis(800), Duration::from_secs(5));
    let holder = place.holder.clone();
    let body = async {
        let nested = async { Ok::<_, LockError>(()) };
        holder.run_locked("job", hold(inner), nested).await?;
        Ok::<_, LockError>(lock_runtime::fencing_token().expect("held"))
    };
    let token = holder
        .run_locked("job", hold(outer), body)
        .await
        .expect("ran");
    let room = Duration::from_secs(3);
    let next = assert_kept_until_the_end(&mut place, "job", (token, outer), room).await;
    assert!(next / 1000 < token / 1000 + ms(inner));

    // Without a hold of its own, the outer call frees the lock at its end,
    // whatever a call inside it asked for.
    let body = async {
        let nested = async { Ok::<_, LockError>(()) };
        holder.run_locked("job", hold(inner), nested).await?;
        Ok::<_, LockError>(lock_runtime::fencing_token().expect("held"))
    };
    let plain = LockOptions::new().wait(Duration::ZERO);
    let token = holder.run_locked("job", plain, body).await.expect("ran");
    let taken = place.probe("job").await.expect("free at once");
    assert!(taken > token);
}

async fn a_hold_may_outlast_the_lease(mut place: Place) {
    // Renewed while the body runs, kept past the lease after it.
    let at_least = Duration::from_millis(1_000);
    let options = hold(at_least).lease(Duration::from_millis(150));
    let body = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        Ok::<_, LockError>(lock_runtime::fencing_token().expect("held"))
    };
    let token = place
        .holder
        .run_locked("job", options, body)
        .await
        .expect("renewed while it ran");
    assert_kept_until_the_end(&mut place, "job", (token, at_least), ROOM).await;
}

async fn read_permits_and_fair_locks_refuse_it(place: Place) {
    let at_least = Duration::from_secs(1);
    for (options, kind) in [
        (hold(at_least).mode(LockMode::Read), "read"),
        (hold(at_least).permits(2), "permits"),
        (hold(at_least).fair(true), "fair"),
    ] {
        let body = never_runs(kind);
        let error = place
            .holder
            .run_locked("job", options, body)
            .await
            .expect_err("refused");
        assert!(
            matches!(&error, LockError::Invalid { message, .. } if message.contains("hold_at_least")),
            "{kind}: {error:?}"
        );
    }
    // A write lock takes it.
    let write = hold(at_least).mode(LockMode::Write);
    let body = async { Ok::<_, LockError>(()) };
    place
        .holder
        .run_locked("job", write, body)
        .await
        .expect("a write lock");
    assert!(place.probe("job").await.expect_err("kept").is_timeout());
}

async fn never_runs(kind: &str) -> Result<(), LockError> {
    panic!("a {kind} lock with hold_at_least ran its body")
}

on_both!(
    kept_after_its_body_until_hold_at_least_after_it_was_taken,
    a_body_that_fails_keeps_it_the_same,
    a_body_that_panics_keeps_it_the_same,
    a_cancelled_call_keeps_it_the_same,
    a_reentered_call_neither_extends_nor_adds_a_hold,
    a_hold_may_outlast_the_lease,
    read_permits_and_fair_locks_refuse_it,
);

// ---------------------------------------------------------------------------
// Exact, on the embedded backend under paused time

/// The most a kept lock may stay taken past its end in the suite (a busy
/// 2-core machine, `LOCK_TEST_LOAD=4`); idle it takes a few ms.
const FREE_WITHIN: Duration = Duration::from_millis(250);

/// Many locks taken together with `hold_at_least`, renewed one per call
/// (`renewal_batch_size(1)`), whose bodies end as their first renewals go
/// out: renewals reach the server before and after the releases (on the
/// client's connection while the releases go out on the caller's). A late
/// one must not move the kept end: with a hold shorter than the lease it
/// would stretch to a full lease, with one longer it would cut it short.
/// Every key stays taken until its end and is free within
/// [`FREE_WITHIN`] after it.
async fn late_renewals_move_no_kept_end(mut place: Place, lease: Duration, at_least: Duration) {
    const LOCKS: usize = 64;
    let name = place.name;
    let options = hold(at_least).lease(lease);
    let calls = (0..LOCKS).map(|i| {
        let holder = place.holder.clone();
        tokio::spawn(async move {
            let body = async move {
                let token = lock_runtime::fencing_token().expect("held");
                // Ends as the watchdog sends the first renewals (at a third
                // of the lease), a few at a time.
                let spread = Duration::from_micros(200 * (i as u64 % 16));
                tokio::time::sleep(lease / 3 + spread).await;
                Ok::<_, LockError>(token)
            };
            let key = format!("late:{i}");
            let token = holder.run_locked(&key, options, body).await.expect("ran");
            (key, token / 1000 + ms(at_least))
        })
    });
    let mut ends = Vec::new();
    for call in calls.collect::<Vec<_>>() {
        ends.push(call.await.expect("the call"));
    }
    // Every key: taken until its end by the server's clock, free soon after
    // (each read between two readings of that clock).
    for _ in 0..2_000 {
        let mut held = 0;
        for (key, end) in &ends {
            let before = place.time_ms().await;
            let info = place.other.inspect(key).await.expect("inspect");
            let after = place.time_ms().await;
            if info.is_held() {
                let holder = info.holder.as_ref().expect("held");
                assert!(holder.kept, "{name}: {key} kept, not held by a body");
                assert!(
                    before <= end + ms(FREE_WITHIN),
                    "{name}: {key} still taken {} ms after its end",
                    before - end
                );
                held += 1;
            } else {
                assert!(
                    after + 2 >= *end,
                    "{name}: {key} free {} ms before its end",
                    end - after
                );
            }
        }
        if held == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{name}: 2,000 rounds in vain");
}

async fn a_late_renewal_does_not_stretch_a_short_hold(place: Place) {
    let (lease, at_least) = (Duration::from_millis(1_500), Duration::from_millis(600));
    late_renewals_move_no_kept_end(place, lease, at_least).await;
}

async fn a_late_renewal_does_not_cut_a_long_hold_short(place: Place) {
    let (lease, at_least) = (Duration::from_millis(600), Duration::from_millis(1_500));
    late_renewals_move_no_kept_end(place, lease, at_least).await;
}

mod late_renewals {
    use super::{LockClient, Place};

    fn one_per_call() -> lock_runtime::LockClientBuilder {
        LockClient::builder().renewal_batch_size(1)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn short_hold_on_redis() {
        let place = Place::redis_with(one_per_call()).await;
        super::a_late_renewal_does_not_stretch_a_short_hold(place).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn short_hold_on_embedded() {
        let place = Place::embedded_with(one_per_call());
        super::a_late_renewal_does_not_stretch_a_short_hold(place).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn long_hold_on_redis() {
        let place = Place::redis_with(one_per_call()).await;
        super::a_late_renewal_does_not_cut_a_long_hold_short(place).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn long_hold_on_embedded() {
        let place = Place::embedded_with(one_per_call());
        super::a_late_renewal_does_not_cut_a_long_hold_short(place).await;
    }
}

/// A keyspace on the test's paused clock, and a client on it.
fn paused() -> (EmbeddedKeyspace, LockClient) {
    let keyspace = EmbeddedKeyspace::new();
    let client = LockClient::builder()
        .on_current_runtime()
        .in_memory_shared(&keyspace);
    (keyspace, client)
}

#[tokio::test(start_paused = true)]
async fn on_the_paused_clock_the_end_is_exact() {
    let (keyspace, client) = paused();
    let at_least = Duration::from_millis(800);
    let body = async { Ok::<_, LockError>(lock_runtime::fencing_token().expect("held")) };
    let token = client
        .run_locked("job", hold(at_least), body)
        .await
        .expect("ran");
    let end = token / 1000 + 800;
    let mut con = keyspace.connection();
    assert_eq!(expiry_ms(&mut con, "lock:job"), Some(end));
    let probe = || {
        let options = LockOptions::new().wait(Duration::ZERO);
        client.run_locked("job", options, async { Ok::<_, LockError>(()) })
    };
    tokio::time::sleep(Duration::from_millis(799)).await;
    assert!(probe().await.expect_err("held").is_timeout());
    // The key lives through the millisecond of its end, and is gone after.
    let now = time_ms(&mut con);
    tokio::time::sleep(Duration::from_millis(end + 1 - now)).await;
    probe().await.expect("free after the end");
}

#[tokio::test(start_paused = true)]
async fn a_lock_lost_while_its_body_ran_gets_no_hold() {
    let (keyspace, client) = paused();
    let options = hold(Duration::from_secs(5))
        .lease(Duration::from_secs(1))
        .renew(false);
    // Trusted for the lease less the drift margin (12 ms): past that, the
    // body is stopped while the server still keeps the key for a few ms.
    let body = async {
        tokio::time::sleep(Duration::from_millis(995)).await;
        Ok::<_, LockError>(())
    };
    let lost = client.run_locked("job", options, body).await;
    assert!(
        matches!(
            lost,
            Err(LockError::Lost {
                reason: LossReason::Expired,
                ..
            })
        ),
        "{lost:?}"
    );
    // Its release (in the background) frees what is left, without a hold.
    tokio::time::sleep(Duration::from_millis(1)).await;
    let mut con = keyspace.connection();
    let value: Option<String> = redis::cmd("GET")
        .arg("lock:job")
        .query(&mut con)
        .expect("GET");
    let state = value
        .and_then(|v| parse_lock(&v))
        .map(|(_, state, _)| state);
    assert_eq!(state.as_deref(), Some("f"), "freed, not kept");
}
