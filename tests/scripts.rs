//! The Lua scripts' contract (layout 1, see docs/redis-layout.md), called
//! directly on a real redis-server and on the embedded backend's keyspace
//! (each test runs on both, see `both!`): what the backends rely on when
//! they take, releases and renew a lock.
mod support;

use redis::Script;
use support::executor::Executor;
use support::{parse_lock, renew_locks};

const KEY: &str = "lock:scripted";
const LEASE_MS: u64 = 30_000;

fn script(name: &str) -> Script {
    // As the library sends them: the shared readings of a stored lock first.
    let source = lock_runtime::__private::script_source(name).expect("a script of the library");
    Script::new(source)
}

/// acquire.lua's answer: the token (> 0), or -2 - the holder's TTL.
fn acquire(con: &mut Executor, owner: &str) -> i64 {
    script("acquire")
        .key(KEY)
        .arg(owner)
        .arg(LEASE_MS)
        .invoke(con)
        .expect("acquire.lua")
}

/// release.lua's answer: 1 freed, -1 not held by `owner`.
fn release(con: &mut Executor, owner: &str, token: i64) -> i64 {
    script("release")
        .key(KEY)
        .arg(owner)
        .arg("client-a")
        .arg(token)
        .invoke(con)
        .map(support::release_answer)
        .expect("release.lua")
}

fn value(con: &mut Executor) -> Option<(u64, String, String)> {
    let value: Option<String> = redis::cmd("GET").arg(KEY).query(con).expect("GET");
    value.map(|v| parse_lock(&v).expect("layout 1"))
}

fn set(con: &mut Executor, key: &str, value: &str) {
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .arg("PX")
        .arg(LEASE_MS)
        .query(con)
        .expect("SET");
}

fn pttl(con: &mut Executor) -> i64 {
    redis::cmd("PTTL").arg(KEY).query(con).expect("PTTL")
}

fn one_acquisition_holds_and_frees_the_lock(x: &mut Executor) {
    let token = acquire(x, "a:1");
    assert!(token > 0, "{token}");
    assert_eq!(value(x), Some((token as u64, "h".into(), "a:1".into())));
    assert!(pttl(x) > LEASE_MS as i64 - 5_000);

    // Another acquisition, even of the same client, is another owner.
    let busy = acquire(x, "a:2");
    assert!(busy <= -2, "{busy}");
    assert_eq!(release(x, "a:2", 0), -4, "not its hold: another owner's");

    assert_eq!(release(x, "a:1", token), 1);
    assert_eq!(
        release(x, "a:1", token),
        -2,
        "a second release changes nothing, and learns that its own freed it"
    );
    // The freed lock keeps its fence for the rest of its lease; its release
    // named the waiting client `a` (refused above), so it reads `f:=`, and
    // then the owner whose release freed it.
    assert_eq!(value(x), Some((token as u64, "f".into(), "=a:1".into())));
    let next = acquire(x, "a:2");
    assert!(next > token, "{token} then {next}");
}

/// acquire.lua's answer for `owner` asking for a lease of `lease_ms`.
fn acquire_for(con: &mut Executor, owner: &str, lease_ms: u64) -> i64 {
    script("acquire")
        .key(KEY)
        .arg(owner)
        .arg(lease_ms)
        .invoke(con)
        .expect("acquire.lua")
}

fn an_acquire_seen_twice_answers_its_own_token_and_runs_the_lease_from_the_later_request(
    x: &mut Executor,
) {
    // An earlier request of the acquisition (an earlier Redlock attempt of
    // the same call, say) left a hold with little of its lease left.
    let token = acquire_for(x, "a:1", 2_000);
    assert!(token > 0, "{token}");
    assert!(pttl(x) <= 2_000);
    assert_eq!(
        acquire_for(x, "a:1", LEASE_MS),
        token,
        "the same acquisition"
    );
    let ttl = pttl(x);
    assert!(
        ttl > LEASE_MS as i64 - 5_000,
        "the hold lasts a lease from the later request: {ttl} ms"
    );
    assert_eq!(
        value(x),
        Some((token as u64, "h".into(), "a:1".into())),
        "the value is kept"
    );
    // A waited-for hold stays marked.
    assert!(acquire(x, "b:1") <= -2);
    assert_eq!(acquire_for(x, "a:1", LEASE_MS), token);
    assert_eq!(value(x).expect("held").1, "w");
}

