//! The embedded backend's Lua: one Lua 5.1 state (the version Redis and
//! Valkey embed) that runs scripts as Redis runs them, on the [`Keyspace`]
//! it holds.
//!
//! As in Redis: a script is compiled once, by `SCRIPT LOAD` (or `EVAL`),
//! and called by its SHA-1; `KEYS` and `ARGV` are its globals; `redis.call`
//! raises a command's error and `redis.pcall` returns it as `{err=...}`;
//! a status reply is `{ok=...}`, a nil reply `false`; numbers passed to a
//! command are written with `%.17g`, numbers in replies are truncated to
//! integers, and a table is returned as an array up to its first nil;
//! `redis.error_reply` and `redis.status_reply` build those tables; and the
//! globals are protected, so a script that reads or creates a global fails
//! here as it fails on Redis 7.

use std::collections::HashMap;

use mlua::{BorrowedBytes, Function, Lua, LuaOptions, StdLib, Table, Variadic};
use redis::Value;

use super::keyspace::{Keyspace, Reply};

/// What the state runs once: the `redis` table, the wrapper that runs a
/// script and turns what it raised into an error reply, and the globals'
/// protection. `command` is the keyspace's entry (arguments as strings; an
/// error reply as `{err=...}`).
const PRELUDE: &str = r#"
local command = ...
local type, error, pcall, tostring = type, error, pcall, tostring
redis = {
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
local function run(f, keys, argv, sha)
  rawset(_G, 'KEYS', keys)
  rawset(_G, 'ARGV', argv)
  local ok, reply = pcall(f)
  rawset(_G, 'KEYS', nil)
  rawset(_G, 'ARGV', nil)
  if ok then
    return reply
  end
  if type(reply) == 'table' and reply.err then
    return {err = tostring(reply.err) .. ' script: ' .. sha}
  end
  return {err = 'ERR ' .. tostring(reply) .. ' script: ' .. sha}
end
setmetatable(_G, {
  __index = function(_, name)
    error("Script attempted to access nonexistent global variable '" .. tostring(name) .. "'", 2)
  end,
  __newindex = function(_, name)
    error("Attempt to modify a readonly table", 2)
  end,
})
return run
"#;

/// A Lua state with its compiled scripts; the keyspace is its app data.
pub(super) struct Engine {
    lua: Lua,
    /// `run(f, keys, argv, sha)` of the prelude.
    run: Function,
    /// Compiled scripts by SHA-1 (lowercase hex).
    scripts: HashMap<String, Function>,
    /// The tables a script sees as `KEYS` and `ARGV`.
    keys: Table,
    argv: Table,
}

/// Makes `table` the sequence of `items`.
fn fill(lua: &Lua, table: &Table, items: &[&[u8]]) -> mlua::Result<()> {
    let old = table.raw_len();
    for (i, item) in items.iter().enumerate() {
        table.raw_seti(i + 1, lua.create_string(item)?)?;
    }
    for i in items.len() + 1..=old {
        table.raw_seti(i, mlua::Value::Nil)?;
    }
    Ok(())
}

impl Engine {
    /// A new state on an empty keyspace.
    pub(super) fn new() -> mlua::Result<Engine> {
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
        let run = lua
            .load(PRELUDE)
            .set_name("=prelude")
            .call::<Function>(command)?;
        Ok(Engine {
            keys: lua.create_table()?,
            argv: lua.create_table()?,
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
        let [sha, numkeys, rest @ ..] = rest else {
            return Err("ERR wrong number of arguments for 'evalsha' command".into());
        };
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
                None => return Err("NOSCRIPT No matching script. Please use EVAL.".into()),
            }
        }
        let Some(script) = self.scripts.get(sha) else {
            return Err("NOSCRIPT No matching script. Please use EVAL.".into());
        };
        let numkeys = std::str::from_utf8(numkeys)
            .ok()
            .and_then(|n| n.parse::<usize>().ok())
            .ok_or("ERR value is not an integer or out of range")?;
        if numkeys > rest.len() {
            return Err("ERR Number of keys can't be greater than number of args".into());
        }
        let (keys, argv) = rest.split_at(numkeys);
        let lua = &self.lua;
        // KEYS and ARGV are two tables filled anew for each call: a script
        // cannot keep them (no globals), so none sees another's.
        fill(lua, &self.keys, keys)
            .and_then(|()| fill(lua, &self.argv, argv))
            .map_err(|e| format!("ERR {e}"))?;
        let reply = self
            .run
            .call::<mlua::Value>((script, &self.keys, &self.argv, sha))
            .map_err(|e| format!("ERR {e}"))?;
        from_lua(&reply, 0)
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
