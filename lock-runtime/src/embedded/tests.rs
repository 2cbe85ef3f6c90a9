//! The embedded backend's Lua as a script sees it through a connection:
//! replies, numbers and errors as Redis gives them, the globals refused.

use redis::{RedisResult, Value};

use super::EmbeddedKeyspace;

/// `EVAL source 0`, and its answer as a Redis connection reads it.
fn eval(source: &str) -> RedisResult<Value> {
    let keyspace = EmbeddedKeyspace::new();
    redis::cmd("EVAL")
        .arg(source)
        .arg(0)
        .query(&mut keyspace.connection())
}

#[test]
fn replies_read_as_redis_gives_them() {
    assert_eq!(eval("return 3.7").unwrap(), Value::Int(3));
    assert_eq!(eval("return -3.7").unwrap(), Value::Int(-3));
    assert_eq!(eval("return true").unwrap(), Value::Int(1));
    assert_eq!(eval("return false").unwrap(), Value::Nil);
    assert_eq!(
        eval("return redis.call('get', 'none')").unwrap(),
        Value::Nil
    );
    assert_eq!(
        eval("return {1, 'a', nil, 2}").unwrap(),
        Value::Array(vec![Value::Int(1), Value::BulkString(b"a".to_vec())]),
    );
    assert_eq!(
        eval("return redis.call('set', 'k', 'v')").unwrap(),
        Value::Okay
    );
    assert_eq!(
        eval("return redis.status_reply('FINE')").unwrap(),
        Value::SimpleString("FINE".into()),
    );
    let error = eval("return redis.error_reply('LOCKKIND k is another kind')").unwrap_err();
    assert_eq!(error.code(), Some("LOCKKIND"));
}

#[test]
fn commands_see_numbers_as_redis_writes_them_and_errors_as_redis_raises_them() {
    // %.17g: integers as integers, 0.1 with its seventeen digits.
    let written = "redis.call('set', 'a', 5000) redis.call('set', 'b', 0.1) \
                   return {redis.call('get', 'a'), redis.call('get', 'b')}";
    assert_eq!(
        eval(written).unwrap(),
        Value::Array(vec![
            Value::BulkString(b"5000".to_vec()),
            Value::BulkString(b"0.10000000000000001".to_vec()),
        ]),
    );
    // pcall gives the error as {err=...}; call raises it, and the
    // script's answer is that error, by its own code.
    let caught = "redis.call('set', 's', 'v') \
                  local r = redis.pcall('hget', 's', 'f') return r.err";
    let text = eval(caught).unwrap();
    assert!(
        matches!(&text, Value::BulkString(t) if t.starts_with(b"WRONGTYPE")),
        "{text:?}"
    );
    let raised = eval("redis.call('set', 's', 'v') return redis.call('hget', 's', 'f')");
    assert_eq!(raised.unwrap_err().code(), Some("WRONGTYPE"));
}

#[test]
fn a_script_that_touches_a_global_fails_as_on_redis_7() {
    // Redis 7.0's words for each.
    for (source, words) in [
        ("leaked = 1 return 1", "Attempt to modify a readonly table"),
        (
            "return undefined_name",
            "Script attempted to access nonexistent global variable 'undefined_name'",
        ),
    ] {
        let error = eval(source).unwrap_err();
        assert!(error.to_string().contains(words), "{source}: {error}");
    }
    let unknown: RedisResult<Value> = redis::cmd("EVALSHA")
        .arg("0123456789012345678901234567890123456789")
        .arg(0)
        .query(&mut EmbeddedKeyspace::new().connection());
    assert_eq!(unknown.unwrap_err().code(), Some("NOSCRIPT"));
}

/// `EVAL source` with `keys` and `args` on `keyspace`.
fn eval_on(
    keyspace: &EmbeddedKeyspace,
    source: &str,
    keys: &[&str],
    args: &[&str],
) -> RedisResult<Value> {
    redis::cmd("EVAL")
        .arg(source)
        .arg(keys.len())
        .arg(keys)
        .arg(args)
        .query(&mut keyspace.connection())
}