fn a_stale_release_cannot_free_a_later_hold(x: &mut Executor) {
    let first = acquire(x, "a:1");
    assert_eq!(release(x, "a:1", first), 1);
    let second = acquire(x, "a:2");
    // The first acquisition's release arrives again, late: it frees
    // nothing, and finds another owner's hold (-4). Nobody waited for the
    // first hold, so no record of who freed it was kept.
    assert_eq!(release(x, "a:1", first), -4);
    assert_eq!(value(x).expect("held").2, "a:2");
    assert_eq!(release(x, "a:2", second), 1);
}

/// renew.lua's answer for one lock: empty when renewed, else
/// `[4 + why]` (why: 0 taken, 1 gone, 2 freed by an operator).
fn renew_one(x: &mut Executor, owner: &str, token: i64) -> Vec<i64> {
    support::renew_one(x, KEY, (owner, token as u64), LEASE_MS)
}

fn who_freed_a_lock_outlives_the_next_acquire(x: &mut Executor) {
    const RECORD: &str = "lock:scripted:freed{lock:scripted}";
    let get = |x: &mut Executor, key: &str| -> Option<String> {
        redis::cmd("GET").arg(key).query(x).expect("GET")
    };
    // Freed by its own release with nobody waiting, then taken: the name
    // stays in the freed value only, and the acquire writes no record.
    let first = acquire(x, "a:1");
    assert_eq!(release(x, "a:1", first), 1);
    assert_eq!(value(x).expect("freed").2, "a:1");
    assert_eq!(release(x, "a:1", first), -2, "its own release freed it");
    let _: () = redis::cmd("DEL").arg(KEY).query(x).expect("DEL");
    let first = acquire(x, "a:1");
    assert_eq!(release(x, "a:1", first), 1);
    assert!(acquire(x, "z:1") > first);
    assert_eq!(get(x, RECORD), None, "an uncontended lock taken again");
    assert_eq!(release(x, "z:1", first + 1_000_000), 1);
    let _: () = redis::cmd("DEL").arg(KEY).query(x).expect("DEL");
    // Freed by its own release while b waited, then taken by b: the name
    // moves to the record, for the rest of the freed hold's lease.
    let first = acquire(x, "a:1");
    assert!(acquire(x, "b:1") <= -2, "b waits");
    assert_eq!(release(x, "a:1", first), 1);
    assert_eq!(value(x).expect("freed").2, "=a:1");
    let left = pttl(x);
    let second = acquire(x, "b:1");
    assert!(second > first);
    assert_eq!(get(x, RECORD).as_deref(), Some("a:1"));
    let record_ttl: i64 = redis::cmd("PTTL").arg(RECORD).query(x).expect("PTTL");
    assert!(
        record_ttl > 0 && record_ttl <= left,
        "{record_ttl} of {left}"
    );
    assert_eq!(release(x, "a:1", first), -2, "its own release freed it");
    assert_eq!(renew_one(x, "a:1", first), [4 + 1], "gone, not taken");
    // Freed by an operator, then taken: the holder learns who freed it.
    assert_eq!(force_unlock(x).expect("held"), second);
    let third = acquire(x, "c:1");
    assert!(third > second);
    assert_eq!(get(x, RECORD).as_deref(), Some("!b:1"));
    assert_eq!(renew_one(x, "b:1", second), [4 + 2]);
    assert_eq!(release(x, "b:1", second), -3);
    // Another owner's hold, with no record naming this one: taken.
    assert_eq!(release(x, "a:9", 1), -4);
    assert_eq!(renew_one(x, "a:9", 1), [4]);
    // Erased, record and all: gone, and nothing names who freed it.
    let _: () = redis::cmd("DEL")
        .arg(KEY)
        .arg(RECORD)
        .query(x)
        .expect("DEL");
    assert_eq!(release(x, "c:1", third), -1);
    assert_eq!(renew_one(x, "c:1", third), [4 + 1]);
    // A name with braces but no hash tag keeps no record: a release sent
    // again after another owner took the lock cannot tell, and says taken.
    let untagged = "lock:{}scripted";
    let grant = |x: &mut Executor, owner: &str| -> i64 {
        script("acquire")
            .key(untagged)
            .arg(owner)
            .arg(LEASE_MS)
            .invoke(x)
            .expect("acquire.lua")
    };
    let free = |x: &mut Executor, owner: &str, token: i64| -> i64 {
        script("release")
            .key(untagged)
            .arg(owner)
            .arg("client-a")
            .arg(token)
            .invoke(x)
            .map(support::release_answer)
            .expect("release.lua")
    };
    let token = grant(x, "a:1");
    assert_eq!(free(x, "a:1", token), 1);
    assert!(grant(x, "b:1") > token);
    assert_eq!(free(x, "a:1", token), -4);
}

