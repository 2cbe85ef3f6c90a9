//! The shared kinds' scripts (a hash at the lock's key, see
//! docs/redis-layout.md "Lock kinds"), called directly on a real
//! redis-server and on the embedded backend's keyspace (each test runs on
//! both, see `both!`), and how the exclusive scripts meet them.
mod support;

use std::time::Duration;

use redis::{Script, Value};
use support::executor::Executor;
use support::renew_locks;

const KEY: &str = "lock:kinds";
const LONG: u64 = 30_000;
const WAITER: u64 = 5_000;

fn script(name: &str) -> Script {
    // As the library sends them: the shared readings of a stored lock first.
    let source = lock_runtime::__private::script_source(name).expect("a script of the library");
    Script::new(source)
}

/// An acquire's answer, as the runtime reads it.
#[derive(Debug, PartialEq)]
enum Answer {
    /// Exclusive grant.
    Token(i64),
    /// A shared kind's grant: token and room.
    Shared(i64, bool),
    /// Refused: the ttl in ms.
    Held(i64),
    /// Refused, a place kept: the ttl in ms (a fair waiter's answer also
    /// gives the holder's lease left: see `fair_wait`).
    Queued(i64),
}

fn answer(value: Value) -> Answer {
    match value {
        Value::Int(n) if n > 0 => Answer::Token(n),
        Value::Int(n) => Answer::Held(-2 - n),
        Value::Array(items) => match items.as_slice() {
            [Value::Int(n), Value::Int(_)] if *n < 0 => Answer::Queued(-2 - n),
            [Value::Int(t), Value::Int(room)] => Answer::Shared(*t, *room == 1),
            [Value::Int(n)] => Answer::Queued(-2 - n),
            other => panic!("unexpected answer {other:?}"),
        },
        other => panic!("unexpected answer {other:?}"),
    }
}

/// A shared kind's acquire: `kind` is `r`, `p` (with `count`) or `q`.
fn take(con: &mut Executor, owner: &str, kind: &str, count: u32, lease: u64) -> Answer {
    let value = script("shared_acquire")
        .key(KEY)
        .arg(owner)
        .arg(lease)
        .arg(kind)
        .arg(WAITER)
        .arg(count)
        .invoke(con)
        .expect("shared acquire.lua");
    answer(value)
}

fn try_take(con: &mut Executor, owner: &str, kind: &str, count: u32) -> redis::RedisResult<Value> {
    script("shared_acquire")
        .key(KEY)
        .arg(owner)
        .arg(LONG)
        .arg(kind)
        .arg(WAITER)
        .arg(count)
        .invoke(con)
}

fn write(con: &mut Executor, owner: &str) -> Answer {
    let value = script("acquire")
        .key(KEY)
        .arg(owner)
        .arg(LONG)
        .invoke(con)
        .expect("acquire.lua");
    answer(value)
}

fn give_back(con: &mut Executor, name: &str, owner: &str) -> i64 {
    script(name)
        .key(KEY)
        .arg(owner)
        .arg("client-a")
        .arg(7)
        .invoke(con)
        .expect("release")
}

fn publishes(x: &mut Executor) -> u64 {
    x.command_calls("publish")
}

fn token(answer: &Answer) -> i64 {
    match answer {
        Answer::Token(t) | Answer::Shared(t, _) => *t,
        other => panic!("not granted: {other:?}"),
    }
}

fn readers_share_and_each_keeps_its_own_lease(x: &mut Executor) {
    assert!(matches!(
        take(x, "r:1", "r", 0, 300),
        Answer::Shared(_, true)
    ));
    assert!(matches!(
        take(x, "r:2", "r", 0, LONG),
        Answer::Shared(_, true)
    ));
    // The short reader's share ends at its own lease; the other one's
    // holds on, and a renewal finds only that one.
    x.pass(Duration::from_millis(600));
    let readers = [(KEY, "r:1", 1), (KEY, "r:2", 1)];
    assert_eq!(renew_locks(x, LONG, &readers), [false, true]);
    assert!(matches!(write(x, "w:1"), Answer::Queued(_)));
    assert_eq!(give_back(x, "shared_release", "r:2"), 1);
    assert!(matches!(write(x, "w:1"), Answer::Token(_)));
}

