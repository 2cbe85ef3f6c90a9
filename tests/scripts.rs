//! The Lua scripts' contract, called directly on a real redis-server: what
//! the Redis backend relies on when it takes, re-enters, releases and renews
//! a lock.
mod support;

use redis::{Connection, Script};
use support::RedisServer;

const KEY: &str = "lock:scripted";
const LEASE_MS: u64 = 30_000;

fn acquire_script() -> Script {
    Script::new(include_str!("../lock-runtime/src/backend/lua/acquire.lua"))
}

fn release_script() -> Script {
    Script::new(include_str!("../lock-runtime/src/backend/lua/release.lua"))
}

/// acquire.lua's answer: the token (> 0), or -2 - the holder's TTL.
fn acquire(con: &mut Connection, owner: &str) -> i64 {
    acquire_script()
        .key(KEY)
        .arg(owner)
        .arg(LEASE_MS)
        .invoke(con)
        .expect("acquire.lua")
}

/// release.lua's answer: 1 freed, 0 still held, -1 not held.
fn release(con: &mut Connection, owner: &str, token: i64) -> i64 {
    release_script()
        .key(KEY)
        .arg(owner)
        .arg("client-a")
        .arg(token)
        .invoke(con)
        .expect("release.lua")
}

fn field(con: &mut Connection, name: &str) -> Option<String> {
    redis::cmd("HGET")
        .arg(KEY)
        .arg(name)
        .query(con)
        .expect("HGET")
}

#[test]
fn a_hold_is_counted_and_given_back_one_at_a_time() {
    let server = RedisServer::start();
    let mut con = server.connection();

    let token = acquire(&mut con, "a:1");
    assert!(token > 0, "{token}");
    // The same owner again: a re-entry keeps its token and counts a hold.
    assert_eq!(acquire(&mut con, "a:1"), token);
    assert_eq!(field(&mut con, "holds").as_deref(), Some("2"));

    assert_eq!(release(&mut con, "a:1", token), 0, "one hold left");
    assert_eq!(field(&mut con, "owner").as_deref(), Some("a:1"));
    assert_eq!(release(&mut con, "a:1", token), 1, "freed");
    assert_eq!(field(&mut con, "owner"), None);
    assert_eq!(release(&mut con, "a:1", token), -1, "not held any more");

    // The freed key keeps its token, and the next holder gets the next one.
    let token_str = token.to_string();
    assert_eq!(
        field(&mut con, "fence").as_deref(),
        Some(token_str.as_str())
    );
    assert_eq!(acquire(&mut con, "b:1"), token + 1);
}

#[test]
fn another_owner_gets_the_holders_ttl_and_cannot_release() {
    let server = RedisServer::start();
    let mut con = server.connection();

    let token = acquire(&mut con, "a:1");
    let answer = acquire(&mut con, "b:1");
    let ttl = -2 - answer;
    assert!(ttl > 25_000 && ttl <= 30_000, "answer {answer}");
    assert_eq!(release(&mut con, "b:1", token), -1);
    assert_eq!(field(&mut con, "owner").as_deref(), Some("a:1"));

    // A holder whose key has no expiry (changed by hand): -1.
    let _: () = redis::cmd("PERSIST")
        .arg(KEY)
        .query(&mut con)
        .expect("PERSIST");
    assert_eq!(acquire(&mut con, "b:1"), -1);
}

#[test]
fn only_a_release_that_someone_waited_for_publishes() {
    let server = RedisServer::start();
    let mut con = server.connection();

    // Uncontended: nothing published.
    server.reset_stats();
    let token = acquire(&mut con, "a:1");
    assert_eq!(release(&mut con, "a:1", token), 1);
    assert_eq!(server.command_calls("publish"), 0);

    // Contended: the failed acquire marks the lock, the release publishes
    // `<client id>:<token>` on the key's channel and clears the mark.
    let mut listener = server.connection();
    let mut pubsub = listener.as_pubsub();
    pubsub.subscribe(KEY).expect("SUBSCRIBE");
    let token = acquire(&mut con, "a:2");
    assert!(acquire(&mut con, "b:1") < 0);
    assert_eq!(field(&mut con, "waited").as_deref(), Some("1"));
    assert_eq!(release(&mut con, "a:2", token), 1);
    pubsub
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .expect("read timeout");
    let message = pubsub.get_message().expect("the release notice");
    assert_eq!(message.get_channel_name(), KEY);
    let payload: String = message.get_payload().expect("text");
    assert_eq!(payload, format!("client-a:{token}"));
    assert_eq!(field(&mut con, "waited"), None);
}

#[test]
fn renewal_resets_only_the_leases_still_held_by_their_owner() {
    let server = RedisServer::start();
    let mut con = server.connection();
    let renew = Script::new(include_str!("../lock-runtime/src/backend/lua/renew.lua"));

    acquire(&mut con, "a:1");
    let renewed: Vec<i64> = renew
        .key(KEY)
        .arg("a:1")
        .arg(60_000)
        .key("lock:absent")
        .arg("a:1")
        .arg(60_000)
        .key(KEY)
        .arg("b:1")
        .arg(60_000)
        .invoke(&mut con)
        .expect("renew.lua");
    assert_eq!(renewed, [1, 0, 0]);
    let ttl: i64 = redis::cmd("PTTL").arg(KEY).query(&mut con).expect("PTTL");
    assert!(ttl > 55_000, "{ttl}");
}
