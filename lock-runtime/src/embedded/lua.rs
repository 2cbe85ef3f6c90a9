//! The embedded backend's Lua: one Lua 5.1 state (the version Redis and
//! Valkey embed) that runs scripts as Redis runs them, on the [`Keyspace`]
//! it holds.
//!
//! As in Redis: a script is compiled once, by `SCRIPT LOAD` (or `EVAL`),
//! and called by its SHA-1; `KEYS` and `ARGV` are its globals, two tables
//! filled for each call and emptied after it; `redis.call` raises a command's error and
//! `redis.pcall` returns it as `{err=...}`; a status reply is `{ok=...}`, a
//! nil reply `false`; numbers passed to a command are written with
//! `%.17g`, numbers in replies are truncated to integers, and a table is
//! returned as an array up to its first nil; `redis.error_reply` and
//! `redis.status_reply` build those tables.
//!
//! And as in Redis 7, nothing a script does outlives it: it sees the
//! globals Redis 7 gives (no `print`, `dofile`, `loadfile`, `getfenv`,
//! `setfenv` or `newproxy`); reading a global that does not exist, or
//! writing any global or any field of `redis`, `string`, `math`, `table`,
//! `coroutine` or of the strings' metatable, fails the script ("Script
//! attempted to access nonexistent global variable", "Attempt to modify a
//! readonly table"), through `rawset`, `setmetatable`, `table.insert`,
//! `table.remove` and `table.sort` too. Vanilla Lua 5.1 has no read-only
//! tables, so each of those tables is seen through an empty view whose
//! writes fail (`PRELUDE`): `pairs` and `rawget` on one see nothing, where
//! Redis shows its fields.
//!
//! Where it is stricter than Redis: a script runs only its own text (no
//! `load`, `loadstring` or `string.dump`, nor `collectgarbage`), and one
//! that runs past [`SCRIPT_TIME_LIMIT`] is ended with an error (Redis would
//! answer `BUSY` to everyone else until a `SCRIPT KILL`), so that no script
//! holds a shard of the keyspace for good.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mlua::{
    BorrowedBytes, Function, HookTriggers, Lua, LuaOptions, StdLib, Table, Variadic, VmState,
};
use redis::Value;

use super::args::integer;
use super::keyspace::{Keyspace, Reply};

const NOSCRIPT: &str = "NOSCRIPT No matching script. Please use EVAL.";

/// How long a script may run before it is ended with an error: Redis's
/// `busy-reply-threshold` (5 s), after which Redis lets `SCRIPT KILL` end
/// it. The lock scripts run in microseconds; only a runaway script meets
/// it, and ending it frees the shard it holds.
pub(super) const SCRIPT_TIME_LIMIT: Duration = Duration::from_secs(5);

/// The error of a script ended at [`SCRIPT_TIME_LIMIT`].
const ENDED: &str = "ERR the script ran past the embedded backend's time limit and was ended \
                     (what it wrote before stays written)";

/// Instructions between two looks at the clock while a script runs.
const INSTRUCTIONS_PER_LOOK: u32 = 10_000;

/// What the state runs once, given the keyspace's entry `command`
/// (arguments as strings; an error reply as `{err=...}`) and the `KEYS`
/// and `ARGV` tables: it builds the `redis` table, makes the globals and
/// the library tables read-only, and returns the wrapper that runs a script
/// and turns what it raised into an error reply, and the globals' view,
/// which becomes the state's globals.
const PRELUDE: &str = r#"
local command, keys, argv = ...
local G = _G
local type, error, pcall, tostring, next, ipairs = type, error, pcall, tostring, next, ipairs
local rawget, rawset, setmetatable, getmetatable = rawget, rawset, setmetatable, getmetatable
local READONLY = 'Attempt to modify a readonly table'

-- The views a script may not change, and what getmetatable shows of the
-- metatables it may not see (false: none). A write to a view's field
-- fails at the script's line (Redis's words); a raw write, at none.
local readonly, shown = {}, {}
local function refuse() error(READONLY, 2) end
local function guard(t) if readonly[t] then error(READONLY, 0) end end
local function view(real, shown_as)
  local v, meta = {}, {__index = real, __newindex = refuse}
  setmetatable(v, meta)
  readonly[v], shown[meta] = true, shown_as
  return v
