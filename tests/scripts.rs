//! The Lua scripts' contract (layout 1, see docs/redis-layout.md), called
//! directly on a real redis-server: what the Redis backend relies on when it
//! takes, releases and renews a lock.
mod support;

use redis::{Connection, Script};
use support::{parse_lock, RedisServer};

const KEY: &str = "lock:scripted";
const LEASE_MS: u64 = 30_000;

fn script(name: &str) -> Script {
    // As the library sends them: the shared readings of a stored lock first.
    let source = lock_runtime::__private::script_source(name).expect("a script of the library");
    Script::new(source)
}

/// acquire.lua's answer: the token (> 0), or -2 - the holder's TTL.
fn acquire(con: &mut Connection, owner: &str) -> i64 {
    script("acquire")
        .key(KEY)
        .arg(owner)
        .arg(LEASE_MS)
        .invoke(con)
        .expect("acquire.lua")
}

/// release.lua's answer: 1 freed, -1 not held by `owner`.
fn release(con: &mut Connection, owner: &str, token: i64) -> i64 {
    script("release")
        .key(KEY)
        .arg(owner)
        .arg("client-a")
        .arg(token)
        .invoke(con)
        .expect("release.lua")
}

fn value(con: &mut Connection) -> Option<(u64, String, String)> {
    let value: Option<String> = redis::cmd("GET").arg(KEY).query(con).expect("GET");
    value.map(|v| parse_lock(&v).expect("layout 1"))
}

fn set(con: &mut Connection, key: &str, value: &str) {
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .arg("PX")
        .arg(LEASE_MS)
        .query(con)
        .expect("SET");
}

fn pttl(con: &mut Connection) -> i64 {
    redis::cmd("PTTL").arg(KEY).query(con).expect("PTTL")
}

#[test]
fn one_acquisition_holds_and_frees_the_lock() {
    let server = RedisServer::start();
    let mut con = server.connection();

    let token = acquire(&mut con, "a:1");
    assert!(token > 0, "{token}");
    assert_eq!(
        value(&mut con),
        Some((token as u64, "h".into(), "a:1".into()))
    );
    assert!(pttl(&mut con) > LEASE_MS as i64 - 5_000);

    // Another acquisition, even of the same client, is another owner.
    let busy = acquire(&mut con, "a:2");
    assert!(busy <= -2, "{busy}");
    assert_eq!(release(&mut con, "a:2", 0), -1, "not its hold");

    assert_eq!(release(&mut con, "a:1", token), 1);
    assert_eq!(
        release(&mut con, "a:1", token),
        -1,
        "a second release changes nothing"
    );
    // The freed lock keeps its fence for the rest of its lease.
    assert_eq!(
        value(&mut con),
        Some((token as u64, "f".into(), String::new()))
    );
    let next = acquire(&mut con, "a:2");
    assert!(next > token, "{token} then {next}");
}

/// acquire.lua's answer for `owner` asking for a lease of `lease_ms`.
fn acquire_for(con: &mut Connection, owner: &str, lease_ms: u64) -> i64 {
    script("acquire")
        .key(KEY)
        .arg(owner)
        .arg(lease_ms)
        .invoke(con)
        .expect("acquire.lua")
}

#[test]
fn an_acquire_seen_twice_answers_its_own_token_and_runs_the_lease_from_the_later_request() {
    let server = RedisServer::start();
    let mut con = server.connection();
    // An earlier request of the acquisition (an earlier Redlock attempt of
    // the same call, say) left a hold with little of its lease left.
    let token = acquire_for(&mut con, "a:1", 2_000);
    assert!(token > 0, "{token}");
    assert!(pttl(&mut con) <= 2_000);
    assert_eq!(
        acquire_for(&mut con, "a:1", LEASE_MS),
        token,
        "the same acquisition"
    );
    let ttl = pttl(&mut con);
    assert!(
        ttl > LEASE_MS as i64 - 5_000,
        "the hold lasts a lease from the later request: {ttl} ms"
    );
    assert_eq!(
        value(&mut con),
        Some((token as u64, "h".into(), "a:1".into())),
        "the value is kept"
    );
    // A waited-for hold stays marked.
    assert!(acquire(&mut con, "b:1") <= -2);
    assert_eq!(acquire_for(&mut con, "a:1", LEASE_MS), token);
    assert_eq!(value(&mut con).expect("held").1, "w");
}

