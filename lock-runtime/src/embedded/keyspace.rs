//! The embedded backend's keyspace: strings, hashes and lists with
//! expiries, and the Redis commands the lock kinds' scripts call (GET; SET
//! with `NX`, `XX`, `GET`, `EX`, `PX`, `EXAT`, `PXAT` and `KEEPTTL`; MGET,
//! DEL, TYPE, PTTL; PEXPIRE and PEXPIREAT with `NX`, `XX`, `GT` and `LT`;
//! HGET, HSET, HDEL, HGETALL, TIME, PUBLISH, SPUBLISH; INCRBY, HINCRBY and
//! RPUSH for fenced writes), answered as Redis 7 answers them, errors and
//! `WRONGTYPE` included, their arguments read as Redis reads them (see
//! `args.rs`: no `+5` or `05` for a number). A few more serve the test door
//! (see `door.rs`): EXISTS, DBSIZE, KEYS, FLUSHALL, PING, INFO
//! commandstats, CONFIG RESETSTAT. [`keys_of`] says which arguments of each
//! are keys, so that each runs on its keys' shard.
//!
//! Time is the caller's: each command runs at the `now` it is given (one
//! reading for a whole script, as Redis does). A key past its expiry is
//! gone for every command; as in Redis, a key lives through the millisecond
//! of its expiry (`PTTL` 0) and is gone after it. Keys nobody reads again
//! are dropped by [`Keyspace::expire_due`], which each call runs first.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};

use redis::Value;

use super::args::{integer, ExpireIf, SetOptions};

/// A command's answer: a reply, or an error reply's text (`CODE message`).
pub(super) type Reply = Result<Value, String>;

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

/// What a key holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Data {
    Str(Vec<u8>),
    /// Fields in insertion order, as a small Redis hash keeps them.
    Hash(Vec<(Vec<u8>, Vec<u8>)>),
    /// A list's items, first to last.
    List(Vec<Vec<u8>>),
}

#[derive(Debug)]
pub(super) struct Entry {
    data: Data,
    /// Milliseconds on the keyspace's clock; `None`: no expiry.
    expires: Option<u64>,
}

/// A key, what it holds and its expiry (ms), as [`Keyspace::dump`] gives it.
#[cfg(any(test, feature = "embedded-test-door"))]
pub(super) type Dumped = (Vec<u8>, (Data, Option<u64>));

/// A message a script published: channel, message, sharded or not.
pub(super) type Published = (Vec<u8>, Vec<u8>, bool);

/// Keys and what they hold, at the time of the command that runs.
#[derive(Default)]
pub(super) struct Keyspace {
    entries: HashMap<Vec<u8>, Entry>,
    /// Every expiry set, earliest first (stale ones are skipped).
    expiries: BinaryHeap<Reverse<(u64, Vec<u8>)>>,
    /// The time of the command that runs, in microseconds.
    now_us: u64,
    /// Messages published since the caller last took them.
    pub published: Vec<Published>,
    /// Calls per command (lowercase), as `INFO commandstats` counts them.
    pub calls: BTreeMap<String, u64>,
}

/// Whether a key that expires at `at` is gone at `now` (both in ms): as on
/// Redis, only once `now` is past it; in the millisecond of its expiry it
/// still answers, with a PTTL of 0.
fn expired(at: u64, now: u64) -> bool {
    now > at
}

fn arity(name: &str) -> String {
    format!("ERR wrong number of arguments for '{name}' command")
}

fn bulk(bytes: &[u8]) -> Value {
    Value::BulkString(bytes.to_vec())
}

impl Keyspace {
    /// Sets the time of the commands that follow.
    pub(super) fn set_now(&mut self, now_us: u64) {
        self.now_us = now_us;
    }

    fn now_ms(&self) -> u64 {
        self.now_us / 1000
    }

    /// Drops the keys whose expiry has passed.
    pub(super) fn expire_due(&mut self) {
        let now = self.now_ms();
        // Bounded: each round pops one entry.
        while let Some(Reverse((at, _))) = self.expiries.peek() {
            if !expired(*at, now) {
                break;
            }
            let Some(Reverse((at, key))) = self.expiries.pop() else {
                break;
            };
            if self.entries.get(&key).and_then(|e| e.expires) == Some(at) {
                self.entries.remove(&key);
            }
        }
    }

    /// The live entry of `key`, dropping it if its expiry has passed (a key
    /// lives through the millisecond of its expiry, as in Redis, whose keys
    /// expire when the time is past it).
    fn live(&mut self, key: &[u8]) -> Option<&mut Entry> {
        let now = self.now_ms();
        if self
            .entries
            .get(key)
            .is_some_and(|e| e.expires.is_some_and(|at| expired(at, now)))
        {
            self.entries.remove(key);
        }
        self.entries.get_mut(key)
    }