end

-- The functions that write a table raw refuse the views.
do
  local insert, remove, sort = table.insert, table.remove, table.sort
  G.rawset = function(t, ...) guard(t) return rawset(t, ...) end
  G.setmetatable = function(t, ...) guard(t) return setmetatable(t, ...) end
  G.getmetatable = function(v)
    local meta = getmetatable(v)
    local as = shown[meta]
    if as == nil then return meta end
    return as or nil
  end
  table.insert = function(t, ...) guard(t) return insert(t, ...) end
  table.remove = function(t, ...) guard(t) return remove(t, ...) end
  table.sort = function(t, ...) guard(t) return sort(t, ...) end
end

-- No way to compile code at run time, to read a file, or to reach the
-- collector or another function's environment: only the script's own text
-- runs.
string.dump = nil

local redis = {
  pcall = command,
  call = function(...)
    local reply = command(...)
    if type(reply) == 'table' and reply.err then
      error(reply, 2)
    end
    return reply
  end,
  error_reply = function(e) return {err = e} end,
  status_reply = function(s) return {ok = s} end,
  log = function() end,
  LOG_DEBUG = 0, LOG_VERBOSE = 1, LOG_NOTICE = 2, LOG_WARNING = 3,
}

-- Redis 7's globals (less the libraries this state has not: bit, cjson,
-- cmsgpack, struct; and less `load`, `loadstring` and `collectgarbage`),
-- each library and the globals seen through a view.
local allowed = {}
for name in string.gmatch('_G _VERSION assert coroutine error gcinfo ' ..
    'getmetatable ipairs math next pairs pcall rawequal rawget rawset ' ..
    'select setmetatable string table tonumber tostring type unpack xpcall', '%S+') do
  allowed[name] = true
end
for name in next, G do
  if not allowed[name] then G[name] = nil end
end
local strings = getmetatable('')
for _, name in ipairs({'string', 'math', 'table', 'coroutine'}) do
  G[name] = view(G[name], false)
end
strings.__index = G.string
shown[strings] = view({__index = G.string}, false)
G.redis, G.KEYS, G.ARGV = view(redis, false), keys, argv
local globals = view(G, view({}, false))
G._G = globals
setmetatable(G, {
  __index = function(_, name)
    error("Script attempted to access nonexistent global variable '" .. tostring(name) .. "'", 2)
  end,
})

-- KEYS and ARGV emptied of all a script put in them.
local function empty(t)
  for k in next, t do rawset(t, k, nil) end
end

local function run(f, sha)
  local ok, reply = pcall(f)
  empty(keys)
  empty(argv)
  if ok then
    return reply
  end
  local err = type(reply) == 'table' and rawget(reply, 'err')
  if err then
    return {err = tostring(err) .. ' script: ' .. sha}
  end
  return {err = 'ERR ' .. tostring(reply) .. ' script: ' .. sha}
end
return run, globals
"#;

/// A Lua state with its compiled scripts; the keyspace is its app data.
pub(super) struct Engine {
    lua: Lua,
    /// `run(f, sha)` of the prelude.
    run: Function,
    /// The globals' read-only view, every script's environment.
    globals: Table,
    /// Compiled scripts by SHA-1 (lowercase hex).
    scripts: HashMap<String, Function>,
    /// The tables a script sees as `KEYS` and `ARGV`, filled anew for
    /// each call.
    keys: Table,
    argv: Table,
    /// The running script's time limit.
    budget: Arc<Budget>,
}

/// When the running script started, and whether it was ended: what the
/// state's count hook reads.
struct Budget {
    /// The time the budget counts from.
    base: Instant,
    /// Nanoseconds from `base` to the running script's start; `u64::MAX`
    /// when none runs.
    started: AtomicU64,
    /// Set by the hook that ended a script, until the next call.
    ended: AtomicBool,
    /// How long a script may run.
    limit: Duration,
}