#[test]
fn a_script_cannot_change_what_the_scripts_after_it_see() {
    // What uses the globals and the libraries a lock script uses.
    const CHECK: &str = "return {redis.call('set', KEYS[1], ARGV[1]), string.match(ARGV[1], '^(%d)'), \
                         ('x'):rep(2), tonumber('7'), math.floor(1.5), type(table.sort), type(rawset)}";
    let expected = Value::Array(vec![
        Value::Okay,
        Value::BulkString(b"4".to_vec()),
        Value::BulkString(b"xx".to_vec()),
        Value::Int(7),
        Value::Int(1),
        Value::BulkString(b"function".to_vec()),
        Value::BulkString(b"function".to_vec()),
    ]);
    // Each fails as on Redis 7 (a field written, or a global, fails at the
    // script's line; a raw write without one).
    let (at_line, raw) = (
        "user_script:1: Attempt to modify a readonly table",
        "Attempt to modify a readonly table",
    );
    let attacks = [
        ("rawset(_G, 'redis', nil)", raw),
        ("redis = nil", at_line),
        ("_G.tonumber = nil", at_line),
        ("KEYS = {}", at_line),
        ("string.match = nil", at_line),
        ("rawset(string, 'match', nil)", raw),
        ("redis.call = nil", at_line),
        ("rawset(redis, 'call', nil)", raw),
        ("math.floor = nil", at_line),
        ("table.sort = nil", at_line),
        ("table.insert(string, 1)", raw),
        ("table.remove(redis)", raw),
        ("table.sort(math)", raw),
        ("setmetatable(_G, nil)", raw),
        ("setmetatable(string, {__index = {}})", raw),
        ("getmetatable(_G).__index = nil", at_line),
        ("getmetatable('').__index = nil", at_line),
        ("rawset(getmetatable(''), '__index', {})", raw),
        // Redis 7.0's words too: the coroutine's error, raised again.
        (
            "coroutine.wrap(function() tonumber = nil end)()",
            "user_script:1: user_script:1: Attempt to modify a readonly table",
        ),
    ];
    let keyspace = EmbeddedKeyspace::new();
    for (attack, words) in attacks {
        let error = eval_on(&keyspace, attack, &["k"], &[]).unwrap_err();
        assert_eq!(error.code(), Some("ERR"), "{attack}: {error}");
        let detail = error.detail().unwrap_or_default();
        assert!(detail.starts_with(words), "{attack}: {error}");
        let after = eval_on(&keyspace, CHECK, &["k"], &["42"]);
        assert_eq!(
            after.as_ref().ok(),
            Some(&expected),
            "after {attack}: {after:?}"
        );
    }
}

#[test]
fn a_script_sees_the_globals_redis_7_gives() {
    let keyspace = EmbeddedKeyspace::new();
    for name in [
        "print",
        "dofile",
        "loadfile",
        "getfenv",
        "setfenv",
        "newproxy",
        "require",
        "os",
        "io",
        "debug",
        "load",
        "loadstring",
        "collectgarbage",
    ] {
        let error = eval_on(&keyspace, &format!("return type({name})"), &[], &[]).unwrap_err();
        let words = format!("Script attempted to access nonexistent global variable '{name}'");
        assert!(error.to_string().contains(&words), "{name}: {error}");
    }
    let present = "local n = 0 for _, v in ipairs({_G, _VERSION, assert, coroutine, error, \
                   gcinfo, getmetatable, ipairs, math, next, pairs, pcall, rawequal, \
                   rawget, rawset, redis, select, setmetatable, string, table, tonumber, tostring, type, \
                   unpack, xpcall, KEYS, ARGV}) do n = n + 1 end return n";
    assert_eq!(
        eval_on(&keyspace, present, &[], &[]).unwrap(),
        Value::Int(27)
    );
    // What Redis shows of the metatables.
    let shown = "return {tostring(getmetatable(string)), type(getmetatable(_G)), \
                 tostring(getmetatable('').__index == string)}";
    let text = |s: &str| Value::BulkString(s.as_bytes().to_vec());
    assert_eq!(
        eval_on(&keyspace, shown, &[], &[]).unwrap(),
        Value::Array(vec![text("nil"), text("table"), text("true")]),
    );
}

#[test]
fn keys_and_argv_are_new_for_each_call() {
    let keyspace = EmbeddedKeyspace::new();
    let leave = "ARGV[3] = 'x' KEYS.extra = 1 \
                 setmetatable(ARGV, {__index = function() return 'leaked' end}) return 1";
    eval_on(&keyspace, leave, &["k"], &["a"]).unwrap();
    let see = "return {#ARGV, tostring(ARGV[5]), tostring(KEYS.extra), #KEYS}";
    assert_eq!(
        eval_on(&keyspace, see, &["k"], &["a", "b"]).unwrap(),
        Value::Array(vec![
            Value::Int(2),
            Value::BulkString(b"nil".to_vec()),
            Value::BulkString(b"nil".to_vec()),
            Value::Int(1),
        ]),
    );
}

#[test]
fn a_script_runs_only_its_own_text() {
    // No compiler at run time (Lua 5.1 runs bytecode unchecked), and no
    // bytecode to give it.
    let keyspace = EmbeddedKeyspace::new();
    assert_eq!(
        eval_on(&keyspace, "return tostring(string.dump)", &[], &[]).unwrap(),
        Value::BulkString(b"nil".to_vec())
    );
    // A binary chunk sent as a script is not run.
    let chunk = {
        let lua = mlua::Lua::new();
        let f: mlua::Function = lua.load("return 1").into_function().unwrap();
        f.dump(false)
    };
    assert_eq!(chunk[0], 27, "a binary chunk");
    let error = redis::cmd("EVAL")
        .arg(&chunk)
        .arg(0)
        .query::<Value>(&mut keyspace.connection())
        .unwrap_err();
    assert!(
        error.to_string().contains("Error compiling script"),
        "{error}"
    );
}