    /// A new entry at `key` holding `data`, without expiry.
    fn create(&mut self, key: &[u8], data: Data) -> &mut Entry {
        let entry = Entry {
            data,
            expires: None,
        };
        self.entries
            .entry(key.to_vec())
            .insert_entry(entry)
            .into_mut()
    }

    fn set_expiry(&mut self, key: &[u8], at: Option<u64>) {
        if let Some(entry) = self.entries.get_mut(key) {
            entry.expires = at;
            if let Some(at) = at {
                self.expiries.push(Reverse((at, key.to_vec())));
            }
        }
    }

    /// Runs one command (`args[0]` is its name), counting it.
    pub(super) fn command(&mut self, args: &[&[u8]]) -> Reply {
        let Some(raw) = args.first() else {
            return Err("ERR empty command".into());
        };
        // Lowercased on the stack: this runs for every call a script makes.
        let mut buffer = [0u8; 16];
        let name = match buffer.get_mut(..raw.len()) {
            Some(lower) => {
                lower.copy_from_slice(raw);
                lower.make_ascii_lowercase();
                std::str::from_utf8(lower).unwrap_or("?")
            }
            None => "?",
        };
        self.count(name);
        let rest = &args[1..];
        match name {
            "get" | "type" | "pttl" | "hgetall" => self.read(name, rest),
            "set" => self.set(rest),
            "del" => self.del(rest),
            "pexpire" | "pexpireat" => self.pexpire(name, rest),
            "mget" => self.mget(rest),
            "hget" | "hset" | "hdel" => self.hash(name, rest),
            "incrby" => self.incrby(rest),
            "hincrby" => self.hincrby(rest),
            "rpush" => self.rpush(rest),
            "time" => Ok(self.time()),
            "publish" | "spublish" => match rest {
                [channel, message] => {
                    let sharded = name == "spublish";
                    self.published
                        .push((channel.to_vec(), message.to_vec(), sharded));
                    Ok(Value::Int(0))
                }
                _ => Err(arity(name)),
            },
            _ => self.admin(name, rest),
        }
    }

    /// Counts a call of `name`, as `INFO commandstats` does.
    pub(super) fn count(&mut self, name: &str) {
        match self.calls.get_mut(name) {
            Some(calls) => *calls += 1,
            None => {
                self.calls.insert(name.to_owned(), 1);
            }
        }
    }
}

/// The keys among the arguments `rest` of the command `name` (lowercase),
/// as Redis's key specs place them: the first argument of each command of
/// one key, every argument of DEL, EXISTS and MGET, none of the others
/// (keep it in step with [`Keyspace::command`]).
pub(super) fn keys_of<'a, 'b>(name: &[u8], rest: &'a [&'b [u8]]) -> &'a [&'b [u8]] {
    match name {
        b"get" | b"set" | b"type" | b"pttl" | b"pexpire" | b"pexpireat" | b"hget" | b"hset"
        | b"hdel" | b"hgetall" | b"incrby" | b"hincrby" | b"rpush" => {
            rest.get(..1).unwrap_or_default()
        }
        b"del" | b"exists" | b"mget" => rest,
        _ => &[],
    }
}

/// The string commands and the expiries.
impl Keyspace {
    /// GET, TYPE, PTTL and HGETALL.
    fn read(&mut self, name: &str, rest: &[&[u8]]) -> Reply {
        let [key] = rest else {
            return Err(arity(name));
        };
        let now = self.now_ms();
        let entry = self.live(key);
        match (name, entry) {
            ("get", None) => Ok(Value::Nil),
            (
                "get",
                Some(Entry {
                    data: Data::Str(v), ..
                }),
            ) => Ok(bulk(v)),
            ("type", None) => Ok(Value::SimpleString("none".into())),
            (
                "type",
                Some(Entry {
                    data: Data::Str(_), ..
                }),
            ) => Ok(Value::SimpleString("string".into())),
            (
                "type",
                Some(Entry {
                    data: Data::Hash(_),
                    ..
                }),
            ) => Ok(Value::SimpleString("hash".into())),
            ("type", Some(_)) => Ok(Value::SimpleString("list".into())),
            ("pttl", None) => Ok(Value::Int(-2)),
            ("pttl", Some(e)) => Ok(Value::Int(e.expires.map_or(-1, |at| {
                i64::try_from(at.saturating_sub(now)).unwrap_or(i64::MAX)
            }))),
            ("hgetall", None) => Ok(Value::Array(Vec::new())),
            (
                "hgetall",
                Some(Entry {
                    data: Data::Hash(fields),
                    ..
                }),
            ) => Ok(Value::Array(
                fields
                    .iter()
                    .flat_map(|(f, v)| [bulk(f), bulk(v)])
                    .collect(),
            )),
            _ => Err(WRONGTYPE.into()),
        }
    }