impl Budget {
    /// Nanoseconds since `base`.
    fn now(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX - 1)
    }
}

/// Sets the state's hook: every [`INSTRUCTIONS_PER_LOOK`] instructions it
/// reads the clock, and once the running script is over its limit, it
/// raises [`ENDED`] at every instruction, so that no `pcall` of the
/// script's can catch it for good: the error reaches the prelude's `run`,
/// then the caller.
fn watch(lua: &Lua, budget: &Arc<Budget>) -> mlua::Result<()> {
    let budget = budget.clone();
    lua.set_hook(
        HookTriggers::new().every_nth_instruction(INSTRUCTIONS_PER_LOOK),
        move |lua, _| {
            let started = budget.started.load(Ordering::Relaxed);
            let limit = u64::try_from(budget.limit.as_nanos()).unwrap_or(u64::MAX);
            if started == u64::MAX || budget.now().saturating_sub(started) < limit {
                return Ok(VmState::Continue);
            }
            budget.ended.store(true, Ordering::Relaxed);
            lua.set_hook(HookTriggers::new().every_nth_instruction(1), |_, _| {
                Err(mlua::Error::runtime(ENDED))
            })?;
            Err(mlua::Error::runtime(ENDED))
        },
    )
}

/// Makes `table` the sequence of `items`, without a metatable (the
/// prelude's `run` empties it after each script, whatever the script put
/// in it; `Table::clear` is not used: mlua 0.11.6's leaves a slot on the
/// Lua stack at each call).
fn fill(lua: &Lua, table: &Table, items: &[&[u8]]) -> mlua::Result<()> {
    if table.metatable().is_some() {
        table.set_metatable(None)?;
    }
    let old = table.raw_len();
    for (i, item) in items.iter().enumerate() {
        table.raw_seti(i + 1, lua.create_string(item)?)?;
    }
    for i in items.len() + 1..=old {
        table.raw_seti(i, mlua::Value::Nil)?;
    }
    Ok(())
}

/// `EVAL` and `EVALSHA`'s count of keys, out of `available` arguments
/// after it, or Redis's error for it.
pub(super) fn numkeys(arg: &[u8], available: usize) -> Result<usize, String> {
    let n = integer(arg)?;
    if n > i64::try_from(available).unwrap_or(i64::MAX) {
        return Err("ERR Number of keys can't be greater than number of args".into());
    }
    usize::try_from(n).map_err(|_| "ERR Number of keys can't be negative".into())
}

impl Engine {
    /// A new state on an empty keyspace.
    pub(super) fn new() -> mlua::Result<Engine> {
        Self::with_limit(SCRIPT_TIME_LIMIT)
    }

    /// A new state whose scripts are ended after `limit`.
    pub(super) fn with_limit(limit: Duration) -> mlua::Result<Engine> {
        let libs = StdLib::TABLE | StdLib::STRING | StdLib::MATH;
        let lua = Lua::new_with(libs, LuaOptions::default())?;
        lua.set_app_data(Keyspace::default());
        let format: Function = lua
            .globals()
            .raw_get::<Table>("string")?
            .raw_get("format")?;
        let command = lua.create_function(move |lua, args: Variadic<mlua::Value>| {
            let reply = match command_args(&format, &args) {
                Ok(args) => {
                    let slices: Vec<&[u8]> = args.iter().map(|a| a.as_ref()).collect();
                    match lua.app_data_mut::<Keyspace>() {
                        Some(mut keyspace) => keyspace.command(&slices),
                        None => Err("ERR the keyspace is busy".into()),
                    }
                }
                Err(error) => Err(error),
            };
            to_lua(lua, reply)
        })?;
        let (keys, argv) = (lua.create_table()?, lua.create_table()?);
        let (run, globals) = lua
            .load(PRELUDE)
            .set_name("=prelude")
            .call::<(Function, Table)>((command, &keys, &argv))?;
        lua.set_globals(globals.clone())?;
        let budget = Arc::new(Budget {
            base: Instant::now(),
            started: AtomicU64::new(u64::MAX),
            ended: AtomicBool::new(false),
            limit,
        });
        watch(&lua, &budget)?;
        Ok(Engine {
            budget,
            keys,
            argv,
            globals,
            lua,
            run,
            scripts: HashMap::new(),
        })
    }