fn a_waiting_writer_holds_new_readers_back_until_it_has_had_its_turn(x: &mut Executor) {
    x.reset_stats();
    token(&take(x, "r:1", "r", 0, LONG));
    // The writer waits, and keeps a claim: a new reader waits behind it.
    assert!(matches!(write(x, "w:1"), Answer::Queued(ttl) if ttl > 20_000));
    assert!(matches!(take(x, "r:2", "r", 0, LONG), Answer::Held(_)));
    // The last reader's release announces; the writer takes it.
    assert_eq!(give_back(x, "shared_release", "r:1"), 1);
    assert_eq!(publishes(x), 1);
    let written = token(&write(x, "w:1"));
    assert!(matches!(take(x, "r:2", "r", 0, LONG), Answer::Held(_)));
    // The writer's release announces to the readers refused meanwhile.
    assert_eq!(give_back(x, "release", "w:1"), 1);
    assert_eq!(publishes(x), 2);
    let read = token(&take(x, "r:2", "r", 0, LONG));
    assert!(
        read > written,
        "tokens rise across kinds: {read} > {written}"
    );
}

fn a_writer_that_gives_up_lets_the_readers_in_at_once(x: &mut Executor) {
    token(&take(x, "r:1", "r", 0, LONG));
    assert!(matches!(write(x, "w:1"), Answer::Queued(_)));
    assert!(matches!(take(x, "r:2", "r", 0, LONG), Answer::Held(_)));
    // Its withdrawal is a release of its owner id: nothing was held.
    assert_eq!(give_back(x, "release", "w:1"), -1);
    assert!(matches!(
        take(x, "r:2", "r", 0, LONG),
        Answer::Shared(_, true)
    ));
}

fn permits_admit_at_most_their_count_each_with_its_own_lease(x: &mut Executor) {
    assert!(matches!(
        take(x, "p:1", "p", 2, 300),
        Answer::Shared(_, true)
    ));
    assert!(matches!(
        take(x, "p:2", "p", 2, LONG),
        Answer::Shared(_, false)
    ));
    assert!(matches!(take(x, "p:3", "p", 2, LONG), Answer::Held(ttl) if ttl <= 300));
    // Another count on the live key is another lock: refused, both named.
    let error = try_take(x, "p:4", "p", 3).expect_err("another count");
    assert_eq!(error.code(), Some("LOCKKIND"), "{error}");
    let text = error.to_string();
    assert!(
        text.contains("permits = 2") && text.contains("permits = 3"),
        "{text}"
    );
    // The first holder dies: its permit frees at its own lease.
    x.pass(Duration::from_millis(600));
    assert!(matches!(
        take(x, "p:3", "p", 2, LONG),
        Answer::Shared(_, false)
    ));
    assert!(matches!(take(x, "p:4", "p", 2, LONG), Answer::Held(_)));
}

fn a_fair_line_serves_in_arrival_order_and_names_the_next_waiter(x: &mut Executor) {
    token(&take(x, "a:1", "q", 0, LONG));
    assert!(matches!(take(x, "b:1", "q", 0, LONG), Answer::Queued(_)));
    assert!(matches!(take(x, "c:1", "q", 0, LONG), Answer::Queued(_)));
    let mut notices = x.subscribe(KEY);
    assert_eq!(give_back(x, "shared_release", "a:1"), 1);
    assert_eq!(notices.next(), ">b:1");
    // c comes first after the release, and still waits for b.
    assert!(matches!(take(x, "c:1", "q", 0, LONG), Answer::Queued(_)));
    token(&take(x, "b:1", "q", 0, LONG));
    // A plain lock does not pass the line.
    let error = script("acquire")
        .key(KEY)
        .arg("x:1")
        .arg(LONG)
        .invoke::<Value>(x)
        .expect_err("a plain lock on a fair key");
    assert_eq!(error.code(), Some("LOCKKIND"), "{error}");
    assert_eq!(give_back(x, "shared_release", "b:1"), 1);
    token(&take(x, "c:1", "q", 0, LONG));
}

/// A fair caller's refusal: when to ask again (ms) and the holder's lease
/// left (ms, 0 when nobody holds the lock).
fn fair_wait(con: &mut Executor, owner: &str) -> (i64, i64) {
    let value = try_take(con, owner, "q", 0).expect("shared acquire.lua");
    match value {
        Value::Array(items) => match items.as_slice() {
            [Value::Int(n), Value::Int(holder)] if *n < 0 => (-2 - n, *holder),
            other => panic!("not a fair refusal with the holder's lease: {other:?}"),
        },
        other => panic!("not a fair refusal: {other:?}"),
    }
}