    /// `SET key value [NX | XX] [GET] [EX s | PX ms | EXAT s | PXAT ms |
    /// KEEPTTL]`, in Redis 7's order: the options, then the expiry's
    /// number, then the old value for GET (`WRONGTYPE` when it is no
    /// string), then NX or XX (which answer nil, or the old value with
    /// GET, when they refuse). An expiry already past is set: the key is
    /// gone for the commands after it.
    fn set(&mut self, rest: &[&[u8]]) -> Reply {
        let [key, value, options @ ..] = rest else {
            return Err(arity("set"));
        };
        let options = SetOptions::parse(options)?;
        let now = self.now_ms();
        let at = match options.expiry {
            Some((form, arg)) => Some(form.at(arg, now)?),
            None => None,
        };
        let old = self.live(key).map(|e| (&e.data, e.expires));
        let answer = match (options.get, old) {
            (false, _) => Value::Okay,
            (true, None) => Value::Nil,
            (true, Some((Data::Str(v), _))) => bulk(v),
            (true, Some(_)) => return Err(WRONGTYPE.into()),
        };
        let kept = old.map(|(_, expires)| expires);
        if (options.nx && kept.is_some()) || (options.xx && kept.is_none()) {
            return Ok(if options.get { answer } else { Value::Nil });
        }
        let kept = kept.flatten();
        let expires = at.or(kept.filter(|_| options.keep_ttl));
        let entry = Entry {
            data: Data::Str(value.to_vec()),
            expires,
        };
        match self.entries.get_mut(*key) {
            Some(slot) => *slot = entry,
            None => {
                self.entries.insert(key.to_vec(), entry);
            }
        }
        if expires != kept {
            self.set_expiry(key, expires);
        }
        Ok(answer)
    }

    fn del(&mut self, rest: &[&[u8]]) -> Reply {
        if rest.is_empty() {
            return Err(arity("del"));
        }
        let mut n = 0;
        for key in rest {
            if self.live(key).is_some() {
                self.entries.remove(*key);
                n += 1;
            }
        }
        Ok(Value::Int(n))
    }

    /// PEXPIRE key ms and PEXPIREAT key ms (since the epoch, on the
    /// keyspace's clock), with `NX`, `XX`, `GT` or `LT`: 0 when the key is
    /// absent or the condition refuses; a time not in the future deletes
    /// it. As on Redis 7: the options are read before the number.
    fn pexpire(&mut self, name: &str, rest: &[&[u8]]) -> Reply {
        let [key, when, options @ ..] = rest else {
            return Err(arity(name));
        };
        let condition = ExpireIf::parse(options)?;
        let when = integer(when)?;
        let now = i64::try_from(self.now_ms()).unwrap_or(i64::MAX);
        let base = if name == "pexpire" { now } else { 0 };
        let at = when
            .checked_add(base)
            .ok_or_else(|| format!("ERR invalid expire time in '{name}' command"))?;
        let Some(entry) = self.live(key) else {
            return Ok(Value::Int(0));
        };
        let current = entry.expires.map(|c| i64::try_from(c).unwrap_or(i64::MAX));
        if !condition.allows(current, at) {
            return Ok(Value::Int(0));
        }
        match u64::try_from(at) {
            Ok(at) if at > self.now_ms() => self.set_expiry(key, Some(at)),
            _ => {
                self.entries.remove(*key);
            }
        }
        Ok(Value::Int(1))
    }
}

/// The command of many keys (renew.lua's).
impl Keyspace {
    /// MGET key...: each key's string, nil for an absent key and for one
    /// of another type.
    fn mget(&mut self, keys: &[&[u8]]) -> Reply {
        if keys.is_empty() {
            return Err(arity("mget"));
        }
        let values = keys.iter().map(|key| match self.live(key) {
            Some(Entry {
                data: Data::Str(v), ..
            }) => bulk(v),
            _ => Value::Nil,
        });
        Ok(Value::Array(values.collect()))
    }
}