fn tokens_pass_an_older_kept_token_and_the_clock(x: &mut Executor) {
    // A restore from a snapshot brings back an old, small fence.
    set(x, KEY, "L1:5:f:");
    let token = acquire(x, "a:1") as u64;
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
    release(x, "a:1", token as i64);
    let ahead = now * 2;
    set(x, KEY, &format!("L1:{ahead}:f:"));
    assert_eq!(acquire(x, "a:2") as u64, ahead + 1);
}

fn only_a_waited_release_publishes(x: &mut Executor) {
    x.reset_stats();

    let token = acquire(x, "a:1");
    assert_eq!(release(x, "a:1", token), 1);
    assert_eq!(x.command_calls("publish"), 0, "nobody waited");

    let token = acquire(x, "a:1");
    assert!(acquire(x, "b:1") <= -2);
    assert_eq!(value(x).expect("held").1, "w", "marked");
    assert_eq!(release(x, "a:1", token), 1);
    assert_eq!(x.command_calls("publish"), 1);
}

fn foreign_values_fail_the_call_and_renewals_of_other_locks_go_on(x: &mut Executor) {
    // A lock of the older layout (a hash), and another library's string.
    let _: () = redis::cmd("HSET")
        .arg(KEY)
        .arg("owner")
        .arg("old:1")
        .arg("holds")
        .arg(1)
        .query(x)
        .expect("HSET");
    let error = script("acquire")
        .key(KEY)
        .arg("a:1")
        .arg(LEASE_MS)
        .invoke::<i64>(x)
        .expect_err("a hash is no lock of layout 1");
    assert!(error.to_string().contains("LOCKLAYOUT"), "{error}");
    set(x, "lock:other", "someone else's text");
    let error = script("release")
        .key("lock:other")
        .arg("a:1")
        .arg("client-a")
        .arg(1)
        .invoke::<i64>(x)
        .expect_err("a release that meets it is no success");
    assert!(error.to_string().contains("LOCKLAYOUT"), "{error}");

    // A renewal batch with them in it renews the others.
    let _: () = redis::cmd("DEL").arg("lock:mine").query(x).expect("DEL");
    let mine: i64 = script("acquire")
        .key("lock:mine")
        .arg("a:9")
        .arg(LEASE_MS)
        .invoke(x)
        .expect("acquire");
    assert!(mine > 0);
    let locks = [
        (KEY, "a:1", 1),
        ("lock:other", "a:1", 1),
        ("lock:mine", "a:9", mine as u64),
    ];
    assert_eq!(renew_locks(x, LEASE_MS, &locks), [false, false, true]);
}

/// The lease left on `key`, in ms.
fn pttl_of(con: &mut Executor, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query(con).expect("PTTL")
}