#[test]
fn a_stale_release_cannot_free_a_later_hold() {
    let server = RedisServer::start();
    let mut con = server.connection();
    let first = acquire(&mut con, "a:1");
    assert_eq!(release(&mut con, "a:1", first), 1);
    let second = acquire(&mut con, "a:2");
    // The first acquisition's release arrives again, late.
    assert_eq!(release(&mut con, "a:1", first), -1);
    assert_eq!(value(&mut con).expect("held").2, "a:2");
    assert_eq!(release(&mut con, "a:2", second), 1);
}

#[test]
fn tokens_pass_an_older_kept_token_and_the_clock() {
    let server = RedisServer::start();
    let mut con = server.connection();
    // A restore from a snapshot brings back an old, small fence.
    set(&mut con, KEY, "L1:5:f:");
    let token = acquire(&mut con, "a:1") as u64;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_micros() as u64;
    assert!(token > 5, "{token}");
    assert!(
        token.abs_diff(now) < 60_000_000,
        "server time in µs: {token} vs {now}"
    );
    // A kept fence ahead of the clock goes on from there.
    release(&mut con, "a:1", token as i64);
    let ahead = now * 2;
    set(&mut con, KEY, &format!("L1:{ahead}:f:"));
    assert_eq!(acquire(&mut con, "a:2") as u64, ahead + 1);
}

#[test]
fn only_a_waited_release_publishes() {
    let server = RedisServer::start();
    let mut con = server.connection();
    let reset: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut con)
        .expect("RESETSTAT");
    let () = reset;

    let token = acquire(&mut con, "a:1");
    assert_eq!(release(&mut con, "a:1", token), 1);
    assert_eq!(server.command_calls("publish"), 0, "nobody waited");

    let token = acquire(&mut con, "a:1");
    assert!(acquire(&mut con, "b:1") <= -2);
    assert_eq!(value(&mut con).expect("held").1, "w", "marked");
    assert_eq!(release(&mut con, "a:1", token), 1);
    assert_eq!(server.command_calls("publish"), 1);
}

#[test]
fn foreign_values_fail_the_call_and_renewals_of_other_locks_go_on() {
    let server = RedisServer::start();
    let mut con = server.connection();
    // A lock of the older layout (a hash), and another library's string.
    let _: () = redis::cmd("HSET")
        .arg(KEY)
        .arg("owner")
        .arg("old:1")
        .arg("holds")
        .arg(1)
        .query(&mut con)
        .expect("HSET");
    let error = script("acquire")
        .key(KEY)
        .arg("a:1")
        .arg(LEASE_MS)
        .invoke::<i64>(&mut con)
        .expect_err("a hash is no lock of layout 1");
    assert!(error.to_string().contains("LOCKLAYOUT"), "{error}");
    set(&mut con, "lock:other", "someone else's text");
    let error = script("release")
        .key("lock:other")
        .arg("a:1")
        .arg("client-a")
        .arg(1)
        .invoke::<i64>(&mut con)
        .expect_err("a release that meets it is no success");
    assert!(error.to_string().contains("LOCKLAYOUT"), "{error}");

    // A renewal batch with them in it renews the others.
    let _: () = redis::cmd("DEL")
        .arg("lock:mine")
        .query(&mut con)
        .expect("DEL");
    let mine: i64 = script("acquire")
        .key("lock:mine")
        .arg("a:9")
        .arg(LEASE_MS)
        .invoke(&mut con)
        .expect("acquire");
    assert!(mine > 0);
    let renewed: Vec<i64> = script("renew")
        .key(KEY)
        .arg("a:1")
        .arg(LEASE_MS)
        .key("lock:other")
        .arg("a:1")
        .arg(LEASE_MS)
        .key("lock:mine")
        .arg("a:9")
        .arg(LEASE_MS)
        .invoke(&mut con)
        .expect("renew");
    assert_eq!(renewed, [0, 0, 1]);
}

