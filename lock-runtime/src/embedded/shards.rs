//! The embedded keyspace in shards, so that calls on different keys run
//! side by side: each shard is a Lua state with the keys that hash to it
//! (by Redis Cluster's hash slot, so keys with one `{hash tag}` share a
//! shard), made on first use.
//!
//! A command runs on the shard of its keys: a script on its declared
//! `KEYS`, any other command on the keys `keyspace::keys_of` finds among
//! its arguments. A script whose `KEYS` fall in several shards locks them
//! all, in shard order (so two such scripts never deadlock), moves those
//! keys' entries into the first shard, runs there, and moves them back: it
//! is as atomic as on one Redis node (and so is a command of several keys,
//! DEL, EXISTS or MGET).
//! A script is compiled on a shard the first time that shard runs it, from
//! the source `SCRIPT LOAD` registered; commands about the whole keyspace
//! (`DBSIZE`, `KEYS`, `FLUSHALL`, `INFO`, `CONFIG RESETSTAT`) visit every
//! shard in turn.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use redis::Value;

use super::keyspace::{self, Keyspace, Published, Reply};
use super::lua::{self, Engine};
use crate::route::cluster::slot_of;

/// How many shards a keyspace has.
const SHARDS: usize = 16;

/// The name of a record the lock scripts keep beside the lock `key`
/// (`record_key` in `kind/lua/exclusive/read.lua`): the lock's name with
/// `suffix` after it, and the lock's name as the hash tag when it has
/// none; `None` when the name has braces but no tag.
fn record_key(key: &[u8], suffix: &[u8]) -> Option<Vec<u8>> {
    let open = key.iter().position(|b| *b == b'{');
    let Some(open) = open else {
        if key.contains(&b'}') {
            return None;
        }
        return Some([key, suffix, b"{", key, b"}"].concat());
    };
    let close = key[open + 1..].iter().position(|b| *b == b'}')?;
    (close > 0).then(|| [key, suffix].concat())
}

/// The records beside the lock `key`: its waiting clients and who freed it.
fn records(key: &[u8]) -> impl Iterator<Item = Vec<u8>> + '_ {
    [&b":waiting"[..], b":freed"]
        .into_iter()
        .filter_map(move |suffix| record_key(key, suffix))
}

/// A keyspace's shards and the scripts loaded into it.
pub(super) struct Shards {
    engines: Box<[OnceLock<Mutex<Engine>>]>,
    /// Script sources by SHA-1, as `SCRIPT LOAD` registered them.
    sources: Mutex<HashMap<String, Arc<[u8]>>>,
}

/// What one command did: its answer and what it published.
pub(super) type Outcome = (Reply, Vec<Published>);

/// The shard of `key`.
pub(super) fn shard_of(key: &[u8]) -> usize {
    usize::from(slot_of(key)) % SHARDS
}

impl Shards {
    pub(super) fn new() -> Self {
        Shards {
            engines: (0..SHARDS).map(|_| OnceLock::new()).collect(),
            sources: Mutex::default(),
        }
    }

    /// Shard `i`'s engine, locked.
    ///
    /// # Panics
    /// If Lua cannot allocate a state (out of memory).
    fn lock(&self, i: usize) -> MutexGuard<'_, Engine> {
        self.engines[i]
            .get_or_init(|| {
                let engine = Engine::new().expect("lock-runtime: cannot create a Lua state");
                Mutex::new(engine)
            })
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs one command at `now_us`.
    pub(super) fn execute(&self, args: &[&[u8]], now_us: u64) -> Outcome {
        let raw = args.first().copied().unwrap_or_default();
        // Lowercased on the stack: this runs for every call.
        let mut buffer = [0u8; 16];
        let name: &[u8] = match buffer.get_mut(..raw.len()) {
            Some(lower) => {
                lower.copy_from_slice(raw);
                lower.make_ascii_lowercase();
                lower
            }
            None => raw,
        };
        let rest = args.get(1..).unwrap_or_default();
        match (name, rest) {
            (b"evalsha" | b"eval", [_, numkeys, tail @ ..]) => {
                // A bad count runs on the first shard, which refuses it.
                let n = lua::numkeys(numkeys, tail.len()).unwrap_or(0);
                let keys = tail.get(..n).unwrap_or_default();
                self.on_keys(keys, now_us, |engine| self.script(engine, name, rest))
            }
            (b"script", [sub, source]) if sub.eq_ignore_ascii_case(b"load") => {
                (self.load(source, now_us), Vec::new())
            }
            (b"script", [sub, shas @ ..]) if sub.eq_ignore_ascii_case(b"exists") => {
                let sources = self.sources.lock().unwrap_or_else(PoisonError::into_inner);
                let known = shas.iter().map(|sha| {
                    let sha = String::from_utf8_lossy(sha).to_ascii_lowercase();
                    Value::Int(i64::from(sources.contains_key(&sha)))
                });
                (Ok(Value::Array(known.collect())), Vec::new())
            }
            (b"dbsize" | b"keys" | b"flushall" | b"flushdb" | b"info" | b"config", _) => {
                (self.on_all(args, now_us), Vec::new())
            }
            _ => {
                let keys = keyspace::keys_of(name, rest);
                self.on_keys(keys, now_us, |engine| engine.keyspace().command(args))
            }
        }
    }