fn a_lock_a_waiter_marked_is_renewed_and_stays_marked(x: &mut Executor) {
    let token = acquire_for(x, "a:1", 2_000);
    assert!(acquire(x, "b:1") <= -2);
    let marked = format!("L1:{token}:w:a:1");
    let stored: String = redis::cmd("GET").arg(KEY).query(x).expect("GET");
    assert_eq!(stored, marked, "the waiter marked it");
    // The value differs from the one renew.lua is told (`h`) by one letter:
    // still the owner's lock, renewed, and kept as the waiter left it.
    assert_eq!(
        renew_locks(x, LEASE_MS, &[(KEY, "a:1", token as u64)]),
        [true]
    );
    assert!(pttl(x) > 2_000, "renewed to the lease: {} ms", pttl(x));
    let stored: String = redis::cmd("GET").arg(KEY).query(x).expect("GET");
    assert_eq!(stored, marked, "still marked");
    x.reset_stats();
    assert_eq!(release(x, "a:1", token), 1);
    assert_eq!(
        x.command_calls("publish"),
        1,
        "its release tells the waiter"
    );
}

fn a_renewal_batch_answers_for_each_lock_and_renews_only_the_owners(x: &mut Executor) {
    // Held by its owner: as acquired; marked by a waiter; with a fence the
    // owner was not told (a Redlock node its write-back missed); absent;
    // another owner's; freed; another library's text; a hash of the older
    // layout.
    let locks = [
        ("lock:held", "L1:100:h:a:1", "a:1", 100),
        ("lock:marked", "L1:101:w:a:2", "a:2", 101),
        ("lock:fence", "L1:99:h:a:3", "a:3", 102),
        ("lock:absent", "", "a:4", 103),
        ("lock:theirs", "L1:104:h:b:1", "a:5", 104),
        ("lock:freed", "L1:105:f:", "a:6", 105),
        ("lock:text", "someone else's text", "a:7", 106),
        ("lock:hash", "", "a:8", 107),
    ];
    let _: () = redis::cmd("DEL")
        .arg(locks.iter().map(|l| l.0).collect::<Vec<_>>())
        .query(x)
        .expect("DEL");
    for (key, stored, _, _) in locks.iter().filter(|l| !l.1.is_empty()) {
        set(x, key, stored);
        let _: () = redis::cmd("PEXPIRE")
            .arg(*key)
            .arg(2_000)
            .query(x)
            .expect("PEXPIRE");
    }
    let _: () = redis::cmd("HSET")
        .arg("lock:hash")
        .arg("owner")
        .arg("a:8")
        .query(x)
        .expect("HSET");
    let items: Vec<(&str, &str, u64)> = locks.iter().map(|l| (l.0, l.2, l.3)).collect();
    assert_eq!(
        renew_locks(x, LEASE_MS, &items),
        [true, true, true, false, false, false, false, false]
    );
    for (key, stored, _, _) in &locks[..3] {
        assert!(pttl_of(x, key) > 2_000, "{key} renewed");
        let kept: String = redis::cmd("GET").arg(*key).query(x).expect("GET");
        assert_eq!(&kept, stored, "{key} kept its value");
    }
    for (key, stored, _, _) in &locks[4..7] {
        assert!(pttl_of(x, key) <= 2_000, "{key} left as it was");
        let kept: String = redis::cmd("GET").arg(*key).query(x).expect("GET");
        assert_eq!(&kept, stored, "{key} kept its value");
    }
    assert_eq!(pttl_of(x, "lock:hash"), -1, "the hash left as it was");
}

fn a_renewal_batch_of_more_locks_than_one_mget_takes_renews_them_all(x: &mut Executor) {
    // renew.lua reads a batch of over 1,000 keys in slices; the answers
    // must still name the right locks.
    let keys: Vec<String> = (0..2_500).map(|i| format!("lock:many:{i}")).collect();
    for (i, key) in keys.iter().enumerate() {
        // Every 700th lock is another owner's.
        let owner = if i % 700 == 699 { "b:1" } else { "a:1" };
        set(x, key, &format!("L1:{}:h:{owner}", 1_000 + i));
    }
    let items: Vec<(&str, &str, u64)> = keys
        .iter()
        .enumerate()
        .map(|(i, key)| (key.as_str(), "a:1", 1_000 + i as u64))
        .collect();
    x.reset_stats();
    let renewed = renew_locks(x, LEASE_MS, &items);
    let not: Vec<usize> = (0..keys.len()).filter(|&i| !renewed[i]).collect();
    assert_eq!(not, [699, 1399, 2099]);
    // Read in three MGETs; only the three that differ from what their
    // owner left are read again, one by one, and then the record of who
    // freed each.
    assert_eq!(x.command_calls("mget"), 3);
    assert_eq!(x.command_calls("get"), 6);
    assert_eq!(x.command_calls("pexpireat"), 2_497);
}