#[test]
fn a_runaway_script_is_ended_and_frees_its_state() {
    use std::time::{Duration, Instant};
    let limit = Duration::from_millis(200);
    let mut engine = super::lua::Engine::with_limit(limit).unwrap();
    let endless = [
        &b"while true do end"[..],
        // Its own pcall cannot keep it running.
        b"while true do pcall(function() while true do end end) end",
        b"local ok = pcall(function() while true do end end) while true do end",
    ];
    for source in endless {
        let Ok(Value::BulkString(sha)) = engine.load(source) else {
            panic!("not loaded");
        };
        let started = Instant::now();
        let answer = engine.evalsha(&[&sha, b"0"], |_| None);
        let took = started.elapsed();
        let error = answer.unwrap_err();
        assert!(error.contains("time limit"), "{error}");
        assert!(took >= limit, "ended after {took:?}");
        assert!(
            took < limit + Duration::from_secs(5),
            "ended after {took:?}"
        );
        // The state runs the next script as before.
        let Ok(Value::BulkString(sha)) = engine.load(b"return #KEYS + 1") else {
            panic!("not loaded");
        };
        assert_eq!(
            engine.evalsha(&[&sha, b"1", b"k"], |_| None),
            Ok(Value::Int(2))
        );
    }
    assert_eq!(super::lua::SCRIPT_TIME_LIMIT, Duration::from_secs(5));
}

#[test]
fn the_count_of_keys_is_read_as_redis_reads_it() {
    let keyspace = EmbeddedKeyspace::new();
    let mut con = keyspace.connection();
    let count = |count: &str| -> RedisResult<Value> {
        redis::cmd("EVAL")
            .arg("return 1")
            .arg(count)
            .query(&mut keyspace.connection())
    };
    assert_eq!(count("0").unwrap(), Value::Int(1));
    for (given, words) in [
        ("-1", "Number of keys can't be negative"),
        ("00", "value is not an integer or out of range"),
        ("+0", "value is not an integer or out of range"),
        ("1", "Number of keys can't be greater than number of args"),
    ] {
        let error = count(given).unwrap_err();
        assert!(error.to_string().contains(words), "{given}: {error}");
    }
    // Checked before the script is looked up, as on Redis.
    let unknown: RedisResult<Value> = redis::cmd("EVALSHA")
        .arg("0123456789012345678901234567890123456789")
        .arg("00")
        .query(&mut con);
    assert_eq!(unknown.unwrap_err().code(), Some("ERR"));
}

#[test]
fn the_door_runs_every_keyed_command_on_its_keys_shard() {
    let keyspace = EmbeddedKeyspace::new();
    let mut con = keyspace.connection();
    // Keys of shards other than the first.
    let keys: Vec<String> = (0..)
        .map(|i| format!("door:{i}"))
        .filter(|k| super::shards::shard_of(k.as_bytes()) != 0)
        .take(4)
        .collect();
    let [s, h, l, c] = [&keys[0], &keys[1], &keys[2], &keys[3]];
    let mut door =
        |args: &[&str]| -> Value { redis::cmd(args[0]).arg(&args[1..]).query(&mut con).unwrap() };
    // Written through the door, read by a script (on the keys' shards).
    door(&["SET", s, "v"]);
    door(&["PEXPIREAT", s, "99999999999999"]);
    door(&["HSET", h, "f", "1"]);
    door(&["HINCRBY", h, "f", "2"]);
    door(&["RPUSH", l, "a"]);
    door(&["INCRBY", c, "5"]);
    let read = "return {redis.call('get', KEYS[1]), redis.call('pttl', KEYS[1]) > 0 and 1 or 0, \
                redis.call('hget', KEYS[2], 'f'), redis.call('type', KEYS[3]).ok, redis.call('get', KEYS[4])}";
    let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
    assert_eq!(
        eval_on(&keyspace, read, &[s, h, l, c], &[]).unwrap(),
        Value::Array(vec![
            bulk("v"),
            Value::Int(1),
            bulk("3"),
            bulk("list"),
            bulk("5")
        ]),
    );
    // Written by a script, read through the door.
    eval_on(
        &keyspace,
        "redis.call('hset', KEYS[1], 'g', 'w') return 1",
        &[h],
        &[],
    )
    .unwrap();
    assert_eq!(door(&["HGET", h, "g"]), bulk("w"));
    assert_eq!(
        door(&["MGET", s, c]),
        Value::Array(vec![bulk("v"), bulk("5")])
    );
    assert_eq!(door(&["EXISTS", s, h, l, c]), Value::Int(4));
    assert_eq!(door(&["TYPE", l]), Value::SimpleString("list".into()));
    assert_eq!(door(&["HDEL", h, "f", "g"]), Value::Int(2));
    assert_eq!(door(&["DEL", s, l, c]), Value::Int(3));
    assert_eq!(door(&["DBSIZE"]), Value::Int(0));
}

#[test]
fn many_calls_leave_the_lua_stack_as_they_found_it() {
    // Lua 5.1's stack holds 8,000 slots: a slot left behind by each call
    // fails a call before the 10,000th ("out of Lua stack").
    let keyspace = EmbeddedKeyspace::new();
    for i in 0..10_000 {
        let answer = eval_on(&keyspace, "return #ARGV", &["k"], &["a", "b"]);
        assert_eq!(answer.ok(), Some(Value::Int(2)), "call {i}");
    }
}