    /// EVALSHA or EVAL on `engine`.
    fn script(&self, engine: &mut Engine, name: &[u8], rest: &[&[u8]]) -> Reply {
        let source_of = |sha: &str| {
            let sources = self.sources.lock().unwrap_or_else(PoisonError::into_inner);
            sources.get(sha).cloned()
        };
        if name == b"evalsha" {
            engine.keyspace().count("evalsha");
            return engine.evalsha(rest, source_of);
        }
        engine.keyspace().count("eval");
        let [source, tail @ ..] = rest else {
            return Err("ERR wrong number of arguments for 'eval' command".into());
        };
        // As on Redis, a bad count of keys registers nothing.
        if let [numkeys, args @ ..] = tail {
            lua::numkeys(numkeys, args.len())?;
        }
        let sha = sha1_smol::Sha1::from(source).digest().to_string();
        self.register(&sha, source);
        let mut call: Vec<&[u8]> = vec![sha.as_bytes()];
        call.extend_from_slice(tail);
        engine.evalsha(&call, source_of)
    }

    fn register(&self, sha: &str, source: &[u8]) {
        let mut sources = self.sources.lock().unwrap_or_else(PoisonError::into_inner);
        sources
            .entry(sha.to_owned())
            .or_insert_with(|| Arc::from(source));
    }

    /// `SCRIPT LOAD`: compiled on the first shard (which says whether it
    /// compiles), registered for the others.
    fn load(&self, source: &[u8], now_us: u64) -> Reply {
        let reply = {
            let mut engine = self.lock(0);
            engine.keyspace().set_now(now_us);
            engine.keyspace().count("script");
            engine.load(source)?
        };
        if let Value::BulkString(sha) = &reply {
            self.register(&String::from_utf8_lossy(sha), source);
        }
        Ok(reply)
    }
}