/// The hash commands.
impl Keyspace {
    /// HGET, HSET (several pairs) and HDEL (several fields; an emptied hash
    /// is deleted).
    fn hash(&mut self, name: &str, rest: &[&[u8]]) -> Reply {
        let (key, fields) = match (name, rest) {
            ("hget", [key, field]) => (key, std::slice::from_ref(field)),
            ("hset", [key, pairs @ ..]) if !pairs.is_empty() && pairs.len() % 2 == 0 => {
                (key, pairs)
            }
            ("hdel", [key, fields @ ..]) if !fields.is_empty() => (key, fields),
            _ => return Err(arity(name)),
        };
        let entry = match self.live(key) {
            Some(Entry {
                data: Data::Hash(_),
                ..
            }) => self.entries.get_mut(*key),
            Some(_) => return Err(WRONGTYPE.into()),
            None if name == "hset" => Some(self.create(key, Data::Hash(Vec::new()))),
            None if name == "hget" => return Ok(Value::Nil),
            None => return Ok(Value::Int(0)),
        };
        let Some(Entry {
            data: Data::Hash(hash),
            ..
        }) = entry
        else {
            return Err(WRONGTYPE.into());
        };
        let find = |hash: &Vec<(Vec<u8>, Vec<u8>)>, f: &[u8]| hash.iter().position(|(k, _)| k == f);
        match name {
            "hget" => Ok(find(hash, fields[0]).map_or(Value::Nil, |i| bulk(&hash[i].1))),
            "hset" => {
                let mut added = 0;
                for pair in fields.chunks(2) {
                    match find(hash, pair[0]) {
                        Some(i) => hash[i].1 = pair[1].to_vec(),
                        None => {
                            hash.push((pair[0].to_vec(), pair[1].to_vec()));
                            added += 1;
                        }
                    }
                }
                Ok(Value::Int(added))
            }
            _ => {
                let mut removed = 0;
                for field in fields {
                    if let Some(i) = find(hash, field) {
                        hash.remove(i);
                        removed += 1;
                    }
                }
                if hash.is_empty() {
                    self.entries.remove(*key);
                }
                Ok(Value::Int(removed))
            }
        }
    }
}

/// The counters a fenced write may carry.
impl Keyspace {
    /// INCRBY key n: the new value; an absent key counts from 0, its
    /// expiry is kept.
    fn incrby(&mut self, rest: &[&[u8]]) -> Reply {
        let [key, by] = rest else {
            return Err(arity("incrby"));
        };
        let by = integer(by)?;
        let overflow = || "ERR increment or decrement would overflow".to_owned();
        match self.live(key) {
            None => {
                self.create(key, Data::Str(by.to_string().into_bytes()));
                Ok(Value::Int(by))
            }
            Some(Entry {
                data: Data::Str(v), ..
            }) => {
                let new = integer(v)?.checked_add(by).ok_or_else(overflow)?;
                *v = new.to_string().into_bytes();
                Ok(Value::Int(new))
            }
            Some(_) => Err(WRONGTYPE.into()),
        }
    }

    /// HINCRBY key field n: the field's new value; an absent key or field
    /// counts from 0.
    fn hincrby(&mut self, rest: &[&[u8]]) -> Reply {
        let [key, field, by] = rest else {
            return Err(arity("hincrby"));
        };
        let by = integer(by)?;
        let old = match self.hash("hget", &[key, field])? {
            Value::BulkString(v) => {
                integer(&v).map_err(|_| "ERR hash value is not an integer".to_owned())?
            }
            _ => 0,
        };
        let new = old
            .checked_add(by)
            .ok_or("ERR increment or decrement would overflow")?;
        self.hash("hset", &[key, field, new.to_string().as_bytes()])?;
        Ok(Value::Int(new))
    }
}

/// The list command a fenced write may carry.
impl Keyspace {
    /// RPUSH key item [item ...]: the list's new length; an absent key
    /// starts an empty list (no expiry).
    fn rpush(&mut self, rest: &[&[u8]]) -> Reply {
        let [key, items @ ..] = rest else {
            return Err(arity("rpush"));
        };
        if items.is_empty() {
            return Err(arity("rpush"));
        }
        let list = match self.live(key) {
            Some(Entry {
                data: Data::List(_),
                ..
            }) => self.entries.get_mut(*key),
            Some(_) => return Err(WRONGTYPE.into()),
            None => Some(self.create(key, Data::List(Vec::new()))),
        };
        let Some(Entry {
            data: Data::List(list),
            ..
        }) = list
        else {
            return Err(WRONGTYPE.into());
        };
        list.extend(items.iter().map(|item| item.to_vec()));
        Ok(Value::Int(i64::try_from(list.len()).unwrap_or(i64::MAX)))
    }
}

/// TIME, what only the test door sends, and moving keys between shards.
impl Keyspace {
    /// TIME: seconds and microseconds, as two strings.
    fn time(&self) -> Value {
        let (s, us) = (self.now_us / 1_000_000, self.now_us % 1_000_000);
        Value::Array(vec![
            bulk(s.to_string().as_bytes()),
            bulk(us.to_string().as_bytes()),
        ])
    }