#[test]
fn the_fence_script_raises_only_the_owners_token() {
    let server = RedisServer::start();
    let mut con = server.connection();
    let token = acquire(&mut con, "a:1");
    let fence = |con: &mut Connection, owner: &str, token: i64| -> i64 {
        script("fence")
            .key(KEY)
            .arg(owner)
            .arg(token)
            .invoke(con)
            .expect("fence.lua")
    };
    assert_eq!(fence(&mut con, "b:1", token + 100), 0, "not the holder");
    assert_eq!(value(&mut con).expect("held").0, token as u64);
    assert_eq!(fence(&mut con, "a:1", token + 100), 1);
    assert_eq!(fence(&mut con, "a:1", token + 50), 1, "never lowers it");
    assert_eq!(value(&mut con).expect("held").0, token as u64 + 100);
    assert_eq!(release(&mut con, "a:1", token + 100), 1);
    assert!(acquire(&mut con, "b:1") > token + 100);
}

/// force_unlock.lua's answer: the freed hold's fence, or 0.
fn force_unlock(con: &mut Connection) -> redis::RedisResult<i64> {
    script("force_unlock").key(KEY).arg("operator").invoke(con)
}

#[test]
fn force_unlock_frees_any_holder_keeps_fence_and_lease_and_publishes() {
    let server = RedisServer::start();
    let mut con = server.connection();
    assert_eq!(force_unlock(&mut con).expect("absent"), 0);

    let token = acquire(&mut con, "a:1");
    let mut listener = server.connection();
    let mut pubsub = listener.as_pubsub();
    pubsub.subscribe(KEY).expect("SUBSCRIBE");
    pubsub
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .expect("timeout");

    // Nobody marked it waited: it publishes all the same.
    assert_eq!(force_unlock(&mut con).expect("held"), token);
    let (fence, state, owner) = value(&mut con).expect("kept");
    assert_eq!(
        (fence, state.as_str(), owner.as_str()),
        (token as u64, "f", "")
    );
    let ttl = pttl(&mut con);
    assert!(ttl > 0 && ttl <= LEASE_MS as i64, "{ttl}");
    let message = pubsub.get_message().expect("the release notice");
    let payload: String = message.get_payload().expect("payload");
    // What the client's push handler parses: `<client id>:<token>`.
    assert_eq!(payload, format!("operator:{token}"));
    assert_eq!(message.get_channel_name(), KEY);

    // Free now: nothing to do, and the holder's own release is refused.
    assert_eq!(force_unlock(&mut con).expect("free"), 0);
    assert_eq!(release(&mut con, "a:1", token), -1);
    // The next token passes the forced one.
    assert!(acquire(&mut con, "b:1") > token);

    set(&mut con, KEY, "not a lock");
    let error = force_unlock(&mut con).expect_err("foreign");
    assert_eq!(error.code(), Some("LOCKLAYOUT"), "{error}");
}

#[test]
fn inspect_reads_the_parts_and_changes_nothing() {
    let server = RedisServer::start();
    let mut con = server.connection();
    let read = |con: &mut Connection| -> Vec<String> {
        script("inspect").key(KEY).invoke(con).expect("inspect.lua")
    };
    assert!(read(&mut con).is_empty());
    let token = acquire(&mut con, "a:1");
    let parts = read(&mut con);
    assert_eq!(parts[..3], [token.to_string(), "h".into(), "a:1".into()]);
    let ttl: i64 = parts[3].parse().expect("pttl");
    assert!(ttl > 0 && ttl <= LEASE_MS as i64);
    assert_eq!(value(&mut con).expect("held").1, "h", "unchanged");
    assert_eq!(release(&mut con, "a:1", token), 1);
    assert_eq!(
        read(&mut con)[..3],
        [token.to_string(), "f".into(), String::new()]
    );
}

/// A call of the script `name` (all but `renew`) on `KEY`, for the owner
/// `a:1`: what the server answered, a script error included.
fn each_script(con: &mut Connection, name: &str) -> redis::RedisResult<redis::Value> {
    let call = script(name);
    let mut call = call.key(KEY);
    match name {
        "acquire" => call.arg("a:1").arg(LEASE_MS),
        "release" => call.arg("a:1").arg("client-a").arg(7),
        "fence" => call.arg("a:1").arg(7),
        "force_unlock" => call.arg("operator"),
        "inspect" => &mut call,
        _ => unreachable!(),
    }
    .invoke(con)
}