/// Where a command runs: one shard, several, or all in turn.
impl Shards {
    /// Runs `f` on the shard of `keys` (the first shard when there are
    /// none), with every key of another shard moved in for the time it
    /// runs.
    fn on_keys(
        &self,
        keys: &[&[u8]],
        now_us: u64,
        f: impl FnOnce(&mut Engine) -> Reply,
    ) -> Outcome {
        let one = keys.first().map_or(0, |k| shard_of(k));
        if keys.iter().skip(1).all(|k| shard_of(k) == one) {
            // One shard: nothing moves (every script of a lock call).
            let mut engine = self.lock(one);
            {
                let mut keyspace = engine.keyspace();
                keyspace.set_now(now_us);
                keyspace.expire_due();
            }
            let reply = f(&mut engine);
            let published = std::mem::take(&mut engine.keyspace().published);
            return (reply, published);
        }
        let mut shards: Vec<usize> = keys.iter().map(|k| shard_of(k)).collect();
        shards.sort_unstable();
        shards.dedup();
        let first = shards.first().copied().unwrap_or(0);
        // In shard order, so that two calls on several shards never wait
        // for each other in a circle.
        let mut guards: Vec<(usize, MutexGuard<'_, Engine>)> = Vec::with_capacity(1);
        for &i in shards.iter().chain(shards.is_empty().then_some(&first)) {
            let engine = self.lock(i);
            {
                let mut keyspace = engine.keyspace();
                keyspace.set_now(now_us);
                keyspace.expire_due();
            }
            guards.push((i, engine));
        }
        let Some(((_, home), others)) = guards.split_first_mut() else {
            return (Err("ERR no shard".into()), Vec::new());
        };
        // Each key with its records (waiting clients, who freed it), which
        // a lock's scripts reach without declaring them (in the key's slot,
        // so in its shard).
        let visitors: Vec<Vec<u8>> = keys
            .iter()
            .copied()
            .filter(|k| shard_of(k) != first)
            .flat_map(|k| std::iter::once(k.to_vec()).chain(records(k)))
            .collect();
        for key in &visitors {
            let owner = others.iter_mut().find(|(i, _)| *i == shard_of(key));
            if let Some((_, engine)) = owner {
                let entry = engine.keyspace().take(key);
                if let Some(entry) = entry {
                    home.keyspace().put(key, entry);
                }
            }
        }
        let reply = f(home);
        for key in &visitors {
            let entry = home.keyspace().take(key);
            let owner = others.iter_mut().find(|(i, _)| *i == shard_of(key));
            if let (Some(entry), Some((_, engine))) = (entry, owner) {
                engine.keyspace().put(key, entry);
            }
        }
        let published = std::mem::take(&mut home.keyspace().published);
        (reply, published)
    }

    /// A command about the whole keyspace, on every shard in turn: counts
    /// and lists added up, the first error.
    fn on_all(&self, args: &[&[u8]], now_us: u64) -> Reply {
        let mut total: Option<Value> = None;
        let mut error = None;
        self.each(now_us, |keyspace| match keyspace.command(args) {
            Err(e) => error = error.take().or(Some(e)),
            Ok(reply) => total = Some(sum(total.take(), reply)),
        });
        if let Some(error) = error {
            return Err(error);
        }
        match total {
            Some(total) => Ok(total),
            None => {
                self.on_keys(&[], now_us, |engine| engine.keyspace().command(args))
                    .0
            }
        }
    }

    /// What every shard holds, for the test door.
    #[cfg(any(test, feature = "embedded-test-door"))]
    pub(super) fn dump(&self, now_us: u64) -> Vec<super::keyspace::Dumped> {
        let mut all = Vec::new();
        self.each(now_us, |keyspace| all.extend(keyspace.dump()));
        all
    }

    /// Runs `f` on the keyspace of every shard made so far, one at a time.
    fn each(&self, now_us: u64, mut f: impl FnMut(&mut Keyspace)) {
        for i in 0..SHARDS {
            if self.engines[i].get().is_none() {
                continue;
            }
            let engine = self.lock(i);
            let mut keyspace = engine.keyspace();
            keyspace.set_now(now_us);
            f(&mut keyspace);
        }
    }
}

/// Two shards' answers to one command as one.
fn sum(total: Option<Value>, reply: Value) -> Value {
    match (total, reply) {
        (Some(Value::Int(a)), Value::Int(b)) => Value::Int(a + b),
        (Some(Value::Array(mut a)), Value::Array(b)) => {
            a.extend(b);
            Value::Array(a)
        }
        (
            Some(Value::VerbatimString { format, text: a }),
            Value::VerbatimString { text: b, .. },
        ) => Value::VerbatimString {
            format,
            text: merge_stats(&a, &b),
        },
        (_, reply) => reply,
    }
}

/// Two `INFO commandstats` texts as one: the calls of each command added.
fn merge_stats(a: &str, b: &str) -> String {
    let mut calls: std::collections::BTreeMap<String, u64> = Default::default();
    for line in a.lines().chain(b.lines()) {
        let Some((name, rest)) = line.split_once(":calls=") else {
            continue;
        };
        let n: u64 = rest
            .split(',')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        *calls.entry(name.to_owned()).or_default() += n;
    }
    let mut text = String::from("# Commandstats\r\n");
    for (name, n) in calls {
        text.push_str(&format!(
            "{name}:calls={n},usec=0,usec_per_call=0.00,rejected_calls=0,failed_calls=0\r\n"
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::{record_key, records, shard_of};

    #[test]
    fn a_locks_records_are_in_its_slot() {
        for key in ["lock:a", "lock:{a}:b", "lock:{order:1}"] {
            let kept: Vec<Vec<u8>> = records(key.as_bytes()).collect();
            assert_eq!(kept.len(), 2, "{key}");
            for record in kept {
                assert!(record.starts_with(key.as_bytes()));
                assert_eq!(shard_of(&record), shard_of(key.as_bytes()), "{key}");
            }
        }
        assert_eq!(
            record_key(b"lock:a", b":waiting"),
            Some(b"lock:a:waiting{lock:a}".to_vec())
        );
        assert_eq!(
            record_key(b"lock:{a}", b":freed"),
            Some(b"lock:{a}:freed".to_vec())
        );
        for key in ["lock:a{b", "lock:a}b", "lock:{}b"] {
            assert_eq!(records(key.as_bytes()).count(), 0, "{key}");
        }
    }
}