    /// What only the test door sends (see `door.rs`).
    fn admin(&mut self, name: &str, rest: &[&[u8]]) -> Reply {
        match (name, rest) {
            ("ping", []) => Ok(Value::SimpleString("PONG".into())),
            ("exists", keys) if !keys.is_empty() => {
                let n = keys.iter().filter(|k| self.live(k).is_some()).count();
                Ok(Value::Int(n as i64))
            }
            ("dbsize", []) => {
                self.expire_all();
                Ok(Value::Int(self.entries.len() as i64))
            }
            ("keys", [b"*"]) => {
                self.expire_all();
                Ok(Value::Array(self.entries.keys().map(|k| bulk(k)).collect()))
            }
            ("flushall" | "flushdb", []) => {
                self.entries.clear();
                self.expiries.clear();
                Ok(Value::Okay)
            }
            ("info", [section]) if section.eq_ignore_ascii_case(b"commandstats") => {
                Ok(Value::VerbatimString {
                    format: redis::VerbatimFormat::Text,
                    text: self.commandstats(),
                })
            }
            ("config", [sub]) if sub.eq_ignore_ascii_case(b"resetstat") => {
                self.calls.clear();
                Ok(Value::Okay)
            }
            _ => Err(
                "ERR unknown command (the embedded backend answers the commands the lock \
                 scripts call)"
                    .into(),
            ),
        }
    }

    /// `INFO commandstats` as Redis writes it (the times are not kept).
    fn commandstats(&self) -> String {
        let mut text = String::from("# Commandstats\r\n");
        for (name, calls) in &self.calls {
            text.push_str(&format!(
                "cmdstat_{name}:calls={calls},usec=0,usec_per_call=0.00,rejected_calls=0,failed_calls=0\r\n"
            ));
        }
        text
    }

    /// Takes `key`'s entry out (to run a script of several shards' keys
    /// on one shard; see `shards.rs`).
    pub(super) fn take(&mut self, key: &[u8]) -> Option<Entry> {
        self.live(key)?;
        self.entries.remove(key)
    }

    /// Puts an entry taken by [`Keyspace::take`] in.
    pub(super) fn put(&mut self, key: &[u8], entry: Entry) {
        let expires = entry.expires;
        self.entries.insert(key.to_vec(), entry);
        self.set_expiry(key, expires);
    }

    /// Drops every expired key now.
    fn expire_all(&mut self) {
        let now = self.now_ms();
        self.entries
            .retain(|_, e| e.expires.is_none_or(|at| !expired(at, now)));
    }