fn the_fence_script_raises_only_the_owners_token(x: &mut Executor) {
    let token = acquire(x, "a:1");
    let fence = |con: &mut Executor, owner: &str, token: i64| -> i64 {
        script("fence")
            .key(KEY)
            .arg(owner)
            .arg(token)
            .invoke(con)
            .expect("fence.lua")
    };
    assert_eq!(fence(x, "b:1", token + 100), 0, "not the holder");
    assert_eq!(value(x).expect("held").0, token as u64);
    assert_eq!(fence(x, "a:1", token + 100), 1);
    assert_eq!(fence(x, "a:1", token + 50), 1, "never lowers it");
    assert_eq!(value(x).expect("held").0, token as u64 + 100);
    assert_eq!(release(x, "a:1", token + 100), 1);
    assert!(acquire(x, "b:1") > token + 100);
}

/// force_unlock.lua's answer: the freed hold's fence, or 0.
fn force_unlock(con: &mut Executor) -> redis::RedisResult<i64> {
    script("force_unlock").key(KEY).arg("operator").invoke(con)
}

fn force_unlock_frees_any_holder_keeps_fence_and_lease_and_publishes(x: &mut Executor) {
    assert_eq!(force_unlock(x).expect("absent"), 0);

    let token = acquire(x, "a:1");
    let mut notices = x.subscribe(KEY);

    // Nobody marked it waited: it publishes all the same.
    assert_eq!(force_unlock(x).expect("held"), token);
    let (fence, state, owner) = value(x).expect("kept");
    // Freed by an operator: the holder it freed behind a `!`.
    assert_eq!(
        (fence, state.as_str(), owner.as_str()),
        (token as u64, "f", "!a:1")
    );
    let ttl = pttl(x);
    assert!(ttl > 0 && ttl <= LEASE_MS as i64, "{ttl}");
    // What the client's push handler parses, on the lock's channel:
    // `<client id>:<token>`.
    assert_eq!(notices.next(), format!("operator:{token}"));

    // Free now: nothing to do, and the holder's own release is refused,
    // told that an operator freed it.
    assert_eq!(force_unlock(x).expect("free"), 0);
    assert_eq!(release(x, "a:1", token), -3);
    // The next token passes the forced one.
    assert!(acquire(x, "b:1") > token);

    set(x, KEY, "not a lock");
    let error = force_unlock(x).expect_err("foreign");
    assert_eq!(error.code(), Some("LOCKLAYOUT"), "{error}");
}

fn inspect_reads_the_parts_and_changes_nothing(x: &mut Executor) {
    let read = |con: &mut Executor| -> Vec<String> {
        script("inspect").key(KEY).invoke(con).expect("inspect.lua")
    };
    assert!(read(x).is_empty());
    let token = acquire(x, "a:1");
    let parts = read(x);
    assert_eq!(parts[..3], [token.to_string(), "h".into(), "a:1".into()]);
    let ttl: i64 = parts[3].parse().expect("pttl");
    assert!(ttl > 0 && ttl <= LEASE_MS as i64);
    assert_eq!(value(x).expect("held").1, "h", "unchanged");
    assert_eq!(release(x, "a:1", token), 1);
    // A freed value's owner part names who freed it.
    assert_eq!(read(x)[..3], [token.to_string(), "f".into(), "a:1".into()]);
}