fn a_fair_waiter_learns_the_holders_lease_beside_when_to_ask_again(x: &mut Executor) {
    token(&take(x, "a:1", "q", 0, LONG));
    // The first waiter asks again at the holder's expiry.
    let (retry, holder) = fair_wait(x, "b:1");
    assert!(retry > LONG as i64 - 1000, "{retry}");
    assert!(holder > LONG as i64 - 1000, "{holder}");
    // The second one at the place ahead's (its waiter lease), should b's
    // process die; the holder still has its own 30 s.
    let (retry, holder) = fair_wait(x, "c:1");
    assert!(retry <= WAITER as i64, "{retry}");
    assert!(holder > LONG as i64 - 1000, "{holder}");
    // Nobody holds it: b goes first, and the lease left is 0.
    assert_eq!(give_back(x, "shared_release", "a:1"), 1);
    let (retry, holder) = fair_wait(x, "c:1");
    assert!(retry <= WAITER as i64, "{retry}");
    assert_eq!(holder, 0);
}

fn a_fair_waiter_that_gives_up_or_stops_asking_leaves_the_line(x: &mut Executor) {
    token(&take(x, "a:1", "q", 0, LONG));
    assert!(matches!(take(x, "b:1", "q", 0, LONG), Answer::Queued(_)));
    // c's place lives 300 ms without a heartbeat.
    let queued: Value = script("shared_acquire")
        .key(KEY)
        .arg("c:1")
        .arg(LONG)
        .arg("q")
        .arg(300)
        .arg(0)
        .invoke(x)
        .expect("acquire");
    assert!(matches!(answer(queued), Answer::Queued(_)));
    assert!(matches!(take(x, "d:1", "q", 0, LONG), Answer::Queued(_)));
    // b gives up; c stops asking.
    assert_eq!(give_back(x, "shared_release", "b:1"), -1);
    x.pass(Duration::from_millis(600));
    assert_eq!(give_back(x, "shared_release", "a:1"), 1);
    token(&take(x, "d:1", "q", 0, LONG));
}

fn kinds_that_cannot_share_a_key_are_refused_while_it_is_live(x: &mut Executor) {
    let plain = token(&write(x, "x:1"));
    for (kind, count) in [("p", 3), ("q", 0)] {
        let error = try_take(x, "y:1", kind, count).expect_err("plain is live");
        assert_eq!(error.code(), Some("LOCKKIND"), "{error}");
    }
    // A reader waits for a writer, and marks it waited for.
    assert!(matches!(take(x, "r:1", "r", 0, LONG), Answer::Held(_)));
    assert_eq!(give_back(x, "release", "x:1"), 1);
    // Free: any kind takes the key, with a larger token.
    let permit = token(&take(x, "p:1", "p", 3, LONG));
    assert!(permit > plain);
    let error = script("acquire")
        .key(KEY)
        .arg("x:2")
        .arg(LONG)
        .invoke::<Value>(x)
        .expect_err("permits are live");
    assert!(error.to_string().contains("permits = 3"), "{error}");
    assert_eq!(give_back(x, "shared_release", "p:1"), 1);
    let again = token(&write(x, "x:2"));
    assert!(again > permit);
    let inspected: Vec<String> = script("inspect").key(KEY).invoke(x).expect("inspect");
    assert_eq!(inspected[2], "x:2");
}

fn fields(con: &mut Executor) -> Vec<String> {
    // HGETALL: field, value, field, value...
    let all: Vec<String> = redis::cmd("HGETALL").arg(KEY).query(con).expect("HGETALL");
    let mut names: Vec<String> = all.into_iter().step_by(2).collect();
    names.sort();
    names
}