    /// The keyspace, for commands sent outside a script.
    pub(super) fn keyspace(&self) -> mlua::AppDataRefMut<'_, Keyspace> {
        self.lua
            .app_data_mut::<Keyspace>()
            .expect("the keyspace is set at creation and never taken")
    }

    /// `SCRIPT LOAD source`: compiles it once; its SHA-1.
    pub(super) fn load(&mut self, source: &[u8]) -> Reply {
        let sha = sha1_smol::Sha1::from(source).digest().to_string();
        if !self.scripts.contains_key(&sha) {
            let compiled = self
                .lua
                .load(source)
                .set_name("=user_script")
                // Lua 5.1 runs bytecode unchecked: text only, as Redis
                // reads a script.
                .set_mode(mlua::ChunkMode::Text)
                .set_environment(self.globals.clone())
                .into_function()
                .map_err(|e| format!("ERR Error compiling script (new function): {e}"))?;
            self.scripts.insert(sha.clone(), compiled);
        }
        Ok(Value::BulkString(sha.into_bytes()))
    }

    /// `EVALSHA sha numkeys key... arg...`, the arguments after the name.
    /// A script this state has not compiled yet is compiled from
    /// `source_of` (what `SCRIPT LOAD` registered), once.
    pub(super) fn evalsha(
        &mut self,
        rest: &[&[u8]],
        source_of: impl Fn(&str) -> Option<std::sync::Arc<[u8]>>,
    ) -> Reply {
        let [sha, count, rest @ ..] = rest else {
            return Err("ERR wrong number of arguments for 'evalsha' command".into());
        };
        // As on Redis: a SHA-1 of another length is unknown at once; the
        // count of keys is checked before the script is looked up.
        if sha.len() != 40 {
            return Err(NOSCRIPT.into());
        }
        let numkeys = numkeys(count, rest.len())?;
        let sha = std::str::from_utf8(sha).unwrap_or_default();
        let lower;
        let sha = if sha.bytes().any(|b| b.is_ascii_uppercase()) {
            lower = sha.to_ascii_lowercase();
            lower.as_str()
        } else {
            sha
        };
        if !self.scripts.contains_key(sha) {
            match source_of(sha) {
                Some(source) => {
                    self.load(&source)?;
                }
                None => return Err(NOSCRIPT.into()),
            }
        }
        let Some(script) = self.scripts.get(sha) else {
            return Err(NOSCRIPT.into());
        };
        let (keys, argv) = rest.split_at(numkeys);
        let lua = &self.lua;
        // KEYS and ARGV are two tables filled anew for each call: a script
        // cannot keep them (no globals), so none sees another's.
        fill(lua, &self.keys, keys)
            .and_then(|()| fill(lua, &self.argv, argv))
            .map_err(|e| format!("ERR {e}"))?;
        let budget = &self.budget;
        budget.started.store(budget.now(), Ordering::Relaxed);
        let reply = self.run.call::<mlua::Value>((script, sha));
        budget.started.store(u64::MAX, Ordering::Relaxed);
        if budget.ended.swap(false, Ordering::Relaxed) {
            watch(lua, budget).map_err(|e| format!("ERR {e}"))?;
            return Err(ENDED.into());
        }
        from_lua(&reply.map_err(|e| format!("ERR {e}"))?, 0)
    }
}

/// One argument of `redis.call`: a string's bytes, or a number written as
/// Redis writes it (`%.17g`).
enum Arg<'a> {
    Bytes(BorrowedBytes<'a>),
    Number(Vec<u8>),
}

impl AsRef<[u8]> for Arg<'_> {
    fn as_ref(&self) -> &[u8] {
        match self {
            Arg::Bytes(b) => b,
            Arg::Number(n) => n,
        }
    }
}