    /// Every live key with what it holds and its expiry (ms on this clock),
    /// for the test door's comparisons.
    #[cfg(any(test, feature = "embedded-test-door"))]
    pub(super) fn dump(&mut self) -> Vec<Dumped> {
        self.expire_all();
        self.entries
            .iter()
            .map(|(k, e)| (k.clone(), (e.data.clone(), e.expires)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use redis::Value;

    use super::super::args::{NOT_INTEGER, SYNTAX};
    use super::{bulk, Keyspace, WRONGTYPE};

    fn run(ks: &mut Keyspace, line: &str) -> super::Reply {
        let args: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        ks.command(&args)
    }

    #[test]
    fn many_keys_and_absolute_expiries_answer_as_redis() {
        let mut ks = Keyspace::default();
        // 1,000,000 ms.
        ks.set_now(1_000_000_000);
        run(&mut ks, "SET a 1").unwrap();
        run(&mut ks, "HSET h f v").unwrap();
        let values = vec![bulk(b"1"), Value::Nil, Value::Nil];
        assert_eq!(run(&mut ks, "MGET a none h"), Ok(Value::Array(values)));
        assert_eq!(
            run(&mut ks, "MGET").unwrap_err(),
            "ERR wrong number of arguments for 'mget' command"
        );
        assert_eq!(run(&mut ks, "PEXPIREAT a 1000100"), Ok(Value::Int(1)));
        assert_eq!(run(&mut ks, "PTTL a"), Ok(Value::Int(100)));
        assert_eq!(run(&mut ks, "PEXPIREAT none 1000100"), Ok(Value::Int(0)));
        assert_eq!(run(&mut ks, "PEXPIREAT a x").unwrap_err(), NOT_INTEGER);
        // Through the millisecond of its expiry, then gone.
        ks.set_now(1_000_100_000);
        let one = Value::Array(vec![bulk(b"1")]);
        assert_eq!(run(&mut ks, "MGET a"), Ok(one));
        ks.set_now(1_000_101_000);
        assert_eq!(run(&mut ks, "MGET a"), Ok(Value::Array(vec![Value::Nil])));
        // A time not in the future deletes the key.
        run(&mut ks, "SET b 1").unwrap();
        assert_eq!(run(&mut ks, "PEXPIREAT b 1000101"), Ok(Value::Int(1)));
        let none = Value::SimpleString("none".into());
        assert_eq!(run(&mut ks, "TYPE b"), Ok(none));
    }

    #[test]
    fn strings_expire_and_answer_as_redis() {
        let mut ks = Keyspace::default();
        ks.set_now(1_000_000_000);
        assert_eq!(run(&mut ks, "SET k v PX 100"), Ok(Value::Okay));
        assert_eq!(run(&mut ks, "PTTL k"), Ok(Value::Int(100)));
        assert_eq!(run(&mut ks, "SET k w KEEPTTL"), Ok(Value::Okay));
        assert_eq!(run(&mut ks, "PTTL k"), Ok(Value::Int(100)));
        assert_eq!(run(&mut ks, "SET k w"), Ok(Value::Okay));
        assert_eq!(run(&mut ks, "PTTL k"), Ok(Value::Int(-1)));
        assert_eq!(run(&mut ks, "PEXPIRE k 50"), Ok(Value::Int(1)));
        ks.set_now(1_050_000_000);
        assert_eq!(run(&mut ks, "GET k"), Ok(Value::Nil));
        assert_eq!(run(&mut ks, "PTTL k"), Ok(Value::Int(-2)));
        assert_eq!(run(&mut ks, "PEXPIRE k 50"), Ok(Value::Int(0)));
        assert_eq!(
            run(&mut ks, "SET k v PX 0").unwrap_err(),
            "ERR invalid expire time in 'set' command"
        );
        assert_eq!(run(&mut ks, "SET k v PX x").unwrap_err(), NOT_INTEGER);
        assert_eq!(run(&mut ks, "SET k v PX").unwrap_err(), SYNTAX);
        run(&mut ks, "SET k v").unwrap();
        assert_eq!(run(&mut ks, "PEXPIRE k 0"), Ok(Value::Int(1)));
        assert_eq!(
            run(&mut ks, "TYPE k"),
            Ok(Value::SimpleString("none".into()))
        );
    }

    #[test]
    fn a_key_lives_through_the_millisecond_of_its_expiry_as_on_redis() {
        // Redis counts a key expired when now > its expiry: in that very
        // millisecond it still answers, with a PTTL of 0.
        let mut ks = Keyspace::default();
        ks.set_now(1_000_000_000);
        run(&mut ks, "SET k v PX 100").unwrap();
        run(&mut ks, "HSET h a 1").unwrap();
        run(&mut ks, "PEXPIRE h 100").unwrap();
        ks.set_now(1_000_100_999);
        ks.expire_due();
        assert_eq!(run(&mut ks, "PTTL k"), Ok(Value::Int(0)));
        assert_eq!(run(&mut ks, "GET k"), Ok(Value::BulkString(b"v".to_vec())));
        assert_eq!(ks.dump().len(), 2, "both keys live at their expiry's ms");
        ks.set_now(1_000_101_000);
        assert_eq!(run(&mut ks, "GET k"), Ok(Value::Nil));
        assert_eq!(run(&mut ks, "PTTL k"), Ok(Value::Int(-2)));
        ks.expire_due();
        assert!(ks.entries.is_empty(), "both gone a millisecond later");
    }

    #[test]
    fn hashes_keep_their_order_and_vanish_when_emptied() {
        let mut ks = Keyspace::default();
        assert_eq!(run(&mut ks, "HSET h a 1 b 2"), Ok(Value::Int(2)));
        assert_eq!(run(&mut ks, "HSET h a 3 c 4"), Ok(Value::Int(1)));
        let all = run(&mut ks, "HGETALL h").unwrap();
        let expected: Vec<Value> = ["a", "3", "b", "2", "c", "4"]
            .iter()
            .map(|s| Value::BulkString(s.as_bytes().to_vec()))
            .collect();
        assert_eq!(all, Value::Array(expected));
        assert_eq!(run(&mut ks, "GET h").unwrap_err(), super::WRONGTYPE);
        assert_eq!(
            run(&mut ks, "TYPE h"),
            Ok(Value::SimpleString("hash".into()))
        );
        assert_eq!(run(&mut ks, "HDEL h a b x"), Ok(Value::Int(2)));
        assert_eq!(run(&mut ks, "HDEL h c"), Ok(Value::Int(1)));
        assert_eq!(run(&mut ks, "EXISTS h"), Ok(Value::Int(0)));
        run(&mut ks, "SET s v").unwrap();
        assert_eq!(run(&mut ks, "HGET s a").unwrap_err(), super::WRONGTYPE);
        assert_eq!(run(&mut ks, "HSET s a").unwrap_err(), super::arity("hset"));
    }

    #[test]
    fn expired_keys_nobody_reads_are_dropped() {
        let mut ks = Keyspace::default();
        for i in 0..100 {
            run(&mut ks, &format!("SET k{i} v PX 10")).unwrap();
        }
        run(&mut ks, "SET kept v PX 1000").unwrap();
        run(&mut ks, "PEXPIRE k0 2000").unwrap();
        ks.set_now(20_000);
        ks.expire_due();
        assert_eq!(ks.entries.len(), 2);
    }

    #[test]
    fn counters_and_lists_answer_as_redis() {
        let mut ks = Keyspace::default();
        ks.set_now(1_000_000_000);
        assert_eq!(run(&mut ks, "INCRBY c 5"), Ok(Value::Int(5)));
        assert_eq!(run(&mut ks, "INCRBY c -7"), Ok(Value::Int(-2)));
        assert_eq!(run(&mut ks, "GET c"), Ok(bulk(b"-2")));
        assert_eq!(run(&mut ks, "INCRBY c x"), Err(NOT_INTEGER.into()));
        run(&mut ks, "SET s abc").unwrap();
        assert_eq!(run(&mut ks, "INCRBY s 1"), Err(NOT_INTEGER.into()));
        assert_eq!(run(&mut ks, "HINCRBY h f 3"), Ok(Value::Int(3)));
        assert_eq!(run(&mut ks, "HINCRBY h f 4"), Ok(Value::Int(7)));
        assert_eq!(run(&mut ks, "HGET h f"), Ok(bulk(b"7")));
        assert_eq!(run(&mut ks, "INCRBY h 1"), Err(WRONGTYPE.into()));
        assert_eq!(run(&mut ks, "HINCRBY c f 1"), Err(WRONGTYPE.into()));
        assert_eq!(run(&mut ks, "RPUSH l a b"), Ok(Value::Int(2)));
        assert_eq!(run(&mut ks, "RPUSH l c"), Ok(Value::Int(3)));
        assert_eq!(
            run(&mut ks, "TYPE l"),
            Ok(Value::SimpleString("list".into()))
        );
        assert_eq!(run(&mut ks, "GET l"), Err(WRONGTYPE.into()));
        assert_eq!(run(&mut ks, "RPUSH h x"), Err(WRONGTYPE.into()));
        assert_eq!(run(&mut ks, "RPUSH l").unwrap_err(), super::arity("rpush"));
    }

    #[test]
    fn numbers_are_read_as_redis_reads_them() {
        // Redis's string2ll: no '+', no leading zero, no "-0", no space.
        let mut ks = Keyspace::default();
        ks.set_now(1_000_000_000);
        for by in ["+5", "05", "00", "-0", "5.0"] {
            assert_eq!(
                run(&mut ks, &format!("INCRBY c {by}")),
                Err(NOT_INTEGER.into()),
                "{by}"
            );
            let set = format!("SET k v PX {by}");
            assert_eq!(run(&mut ks, &set), Err(NOT_INTEGER.into()), "{set}");
        }
        assert_eq!(run(&mut ks, "INCRBY c 0"), Ok(Value::Int(0)));
        // A value stored with a leading zero is no integer either.
        run(&mut ks, "SET z 05").unwrap();
        assert_eq!(run(&mut ks, "INCRBY z 1"), Err(NOT_INTEGER.into()));
        run(&mut ks, "HSET h f 05").unwrap();
        let hash = Err("ERR hash value is not an integer".to_owned());
        assert_eq!(run(&mut ks, "HINCRBY h f 1"), hash);
        assert_eq!(run(&mut ks, "HINCRBY h g +1"), Err(NOT_INTEGER.into()));
        assert_eq!(run(&mut ks, "PEXPIRE z 010"), Err(NOT_INTEGER.into()));
    }

    #[test]
    fn set_carries_get_and_absolute_expiries_as_redis_7() {
        let mut ks = Keyspace::default();
        ks.set_now(1_000_000_000);
        assert_eq!(run(&mut ks, "SET k v GET"), Ok(Value::Nil));
        assert_eq!(run(&mut ks, "SET k w get"), Ok(bulk(b"v")));
        // NX refuses and GET still answers the old value.
        assert_eq!(run(&mut ks, "SET k x NX GET"), Ok(bulk(b"w")));
        assert_eq!(run(&mut ks, "GET k"), Ok(bulk(b"w")));
        assert_eq!(run(&mut ks, "SET n v XX GET"), Ok(Value::Nil));
        assert_eq!(run(&mut ks, "EXISTS n"), Ok(Value::Int(0)));
        run(&mut ks, "HSET h f v").unwrap();
        assert_eq!(run(&mut ks, "SET h v GET"), Err(WRONGTYPE.into()));
        assert_eq!(
            run(&mut ks, "TYPE h"),
            Ok(Value::SimpleString("hash".into()))
        );
        assert_eq!(run(&mut ks, "SET k v PXAT 1000250"), Ok(Value::Okay));
        assert_eq!(run(&mut ks, "PTTL k"), Ok(Value::Int(250)));
        assert_eq!(run(&mut ks, "SET k v EXAT 1002"), Ok(Value::Okay));
        assert_eq!(run(&mut ks, "PTTL k"), Ok(Value::Int(2000)));
        assert_eq!(run(&mut ks, "SET k v KEEPTTL GET"), Ok(bulk(b"v")));
        assert_eq!(run(&mut ks, "PTTL k"), Ok(Value::Int(2000)));
        // The last of two expiries of one form counts.
        assert_eq!(run(&mut ks, "SET k v PX 5 PX 700"), Ok(Value::Okay));
        assert_eq!(run(&mut ks, "PTTL k"), Ok(Value::Int(700)));
        // An expiry already past is set: the key is gone after it.
        assert_eq!(run(&mut ks, "SET k v PXAT 999999"), Ok(Value::Okay));
        assert_eq!(run(&mut ks, "GET k"), Ok(Value::Nil));
        let invalid = Err("ERR invalid expire time in 'set' command".to_owned());
        assert_eq!(run(&mut ks, "SET k v PXAT 0"), invalid);
        assert_eq!(run(&mut ks, "SET k v PX 9223372036854775807"), invalid);
        for line in ["SET k v PX 5 PXAT 5", "SET k v PX x FOO", "SET k v NX XX"] {
            assert_eq!(run(&mut ks, line), Err(SYNTAX.into()), "{line}");
        }
    }

    #[test]
    fn pexpire_carries_nx_xx_gt_and_lt_as_redis_7() {
        let mut ks = Keyspace::default();
        ks.set_now(1_000_000_000);
        run(&mut ks, "SET k v").unwrap();
        let answers = [
            ("PEXPIRE k 5000 NX", 1, 5000),
            ("PEXPIRE k 9000 NX", 0, 5000),
            ("PEXPIRE k 1000 GT", 0, 5000),
            ("PEXPIRE k 9000 gt", 1, 9000),
            ("PEXPIRE k 9500 LT", 0, 9000),
            ("PEXPIRE k 2000 LT", 1, 2000),
            ("PEXPIRE k 3000 XX GT", 1, 3000),
            ("PEXPIREAT k 1004000 XX", 1, 4000),
            ("PEXPIREAT k 1001000 NX", 0, 4000),
        ];
        for (line, answer, pttl) in answers {
            assert_eq!(run(&mut ks, line), Ok(Value::Int(answer)), "{line}");
            assert_eq!(run(&mut ks, "PTTL k"), Ok(Value::Int(pttl)), "{line}");
        }
        // No expiry: XX and GT refuse, LT sets one.
        run(&mut ks, "SET p v").unwrap();
        assert_eq!(run(&mut ks, "PEXPIRE p 100 XX"), Ok(Value::Int(0)));
        assert_eq!(run(&mut ks, "PEXPIRE p 100 GT"), Ok(Value::Int(0)));
        assert_eq!(run(&mut ks, "PEXPIRE p 100 LT"), Ok(Value::Int(1)));
        // A time not in the future deletes, when the condition allows it.
        assert_eq!(run(&mut ks, "PEXPIRE p -1 LT"), Ok(Value::Int(1)));
        assert_eq!(run(&mut ks, "EXISTS p"), Ok(Value::Int(0)));
        assert_eq!(run(&mut ks, "PEXPIRE none 100 NX"), Ok(Value::Int(0)));
        // The options are read first, then the number.
        let unsupported = Err("ERR Unsupported option FOO".to_owned());
        assert_eq!(run(&mut ks, "PEXPIRE k x FOO"), unsupported);
        assert_eq!(run(&mut ks, "PEXPIRE k x NX"), Err(NOT_INTEGER.into()));
        let overflow = Err("ERR invalid expire time in 'pexpire' command".to_owned());
        assert_eq!(run(&mut ks, "PEXPIRE k 9223372036854775807"), overflow);
        assert_eq!(
            run(&mut ks, "PEXPIREAT k 9223372036854775807"),
            Ok(Value::Int(1))
        );
    }
}