/// Whether `answer` is a `LOCKLAYOUT` error that names `KEY`.
fn is_layout_error(answer: &redis::RedisResult<redis::Value>) -> bool {
    match answer {
        Err(error) => error.code() == Some("LOCKLAYOUT") && error.to_string().contains(KEY),
        Ok(_) => false,
    }
}

/// Every script meets `stored` (a value of layout 1's shape that the layout
/// does not allow) at a lock held by `a:1`: each but `renew` fails with
/// `LOCKLAYOUT`, `renew` answers "gone" for it, and nothing is changed.
fn every_script_refuses(con: &mut Connection, stored: &str) {
    for name in ["acquire", "release", "fence", "force_unlock", "inspect"] {
        set(con, KEY, stored);
        let answer = each_script(con, name);
        assert!(
            is_layout_error(&answer),
            "{name}.lua on {stored}: {answer:?}"
        );
        let kept: String = redis::cmd("GET").arg(KEY).query(con).expect("GET");
        assert_eq!(kept, stored, "{name}.lua changed nothing");
    }
    set(con, KEY, stored);
    let _: () = redis::cmd("DEL").arg("lock:mine").query(con).expect("DEL");
    let mine: i64 = script("acquire")
        .key("lock:mine")
        .arg("a:9")
        .arg(LEASE_MS)
        .invoke(con)
        .expect("acquire");
    assert!(mine > 0);
    let _: () = redis::cmd("PEXPIRE")
        .arg(KEY)
        .arg(5_000)
        .query(con)
        .expect("PEXPIRE");
    let renewed: Vec<i64> = script("renew")
        .key(KEY)
        .arg("a:1")
        .arg(LEASE_MS)
        .key("lock:mine")
        .arg("a:9")
        .arg(LEASE_MS)
        .invoke(con)
        .expect("renew.lua answers per lock");
    assert_eq!(renewed, [0, 1], "renew.lua on {stored}");
    assert!(pttl(con) <= 5_000, "renew.lua left {stored} as it was");
}

#[test]
fn a_state_the_layout_does_not_define_is_no_lock_to_any_script() {
    let server = RedisServer::start();
    let mut con = server.connection();
    every_script_refuses(&mut con, "L1:5:x:a:1");
    every_script_refuses(&mut con, "L1:5:H:a:1");
}

#[test]
fn fences_that_lua_numbers_cannot_carry_exactly_are_refused() {
    let server = RedisServer::start();
    let mut con = server.connection();
    // 2^53 + 1, the first integer a Lua number cannot hold, and 2^63, past
    // a signed 64-bit integer.
    for fence in ["9007199254740993", "9223372036854775808"] {
        set(&mut con, KEY, &format!("L1:{fence}:f:"));
        let answer = each_script(&mut con, "acquire");
        assert!(
            is_layout_error(&answer),
            "acquire.lua on {fence}: {answer:?}"
        );
        every_script_refuses(&mut con, &format!("L1:{fence}:h:a:1"));
    }
    // 2^53 - 1 is carried exactly; it is the last token there can be.
    let last = "9007199254740991";
    set(&mut con, KEY, "L1:9007199254740990:f:");
    assert_eq!(acquire(&mut con, "a:1").to_string(), last);
    let parts: Vec<String> = script("inspect")
        .key(KEY)
        .invoke(&mut con)
        .expect("inspect.lua");
    assert_eq!(parts[..3], [last.to_owned(), "h".into(), "a:1".into()]);
    assert_eq!(release(&mut con, "a:1", 1), 1);
    let answer = each_script(&mut con, "acquire");
    assert!(
        is_layout_error(&answer),
        "no token after {last}: {answer:?}"
    );
}

#[test]
fn the_fence_script_refuses_a_token_that_lua_numbers_cannot_carry() {
    let server = RedisServer::start();
    let mut con = server.connection();
    let token = acquire(&mut con, "a:1");
    for raised in ["9007199254740993", "9223372036854775808", "12x"] {
        let answer: redis::RedisResult<i64> = script("fence")
            .key(KEY)
            .arg("a:1")
            .arg(raised)
            .invoke(&mut con);
        assert!(answer.is_err(), "fence.lua with {raised}: {answer:?}");
        assert_eq!(value(&mut con).expect("held").0, token as u64, "unchanged");
    }
}