/// The arguments of a `redis.call`, or the error Redis gives for them.
fn command_args<'a>(format: &Function, args: &'a [mlua::Value]) -> Result<Vec<Arg<'a>>, String> {
    if args.is_empty() {
        return Err("ERR Please specify at least one argument for this redis lib call".into());
    }
    args.iter()
        .map(|arg| match arg {
            mlua::Value::String(s) => Ok(Arg::Bytes(s.as_bytes())),
            // Integers below 10^15 read the same in `%.17g`.
            mlua::Value::Integer(n) if n.unsigned_abs() < 1_000_000_000_000_000 => {
                Ok(Arg::Number(n.to_string().into_bytes()))
            }
            mlua::Value::Integer(_) | mlua::Value::Number(_) => format
                .call::<mlua::String>(("%.17g", arg))
                .map(|s| Arg::Number(s.as_bytes().to_vec()))
                .map_err(|e| format!("ERR {e}")),
            _ => Err("ERR Lua redis lib command arguments must be strings or integers".into()),
        })
        .collect()
}

/// A command's reply as Lua sees it.
fn to_lua(lua: &Lua, reply: Reply) -> mlua::Result<mlua::Value> {
    let value = match reply {
        Err(message) => {
            let t = lua.create_table()?;
            t.raw_set("err", message)?;
            mlua::Value::Table(t)
        }
        Ok(Value::Nil) => mlua::Value::Boolean(false),
        Ok(Value::Int(n)) => mlua::Value::Integer(n),
        Ok(Value::BulkString(bytes)) => mlua::Value::String(lua.create_string(bytes)?),
        Ok(Value::Okay) => status(lua, "OK")?,
        Ok(Value::SimpleString(s)) => status(lua, &s)?,
        Ok(Value::Array(items)) => {
            let t = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.into_iter().enumerate() {
                t.raw_seti(i + 1, to_lua(lua, Ok(item))?)?;
            }
            mlua::Value::Table(t)
        }
        Ok(other) => {
            return Err(mlua::Error::runtime(format!(
                "the embedded keyspace gave a reply Lua has no form for: {other:?}"
            )))
        }
    };
    Ok(value)
}

fn status(lua: &Lua, s: &str) -> mlua::Result<mlua::Value> {
    let t = lua.create_table()?;
    t.raw_set("ok", s)?;
    Ok(mlua::Value::Table(t))
}

/// A script's answer as Redis sends it (`depth` guards against tables that
/// hold themselves).
fn from_lua(value: &mlua::Value, depth: usize) -> Reply {
    Ok(match value {
        mlua::Value::Nil | mlua::Value::Boolean(false) => Value::Nil,
        mlua::Value::Boolean(true) => Value::Int(1),
        mlua::Value::Integer(n) => Value::Int(*n),
        // Truncated toward zero, as Redis does.
        mlua::Value::Number(n) => Value::Int(*n as i64),
        mlua::Value::String(s) => Value::BulkString(s.as_bytes().to_vec()),
        mlua::Value::Table(t) => {
            if let Ok(mlua::Value::String(e)) = t.raw_get::<mlua::Value>("err") {
                return Err(e.to_string_lossy());
            }
            if let Ok(mlua::Value::String(s)) = t.raw_get::<mlua::Value>("ok") {
                let s = s.to_string_lossy();
                return Ok(if s == "OK" {
                    Value::Okay
                } else {
                    Value::SimpleString(s)
                });
            }
            if depth > 64 {
                return Err("ERR reached lua stack limit".into());
            }
            let mut items = Vec::new();
            for i in 1..=t.raw_len() {
                let item: mlua::Value = t.raw_get(i).map_err(|e| format!("ERR {e}"))?;
                if item.is_nil() {
                    break;
                }
                // An error inside an array is an error element.
                items.push(match from_lua(&item, depth + 1) {
                    Ok(v) => v,
                    Err(e) => server_error(&e),
                });
            }
            Value::Array(items)
        }
        _ => Value::Nil,
    })
}

/// An error reply's text as the value a Redis connection reads.
pub(super) fn server_error(text: &str) -> Value {
    let line = text.replace(['\r', '\n'], " ");
    match redis::parse_redis_value(format!("-{line}\r\n").as_bytes()) {
        Ok(value) => value,
        Err(_) => Value::Nil,
    }
}