fn a_waiter_whose_place_lapsed_takes_a_new_one_rather_than_hang(x: &mut Executor) {
    token(&take(x, "a:1", "q", 0, LONG));
    let lapsing: Value = script("shared_acquire")
        .key(KEY)
        .arg("b:1")
        .arg(LONG)
        .arg("q")
        .arg(200)
        .arg(0)
        .invoke(x)
        .expect("acquire");
    assert!(matches!(answer(lapsing), Answer::Queued(_)));
    // b was paused past its waiter lease: c is first now.
    x.pass(Duration::from_millis(400));
    assert!(matches!(take(x, "c:1", "q", 0, LONG), Answer::Queued(_)));
    // b asks again: a new ticket, behind c; it is served after c.
    assert!(matches!(take(x, "b:1", "q", 0, LONG), Answer::Queued(_)));
    assert_eq!(give_back(x, "shared_release", "a:1"), 1);
    assert!(matches!(take(x, "b:1", "q", 0, LONG), Answer::Queued(_)));
    token(&take(x, "c:1", "q", 0, LONG));
    assert_eq!(give_back(x, "shared_release", "c:1"), 1);
    token(&take(x, "b:1", "q", 0, LONG));
}

fn nothing_of_a_line_or_of_holders_outlives_them(x: &mut Executor) {
    token(&take(x, "a:1", "q", 0, LONG));
    for waiter in ["b:1", "c:1", "d:1"] {
        assert!(matches!(take(x, waiter, "q", 0, LONG), Answer::Queued(_)));
    }
    assert_eq!(give_back(x, "shared_release", "c:1"), -1);
    assert_eq!(give_back(x, "shared_release", "a:1"), 1);
    token(&take(x, "b:1", "q", 0, LONG));
    assert_eq!(give_back(x, "shared_release", "b:1"), 1);
    token(&take(x, "d:1", "q", 0, LONG));
    assert_eq!(give_back(x, "shared_release", "d:1"), 1);
    // The line is gone; what is left is the kind, the fence and the
    // counter, and the key ends with the last lease.
    assert_eq!(fields(x), ["f", "k", "qt"]);
    let pttl: i64 = redis::cmd("PTTL").arg(KEY).query(x).expect("PTTL");
    assert!(pttl > 0 && pttl <= LONG as i64, "{pttl}");
    // Readers with short leases: the key ends with them, nothing lingers.
    redis::cmd("DEL").arg(KEY).query::<()>(x).expect("DEL");
    token(&take(x, "r:1", "r", 0, 200));
    token(&take(x, "r:2", "r", 0, 300));
    x.pass(Duration::from_millis(500));
    let exists: i64 = redis::cmd("EXISTS").arg(KEY).query(x).expect("EXISTS");
    assert_eq!(exists, 0, "the key outlived its holders");
}

fn a_reader_behind_a_writers_claim_is_told_to_try_when_the_claim_would_lapse(x: &mut Executor) {
    token(&take(x, "r:1", "r", 0, LONG));
    // The writer's claim lives 300 ms unless renewed.
    let queued: Value = script("acquire")
        .key(KEY)
        .arg("w:1")
        .arg(LONG)
        .arg(300)
        .invoke(x)
        .expect("acquire.lua");
    assert!(matches!(answer(queued), Answer::Queued(_)));
    let Answer::Held(ttl) = take(x, "r:2", "r", 0, LONG) else {
        panic!("a reader behind the claim waits");
    };
    assert!(ttl <= 300, "told to wait {ttl} ms, past the claim's end");
    // The writer died: its claim lapses, and the reader gets in.
    x.pass(Duration::from_millis(400));
    assert!(matches!(
        take(x, "r:2", "r", 0, LONG),
        Answer::Shared(_, true)
    ));
}

both!(
    readers_share_and_each_keeps_its_own_lease,
    a_waiting_writer_holds_new_readers_back_until_it_has_had_its_turn,
    a_writer_that_gives_up_lets_the_readers_in_at_once,
    permits_admit_at_most_their_count_each_with_its_own_lease,
    a_fair_line_serves_in_arrival_order_and_names_the_next_waiter,
    a_fair_waiter_learns_the_holders_lease_beside_when_to_ask_again,
    a_fair_waiter_that_gives_up_or_stops_asking_leaves_the_line,
    kinds_that_cannot_share_a_key_are_refused_while_it_is_live,
    a_waiter_whose_place_lapsed_takes_a_new_one_rather_than_hang,
    nothing_of_a_line_or_of_holders_outlives_them,
    a_reader_behind_a_writers_claim_is_told_to_try_when_the_claim_would_lapse,
);