/// A call of the script `name` (all but `renew`) on `KEY`, for the owner
/// `a:1`: what the server answered, a script error included.
fn each_script(con: &mut Executor, name: &str) -> redis::RedisResult<redis::Value> {
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
fn every_script_refuses(con: &mut Executor, stored: &str) {
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
    // renew.lua is told the stored fence, or the nearest token an acquire
    // can answer (at most 2^53 - 1): only the state or the fence is wrong.
    let fence: u64 = stored
        .split(':')
        .nth(1)
        .and_then(|f| f.parse().ok())
        .unwrap_or(u64::MAX);
    let told = fence.min(9_007_199_254_740_991);
    let locks = [(KEY, "a:1", told), ("lock:mine", "a:9", mine as u64)];
    assert_eq!(
        renew_locks(con, LEASE_MS, &locks),
        [false, true],
        "renew.lua on {stored}"
    );
    assert!(pttl(con) <= 5_000, "renew.lua left {stored} as it was");
}

fn a_state_the_layout_does_not_define_is_no_lock_to_any_script(x: &mut Executor) {
    every_script_refuses(x, "L1:5:x:a:1");
    every_script_refuses(x, "L1:5:H:a:1");
}

fn fences_that_lua_numbers_cannot_carry_exactly_are_refused(x: &mut Executor) {
    // 2^53, the first above the bound; 2^53 + 1, the first integer a Lua
    // number cannot hold; 2^63, past a signed 64-bit integer; and the bound
    // with a leading zero (the scripts never write one).
    for fence in [
        "9007199254740992",
        "9007199254740993",
        "9223372036854775808",
        "09007199254740991",
    ] {
        set(x, KEY, &format!("L1:{fence}:f:"));
        let answer = each_script(x, "acquire");
        assert!(
            is_layout_error(&answer),
            "acquire.lua on {fence}: {answer:?}"
        );
        every_script_refuses(x, &format!("L1:{fence}:h:a:1"));
    }
    // 2^53 - 1 is carried exactly; it is the last token there can be.
    let last = "9007199254740991";
    set(x, KEY, "L1:9007199254740990:f:");
    assert_eq!(acquire(x, "a:1").to_string(), last);
    let parts: Vec<String> = script("inspect").key(KEY).invoke(x).expect("inspect.lua");
    assert_eq!(parts[..3], [last.to_owned(), "h".into(), "a:1".into()]);
    assert_eq!(release(x, "a:1", 1), 1);
    let answer = each_script(x, "acquire");
    assert!(
        is_layout_error(&answer),
        "no token after {last}: {answer:?}"
    );
}

fn the_fence_script_refuses_a_token_that_lua_numbers_cannot_carry(x: &mut Executor) {
    let token = acquire(x, "a:1");
    for raised in ["9007199254740993", "9223372036854775808", "12x"] {
        let answer: redis::RedisResult<i64> =
            script("fence").key(KEY).arg("a:1").arg(raised).invoke(x);
        assert!(answer.is_err(), "fence.lua with {raised}: {answer:?}");
        assert_eq!(value(x).expect("held").0, token as u64, "unchanged");
    }
}

both!(
    one_acquisition_holds_and_frees_the_lock,
    an_acquire_seen_twice_answers_its_own_token_and_runs_the_lease_from_the_later_request,
    a_stale_release_cannot_free_a_later_hold,
    who_freed_a_lock_outlives_the_next_acquire,
    tokens_pass_an_older_kept_token_and_the_clock,
    only_a_waited_release_publishes,
    foreign_values_fail_the_call_and_renewals_of_other_locks_go_on,
    a_lock_a_waiter_marked_is_renewed_and_stays_marked,
    a_renewal_batch_answers_for_each_lock_and_renews_only_the_owners,
    a_renewal_batch_of_more_locks_than_one_mget_takes_renews_them_all,
    the_fence_script_raises_only_the_owners_token,
    force_unlock_frees_any_holder_keeps_fence_and_lease_and_publishes,
    inspect_reads_the_parts_and_changes_nothing,
    a_state_the_layout_does_not_define_is_no_lock_to_any_script,
    fences_that_lua_numbers_cannot_carry_exactly_are_refused,
    the_fence_script_refuses_a_token_that_lua_numbers_cannot_carry,
);
