//! A seeded differential run: the same random sequence of script calls
//! (every lock kind, holders that expire, waiters that give up, renewals,
//! fences, inspect and force-unlock) sent to the embedded executor and to a
//! real redis-server, answers, published notices and the whole keyspace
//! compared after each step.
//!
//! Each step goes to the server as `MULTI, TIME, EVALSHA <step>, EVAL
//! <dump>, EXEC`: the server's time read just before the step, the step,
//! and its keyspace just after it, in one round trip. The embedded
//! executor's time is then set to that `TIME` and it runs the same call.
//! What comes from `TIME` (tokens, TTLs, `-2 - ttl` answers, the tokens and
//! expiries kept in values and hash fields) is compared numerically within
//! the step's measured round trip plus 2 ms; everything else exactly. A step
//! whose outcome depends on an expiry within 50 ms of its time is sent to
//! both but counted as "near a boundary", not compared; if it left the two
//! keyspaces apart at its keys, the embedded one takes the server's state
//! there (counted as "resynchronised").
//!
//! Time passes by real sleeps (the server's clock cannot be moved), so the
//! run stays short: leases of 200-1500 ms, and now and then a sleep of
//! 100-400 ms that lets holders and waiters expire.
//!
//! `LOCK_DIFF_SEED` (default 1) and `LOCK_DIFF_STEPS` (default 1000) choose
//! the sequence; the figures are printed at the end (`--nocapture`), and
//! `LOCK_DIFF_VERBOSE=1` also prints each step near a boundary that left
//! the keyspaces apart. A difference fails the test with the seed, the
//! step, the call, both answers and both keyspaces at its keys.
//!
//! A second test sends fixed sequences of commands to both (`SEQUENCES`):
//! numbers Redis reads one way and Rust's `parse` another, the options of
//! Redis 7 the embedded keyspace carries, and scripts that try to change
//! the globals or the libraries, each followed by one that uses them; every
//! answer must be the same (a TTL within 250 ms). On Redis 6.2, which
//! answers several of them otherwise, it is skipped: the embedded backend
//! answers as Redis 7.
mod support;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

use lock_runtime::{EmbeddedConnection, EmbeddedKeyspace, PublishedLog, StoredValue};
use redis::{Cmd, ConnectionLike, PushInfo, PushKind, Value};
use support::RedisServer;

const KEYS: [&str; 3] = ["diff:a", "diff:b", "diff:c"];
const OWNERS: [&str; 5] = ["c1:1", "c1:2", "c2:1", "c2:2", "c3:1"];
const CLIENTS: [&str; 2] = ["c1", "c2"];
/// An expiry this close to a step's time makes its outcome a coin toss.
const BOUNDARY_MS: i64 = 50;
/// Added to a step's round trip for what comes from `TIME`.
const MARGIN_US: i64 = 2_000;
/// The largest fence the scripts accept (2^53 - 1).
const MAX_FENCE: i64 = 9_007_199_254_740_991;

/// The server's whole keyspace, read inside a script (one instant): its
/// `TIME`, then per key its name, type, value (a string, or the hash's
/// fields as HGETALL gives them) and PTTL.
const DUMP: &str = r"
local t = redis.call('time')
local out = {t[1], t[2]}
for _, k in ipairs(redis.call('keys', '*')) do
  local ty = redis.call('type', k).ok
  local v
  if ty == 'string' then v = {redis.call('get', k)} else v = redis.call('hgetall', k) end
  out[#out + 1] = {k, ty, v, redis.call('pttl', k)}
end
return out
";

/// A small seeded generator (xorshift64*): no dependency, the same sequence
/// for a seed on every machine.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[(self.next() % items.len() as u64) as usize]
    }
}

/// The kind a key is mostly used as (it changes now and then, so that the
/// kinds meet on a key, freed and live).
#[derive(Clone, Copy)]
enum Mode {
    Exclusive,
    Read,
    Permits(u64),
    Fair,
}

/// One step of the sequence.
#[derive(Clone)]
enum Call {
    /// A script of the library, by name, with its keys and arguments.
    Script {
        name: &'static str,
        keys: Vec<String>,
        args: Vec<String>,
    },
    /// A raw command that leaves something foreign at a key.
    Raw { key: String, args: Vec<String> },
    /// Real time passes (holders and waiters expire).
    Sleep(u64),
}

impl Call {
    fn keys(&self) -> Vec<String> {
        match self {
            Call::Script { keys, .. } => keys.clone(),
            Call::Raw { key, .. } => vec![key.clone()],
            Call::Sleep(_) => Vec::new(),
        }
    }

    /// The command, with the scripts' SHA-1s as both sides loaded them.
    fn cmd(&self, shas: &HashMap<&'static str, String>) -> Cmd {
        let mut cmd = Cmd::new();
        match self {
            Call::Script { name, keys, args } => {
                cmd.arg("EVALSHA").arg(&shas[name]).arg(keys.len());
                cmd.arg(keys).arg(args);
            }
            Call::Raw { args, .. } => {
                cmd.arg(args);
            }
            Call::Sleep(_) => unreachable!("a sleep sends nothing"),
        }
        cmd
    }
}

impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Call::Script { name, keys, args } => {
                write!(f, "{name} KEYS {keys:?} ARGV {args:?}")
            }
            Call::Raw { args, .. } => write!(f, "raw {args:?}"),
            Call::Sleep(ms) => write!(f, "sleep {ms} ms"),
        }
    }
}

/// The sequence's generator: keys, owners and kinds drawn from small sets,
/// so that calls meet each other's holds and places.
struct Generator {
    rng: Rng,
    modes: [Mode; 3],
    /// The notice token a release sends (any number: it is only passed on).
    n: u64,
    /// The fence each key keeps on the server after the last step, for
    /// renewals that name it.
    fences: HashMap<String, String>,
}

impl Generator {
    fn new(seed: u64) -> Generator {
        Generator {
            rng: Rng::new(seed),
            modes: [Mode::Exclusive, Mode::Read, Mode::Fair],
            n: 0,
            fences: HashMap::new(),
        }
    }

    fn lease(&mut self) -> String {
        self.rng.range(200, 1_500).to_string()
    }

    fn owner(&mut self) -> String {
        (*self.rng.pick(&OWNERS)).to_owned()
    }

    fn mode(&mut self) -> Mode {
        match self.rng.range(0, 3) {
            0 => Mode::Exclusive,
            1 => Mode::Read,
            2 => Mode::Permits(self.rng.range(1, 3)),
            _ => Mode::Fair,
        }
    }

    /// The next step; `now_us` is the server's time at the last step (for
    /// fences near the clock's tokens).
    fn next(&mut self, now_us: u64) -> Call {
        let k = self.rng.range(0, 2) as usize;
        if self.rng.chance(4) {
            self.modes[k] = self.mode();
        }
        let key = KEYS[k].to_owned();
        match self.rng.range(0, 999) {
            0..=39 => Call::Sleep(self.rng.range(100, 400)),
            40..=494 => self.acquire(k, key),
            495..=544 => self.acquire_all(),
            545..=714 => self.release(key),
            715..=804 => self.renew(),
            805..=854 => self.fence(key, now_us),
            855..=934 => script("inspect", vec![key], Vec::new()),
            935..=994 => {
                let client = (*self.rng.pick(&CLIENTS)).to_owned();
                script("force_unlock", vec![key], vec![client])
            }
            _ => self.foreign(key),
        }
    }

    fn acquire(&mut self, k: usize, key: String) -> Call {
        let mode = if self.rng.chance(10) {
            self.mode()
        } else {
            self.modes[k]
        };
        let (owner, lease) = (self.owner(), self.lease());
        let waiter = self.rng.range(200, 2_000).to_string();
        let (kind, count) = match mode {
            Mode::Read if self.rng.chance(70) => ("r", 0),
            Mode::Exclusive | Mode::Read => {
                let mut args = vec![owner, lease];
                if self.rng.chance(50) {
                    args.push(waiter);
                }
                return script("acquire", vec![key], args);
            }
            Mode::Permits(n) => ("p", n),
            Mode::Fair => ("q", 0),
        };
        let queued = if self.rng.chance(20) { "1" } else { "0" };
        let args = vec![
            owner,
            lease,
            kind.to_owned(),
            waiter,
            count.to_string(),
            queued.to_owned(),
        ];
        script("shared_acquire", vec![key], args)
    }

    /// Several keys at once: two or three of the keys in a random order,
    /// each with an owner of its own, as a writer or a reader.
    fn acquire_all(&mut self) -> Call {
        let mut keys: Vec<String> = KEYS.iter().map(|k| (*k).to_owned()).collect();
        for i in (1..keys.len()).rev() {
            let j = self.rng.range(0, i as u64) as usize;
            keys.swap(i, j);
        }
        keys.truncate(self.rng.range(2, 3) as usize);
        let mode = if self.rng.chance(30) { "r" } else { "x" };
        let mut args = vec![
            mode.to_owned(),
            self.lease(),
            self.rng.range(200, 1_500).to_string(),
        ];
        for _ in &keys {
            args.push(self.owner());
        }
        script("acquire_all", keys, args)
    }

    /// A release of a random owner: a holder's, a waiter giving up its
    /// place, or nobody's.
    fn release(&mut self, key: String) -> Call {
        let name = if self.rng.chance(50) {
            "release"
        } else {
            "shared_release"
        };
        self.n += 1;
        let args = vec![
            self.owner(),
            (*self.rng.pick(&CLIENTS)).to_owned(),
            self.n.to_string(),
        ];
        script(name, vec![key], args)
    }

    /// A renewal of one to three locks with one lease, each named by the
    /// value its owner would leave: mostly with the fence the key keeps
    /// (renewed at once when that owner holds it unwaited), else any.
    fn renew(&mut self) -> Call {
        let mut keys = Vec::new();
        let mut args = vec![self.lease()];
        for _ in 0..self.rng.range(1, 3) {
            let key = (*self.rng.pick(&KEYS)).to_owned();
            let fence = match self.fences.get(&key) {
                Some(fence) if self.rng.chance(80) => fence.clone(),
                _ => self.rng.range(1, 1_000).to_string(),
            };
            args.push(format!("L1:{fence}:h:{}", self.owner()));
            keys.push(key);
        }
        script("renew", keys, args)
    }

    fn fence(&mut self, key: String, now_us: u64) -> Call {
        let token = match self.rng.range(0, 199) {
            0..=79 => (now_us + self.rng.range(0, 2_000_000)).to_string(),
            80..=129 => now_us
                .saturating_sub(self.rng.range(0, 1_000_000))
                .to_string(),
            130..=169 => self.rng.range(1, 1_000).to_string(),
            170..=184 => "12x".to_owned(),
            185..=198 => (MAX_FENCE + 1).to_string(),
            _ => (MAX_FENCE - 1).to_string(),
        };
        script("fence", vec![key], vec![self.owner(), token])
    }

    /// Something that is no lock of layout 1 at a key, for a lease.
    fn foreign(&mut self, key: String) -> Call {
        let value = if self.rng.chance(50) {
            "not a lock".to_owned()
        } else {
            format!("L1:{}:h:c9:9", MAX_FENCE + 1)
        };
        let lease = self.rng.range(200, 400).to_string();
        let args = vec!["SET".into(), key.clone(), value, "PX".into(), lease];
        Call::Raw { key, args }
    }
}

fn script(name: &'static str, keys: Vec<String>, args: Vec<String>) -> Call {
    Call::Script { name, keys, args }
}

/// What a key holds, as compared: a string, or a hash's fields as a map.
#[derive(Debug, Clone, PartialEq)]
enum Held {
    Str(String),
    Hash(BTreeMap<String, String>),
    List(Vec<String>),
}

/// A key's value and its expiry (ms since the epoch).
#[derive(Debug, Clone, PartialEq)]
struct Stored {
    held: Held,
    expires: Option<i64>,
}

/// A keyspace at one instant.
type Snapshot = BTreeMap<String, Stored>;

fn text(value: &Value) -> String {
    match value {
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Int(n) => n.to_string(),
        other => format!("{other:?}"),
    }
}

/// The server's snapshot from the dump script's answer: its time (µs) and
/// the keys.
fn server_snapshot(dump: &Value) -> (i64, Snapshot) {
    let Value::Array(items) = dump else {
        panic!("the dump script answered {dump:?}");
    };
    let secs: i64 = text(&items[0]).parse().expect("TIME seconds");
    let micros: i64 = text(&items[1]).parse().expect("TIME micros");
    let now_us = secs * 1_000_000 + micros;
    let mut keys = Snapshot::new();
    for item in &items[2..] {
        let Value::Array(parts) = item else {
            panic!("a dumped key {item:?}");
        };
        let [name, kind, Value::Array(value), Value::Int(pttl)] = parts.as_slice() else {
            panic!("a dumped key {parts:?}");
        };
        let held = if text(kind) == "string" {
            Held::Str(text(&value[0]))
        } else {
            Held::Hash(
                value
                    .chunks(2)
                    .map(|pair| (text(&pair[0]), text(&pair[1])))
                    .collect(),
            )
        };
        let expires = (*pttl >= 0).then(|| now_us / 1000 + pttl);
        keys.insert(text(name), Stored { held, expires });
    }
    (now_us, keys)
}

/// The fence each key of layout 1's string keeps in `keys`.
fn fences(keys: &Snapshot) -> HashMap<String, String> {
    let fence = |stored: &Stored| match &stored.held {
        Held::Str(value) => value
            .strip_prefix("L1:")?
            .split(':')
            .next()
            .map(str::to_owned),
        _ => None,
    };
    keys.iter()
        .filter_map(|(key, stored)| Some((key.clone(), fence(stored)?)))
        .collect()
}

fn embedded_snapshot(keyspace: &EmbeddedKeyspace) -> Snapshot {
    let lossy = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    keyspace
        .dump()
        .into_iter()
        .map(|(key, (value, expires))| {
            let held = match value {
                StoredValue::Str(s) => Held::Str(lossy(&s)),
                StoredValue::Hash(fields) => {
                    Held::Hash(fields.iter().map(|(f, v)| (lossy(f), lossy(v))).collect())
                }
                StoredValue::List(items) => Held::List(items.iter().map(|i| lossy(i)).collect()),
            };
            let expires = expires.map(|ms| i64::try_from(ms).expect("an expiry in range"));
            (lossy(&key), Stored { held, expires })
        })
        .collect()
}

/// What a step gave on one side: its answer, the keyspace just after it,
/// and the messages it published.
struct Outcome {
    answer: Value,
    keys: Snapshot,
    published: Vec<(String, String)>,
}

/// How far what comes from `TIME` may differ at one step, and the largest
/// differences seen.
struct Check {
    tol_us: i64,
    largest: Largest,
}

/// The largest differences seen in what comes from `TIME`.
#[derive(Default)]
struct Largest {
    token_us: i64,
    ms: i64,
    round_trip_us: i64,
}

impl Largest {
    /// Takes in a compared step's differences and round trip.
    fn merge(&mut self, step: &Largest, round_trip_us: i64) {
        self.token_us = self.token_us.max(step.token_us);
        self.ms = self.ms.max(step.ms);
        self.round_trip_us = self.round_trip_us.max(round_trip_us);
    }
}

impl Check {
    fn token(&mut self, s: i64, e: i64) -> bool {
        let d = (s - e).abs();
        self.largest.token_us = self.largest.token_us.max(d);
        d <= self.tol_us
    }

    fn ms(&mut self, s: i64, e: i64) -> bool {
        let d = (s - e).abs();
        self.largest.ms = self.largest.ms.max(d);
        d <= (self.tol_us + 999) / 1000
    }

    /// Two decimals, as tokens; anything else exactly.
    fn token_text(&mut self, s: &str, e: &str) -> bool {
        match (s.parse(), e.parse()) {
            (Ok(a), Ok(b)) => self.token(a, b),
            _ => s == e,
        }
    }

    fn ms_text(&mut self, s: &str, e: &str) -> bool {
        match (s.parse(), e.parse()) {
            (Ok(a), Ok(b)) => self.ms(a, b),
            _ => s == e,
        }
    }

    /// A script's answers: tokens and TTLs within the step's tolerance.
    fn answers(&mut self, name: &str, s: &Value, e: &Value) -> bool {
        use Value::{Array, Int, ServerError};
        match (name, s, e) {
            (_, ServerError(a), ServerError(b)) => error_text(a) == error_text(b),
            ("acquire" | "force_unlock", Int(a), Int(b)) if *a > 0 && *b > 0 => self.token(*a, *b),
            ("acquire" | "shared_acquire", Int(a), Int(b)) if *a < 0 && *b < 0 => self.ms(*a, *b),
            ("acquire" | "shared_acquire", Array(a), Array(b)) => {
                match (a.as_slice(), b.as_slice()) {
                    ([Int(x)], [Int(y)]) if *x < 0 && *y < 0 => self.ms(*x, *y),
                    ([Int(t1), Int(r1)], [Int(t2), Int(r2)]) if *t1 > 0 && *t2 > 0 => {
                        self.token(*t1, *t2) && r1 == r2
                    }
                    ([Int(t1), Int(h1)], [Int(t2), Int(h2)]) if *t1 < 0 && *t2 < 0 => {
                        self.ms(*t1, *t2) && self.ms(*h1, *h2)
                    }
                    _ => a == b,
                }
            }
            ("acquire_all", Array(a), Array(b)) if a.len() == b.len() => {
                match (a.as_slice(), b.as_slice()) {
                    ([Int(1), ta @ ..], [Int(1), tb @ ..]) => {
                        ta.iter().zip(tb).all(|pair| match pair {
                            (Int(x), Int(y)) => self.token(*x, *y),
                            _ => false,
                        })
                    }
                    ([Int(0), i, Int(x)], [Int(0), j, Int(y)]) => i == j && self.ms(*x, *y),
                    _ => a == b,
                }
            }
            // Another owner holds it, with this fence.
            ("release", Array(a), Array(b)) => match (a.as_slice(), b.as_slice()) {
                ([Int(-4), Int(x)], [Int(-4), Int(y)]) => self.token(*x, *y),
                _ => a == b,
            },
            ("inspect", Array(a), Array(b)) if a.len() == 4 && b.len() == 4 => {
                self.token_text(&text(&a[0]), &text(&b[0]))
                    && a[1] == b[1]
                    && a[2] == b[2]
                    && self.ms_text(&text(&a[3]), &text(&b[3]))
            }
            _ => s == e,
        }
    }

    /// Two keys' values and expiries: the fences, tokens and expiries in
    /// them within the step's tolerance, the rest exactly.
    fn stored(&mut self, s: &Stored, e: &Stored) -> bool {
        let expiry = match (s.expires, e.expires) {
            (Some(a), Some(b)) => self.ms(a, b),
            (a, b) => a == b,
        };
        let held = match (&s.held, &e.held) {
            (Held::Str(a), Held::Str(b)) => match (lock_parts(a), lock_parts(b)) {
                (Some((fa, ra)), Some((fb, rb))) => self.token_text(fa, fb) && ra == rb,
                _ => a == b,
            },
            (Held::Hash(a), Held::Hash(b)) => {
                a.len() == b.len()
                    && a.iter()
                        .all(|(field, va)| b.get(field).is_some_and(|vb| self.field(field, va, vb)))
            }
            _ => false,
        };
        expiry && held
    }

    /// A hash field (see docs/redis-layout.md, "Lock kinds").
    fn field(&mut self, field: &str, s: &str, e: &str) -> bool {
        if field == "f" {
            return self.token_text(s, e);
        }
        if field.starts_with("h:") {
            return match (s.split_once(':'), e.split_once(':')) {
                (Some((xa, ta)), Some((xb, tb))) => self.ms_text(xa, xb) && self.token_text(ta, tb),
                _ => s == e,
            };
        }
        if field == "ww" || field.starts_with("q:") {
            return match (s.rsplit_once(':'), e.rsplit_once(':')) {
                (Some((oa, xa)), Some((ob, xb))) => oa == ob && self.ms_text(xa, xb),
                _ => s == e,
            };
        }
        s == e
    }

    /// The messages published: a fence in them (a force-unlock's notice)
    /// within the tolerance, the rest exactly.
    fn published(&mut self, s: &[(String, String)], e: &[(String, String)]) -> bool {
        s.len() == e.len()
            && s.iter().zip(e).all(|((ca, ma), (cb, mb))| {
                ca == cb
                    && (ma == mb
                        || match (ma.rsplit_once(':'), mb.rsplit_once(':')) {
                            (Some((pa, ta)), Some((pb, tb))) => {
                                pa == pb && ta.len() > 12 && self.token_text(ta, tb)
                            }
                            _ => false,
                        })
            })
    }
}

fn error_text(error: &redis::ServerError) -> String {
    format!("{} {}", error.code(), error.details().unwrap_or(""))
}

/// A lock of layout 1's fence and the rest of its value.
fn lock_parts(value: &str) -> Option<(&str, &str)> {
    value.strip_prefix("L1:")?.split_once(':')
}

/// Every expiry a key carries: its own and its hash entries' (ms).
fn expiries(stored: &Stored) -> Vec<i64> {
    let mut all: Vec<i64> = stored.expires.into_iter().collect();
    if let Held::Hash(fields) = &stored.held {
        for (field, value) in fields {
            let exp = if field.starts_with("h:") {
                value.split_once(':').map(|(exp, _)| exp)
            } else if field == "ww" || field.starts_with("q:") {
                value.rsplit_once(':').map(|(_, exp)| exp)
            } else {
                None
            };
            all.extend(exp.and_then(|exp| exp.parse::<i64>().ok()));
        }
    }
    all
}

/// Whether an expiry at `keys`, in either keyspace as the last step left
/// it, lies within `window(key)` ms of `now_ms`.
fn near_boundary(
    before: [&Snapshot; 2],
    keys: &[String],
    now_ms: i64,
    window: impl Fn(&str) -> i64,
) -> bool {
    before.iter().any(|snapshot| {
        keys.iter().any(|key| {
            snapshot.get(key).is_some_and(|stored| {
                expiries(stored)
                    .into_iter()
                    .any(|exp| (exp - now_ms).abs() < window(key))
            })
        })
    })
}

/// The two executors: a redis-server (a connection for the steps, and a
/// RESP3 one subscribed to every channel) and an embedded keyspace.
struct Sides {
    con: redis::Connection,
    sub: redis::Connection,
    pushes: Receiver<PushInfo>,
    embedded: EmbeddedKeyspace,
    econ: EmbeddedConnection,
    log: PublishedLog,
    shas: HashMap<&'static str, String>,
}

const SCRIPTS: [&str; 9] = [
    "acquire",
    "release",
    "renew",
    "fence",
    "force_unlock",
    "inspect",
    "shared_acquire",
    "shared_release",
    "acquire_all",
];

impl Sides {
    fn new(server: &RedisServer) -> Sides {
        let mut con = server.connection();
        let client = redis::Client::open(format!("{}?protocol=resp3", server.url())).expect("url");
        let mut sub = client.get_connection().expect("a RESP3 connection");
        let (sender, pushes) = channel();
        sub.set_push_sender(sender);
        sub.psubscribe_resp3("*").expect("PSUBSCRIBE *");
        let embedded = EmbeddedKeyspace::new();
        let mut econ = embedded.connection();
        let log = embedded.published_log();
        let mut shas = HashMap::new();
        for name in SCRIPTS {
            let source = lock_runtime::__private::script_source(name).expect("a script");
            let load = redis::cmd("SCRIPT").arg("LOAD").arg(source).clone();
            let sha: String = load.query(&mut con).expect("SCRIPT LOAD on the server");
            let other: String = load.query(&mut econ).expect("SCRIPT LOAD embedded");
            assert_eq!(sha, other, "{name}: both sides hash the same text");
            shas.insert(name, sha);
        }
        Sides {
            con,
            sub,
            pushes,
            embedded,
            econ,
            log,
            shas,
        }
    }

    /// The step on the server: its `TIME` just before (µs), the round
    /// trip, and the outcome.
    fn server_step(&mut self, cmd: &Cmd) -> (i64, Duration, Outcome) {
        let mut pipe = redis::pipe();
        pipe.atomic().ignore_errors();
        pipe.cmd("TIME").add_command(cmd.clone());
        pipe.cmd("EVAL").arg(DUMP).arg(0);
        let start = Instant::now();
        let replies: Vec<Value> = pipe.query(&mut self.con).expect("the step's transaction");
        let round_trip = start.elapsed();
        let [time, answer, dump] = <[Value; 3]>::try_from(replies).expect("three replies");
        let Value::Array(time) = time else {
            panic!("TIME answered {time:?}");
        };
        let secs: i64 = text(&time[0]).parse().expect("TIME seconds");
        let micros: i64 = text(&time[1]).parse().expect("TIME micros");
        let (_, keys) = server_snapshot(&dump);
        // The messages the step published reached the subscriber before
        // this PING's answer (one server thread, in order).
        let _: Value = redis::cmd("PING").query(&mut self.sub).expect("PING");
        let published = self
            .pushes
            .try_iter()
            .filter(|push| push.kind == PushKind::PMessage)
            .map(|push| match push.data.as_slice() {
                [_, channel, message] => (text(channel), text(message)),
                other => panic!("a pmessage {other:?}"),
            })
            .collect();
        let outcome = Outcome {
            answer,
            keys,
            published,
        };
        (secs * 1_000_000 + micros, round_trip, outcome)
    }

    /// The step on the embedded executor, its time set to `time_us`.
    fn embedded_step(&mut self, time_us: i64, cmd: &Cmd) -> Outcome {
        self.embedded
            .set_time_us(u64::try_from(time_us).expect("a time after 1970"));
        let answer = self.econ.req_command(cmd).expect("the embedded step");
        let lossy = |bytes: Vec<u8>| String::from_utf8_lossy(&bytes).into_owned();
        Outcome {
            answer,
            keys: embedded_snapshot(&self.embedded),
            published: self
                .log
                .take()
                .into_iter()
                .map(|(channel, message)| (lossy(channel), lossy(message)))
                .collect(),
        }
    }

    /// The embedded keyspace takes the server's state at `key`.
    fn resync(&mut self, key: &str, server: Option<&Stored>) {
        let now_ms = i64::try_from(self.embedded.time_us() / 1000).expect("ms");
        let mut commands = vec![redis::cmd("DEL").arg(key).clone()];
        if let Some(stored) = server {
            let ttl = stored.expires.map(|at| at - now_ms);
            if ttl.is_none_or(|ttl| ttl > 0) {
                commands.push(match &stored.held {
                    Held::Str(value) => redis::cmd("SET").arg(key).arg(value).clone(),
                    Held::Hash(fields) => redis::cmd("HSET").arg(key).arg(fields).clone(),
                    Held::List(items) => redis::cmd("RPUSH").arg(key).arg(items).clone(),
                });
            }
            if let Some(ttl) = ttl.filter(|ttl| *ttl > 0) {
                commands.push(redis::cmd("PEXPIRE").arg(key).arg(ttl).clone());
            }
        }
        self.run_all(&commands);
    }

    fn run_all(&mut self, commands: &[Cmd]) {
        for cmd in commands {
            let reply = self.econ.req_command(cmd).expect("a resync command");
            assert!(!matches!(reply, Value::ServerError(_)), "resync: {reply:?}");
        }
    }
}

/// The run's figures.
#[derive(Default)]
struct Figures {
    steps: u64,
    compared: u64,
    near: u64,
    resynced: u64,
    sleeps: u64,
    largest: Largest,
    /// Compared steps by script and kind of answer.
    answers: BTreeMap<String, u64>,
}

/// One seeded run against one server.
struct Run {
    seed: u64,
    sides: Sides,
    generator: Generator,
    figures: Figures,
    /// Both keyspaces as the last step left them: server, embedded.
    before: [Snapshot; 2],
    last_time_us: i64,
    /// Per key, the largest tolerance (µs) of the steps that wrote it since
    /// it was last absent on both sides: what a step writes may derive from
    /// what an earlier one wrote (a kept token, an entry's expiry that
    /// becomes the key's), so that step's tolerance carries over.
    carried: HashMap<String, i64>,
}

impl Run {
    /// The next step of the sequence (sleeps included).
    fn next(&mut self) {
        let call = self
            .generator
            .next(u64::try_from(self.last_time_us).unwrap_or(0));
        if let Call::Sleep(ms) = call {
            self.figures.sleeps += 1;
            std::thread::sleep(Duration::from_millis(ms));
            return;
        }
        self.figures.steps += 1;
        self.step(&call);
    }

    /// The tolerance at `key` for a step of tolerance `tol_us`: its own
    /// plus what the key carries.
    fn tol_at(&self, key: &str, tol_us: i64) -> i64 {
        tol_us + self.carried.get(key).copied().unwrap_or(0)
    }

    fn step(&mut self, call: &Call) {
        let cmd = call.cmd(&self.sides.shas);
        let (time_us, round_trip, server) = self.sides.server_step(&cmd);
        let embedded = self.sides.embedded_step(time_us, &cmd);
        let keys = call.keys();
        let now_ms = time_us / 1000;
        let tol_us = i64::try_from(round_trip.as_micros()).unwrap_or(i64::MAX) + MARGIN_US;
        let window = |key: &str| BOUNDARY_MS.max((self.tol_at(key, tol_us) + 999) / 1000);
        let near = near_boundary([&self.before[0], &self.before[1]], &keys, now_ms, window);
        let answer_tol = keys.iter().map(|key| self.tol_at(key, tol_us)).max();
        let mut check = Check {
            tol_us: answer_tol.unwrap_or(tol_us),
            largest: Largest::default(),
        };
        let name = match call {
            Call::Script { name, .. } => name,
            _ => "raw",
        };
        let agree = check.answers(name, &server.answer, &embedded.answer)
            && check.published(&server.published, &embedded.published);
        let tol_at = |key: &str| self.tol_at(key, tol_us);
        let mut apart = apart_keys(&mut check, [&server.keys, &embedded.keys], now_ms, tol_at);
        let mut embedded_keys = embedded.keys.clone();
        if near {
            self.figures.near += 1;
            for key in apart.iter().filter(|key| keys.contains(key)) {
                if std::env::var_os("LOCK_DIFF_VERBOSE").is_some() {
                    let text = self.describe(call, &server, &embedded, &keys, tol_us);
                    eprintln!("near a boundary, resynchronised:\n{text}");
                }
                self.sides.resync(key, server.keys.get(key));
                self.figures.resynced += 1;
            }
            apart.retain(|key| !keys.contains(key));
            embedded_keys = embedded_snapshot(&self.sides.embedded);
        } else if agree {
            self.figures.compared += 1;
            self.figures
                .largest
                .merge(&check.largest, tol_us - MARGIN_US);
            let class = format!("{name} {}", class(&server.answer));
            *self.figures.answers.entry(class).or_default() += 1;
            if !server.published.is_empty() {
                *self.figures.answers.entry("(notices)".into()).or_default() += 1;
            }
        } else {
            panic!("{}", self.describe(call, &server, &embedded, &keys, tol_us));
        }
        if !apart.is_empty() {
            panic!(
                "{}",
                self.describe(call, &server, &embedded, &apart, tol_us)
            );
        }
        for key in &keys {
            let carried = self.carried.entry(key.clone()).or_default();
            *carried = (*carried).max(tol_us);
        }
        self.carried
            .retain(|key, _| server.keys.contains_key(key) || embedded_keys.contains_key(key));
        self.generator.fences = fences(&server.keys);
        self.before = [server.keys, embedded_keys];
        self.last_time_us = time_us;
    }

    /// The first difference, described for the failure.
    fn describe(
        &self,
        call: &Call,
        server: &Outcome,
        embedded: &Outcome,
        keys: &[String],
        tol_us: i64,
    ) -> String {
        let mut text = format!(
            "the embedded executor differs from redis-server: seed {}, step {}: {call}\n\
             (the step's tolerance for what comes from TIME: {tol_us} µs)\n\
             server answer:   {:?}\nembedded answer: {:?}\n\
             server published:   {:?}\nembedded published: {:?}\n",
            self.seed,
            self.figures.steps,
            server.answer,
            embedded.answer,
            server.published,
            embedded.published,
        );
        for key in keys {
            text.push_str(&format!(
                "{key} carries a tolerance of {} µs from the steps that wrote it\n\
                 {key} before the step: server {:?}, embedded {:?}\n\
                 {key} after the step:  server {:?}, embedded {:?}\n",
                self.carried.get(key).copied().unwrap_or(0),
                self.before[0].get(key),
                self.before[1].get(key),
                server.keys.get(key),
                embedded.keys.get(key),
            ));
        }
        text
    }
}

/// The keys whose states differ after a step, each compared within
/// `tol_at(key)` µs (a key present on one side only is no difference when
/// its expiry is within [`BOUNDARY_MS`], or that tolerance, of `now_ms`).
fn apart_keys(
    check: &mut Check,
    [server, embedded]: [&Snapshot; 2],
    now_ms: i64,
    tol_at: impl Fn(&str) -> i64,
) -> Vec<String> {
    let mut keys: Vec<&String> = server.keys().chain(embedded.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|key| {
            check.tol_us = tol_at(key);
            let window = BOUNDARY_MS.max((check.tol_us + 999) / 1000);
            match (server.get(*key), embedded.get(*key)) {
                (Some(a), Some(b)) => !check.stored(a, b),
                (Some(only), None) | (None, Some(only)) => {
                    only.expires.is_none_or(|at| (at - now_ms).abs() >= window)
                }
                (None, None) => false,
            }
        })
        .cloned()
        .collect()
}

/// A kind of answer, for the run's tally: a token, a refusal (`-2 - ttl`),
/// a kept place (`{-2 - ttl}`), a number, an error's code.
fn class(answer: &Value) -> String {
    match answer {
        Value::Int(n) if *n > 1 => "token".into(),
        Value::Int(n) if *n < -1 => "refused".into(),
        Value::Int(n) => n.to_string(),
        Value::Array(items) => match items.first() {
            Some(Value::Int(n)) if *n > 1 => "granted".into(),
            Some(Value::Int(n)) if *n < -1 => "queued".into(),
            Some(Value::BulkString(_)) => "state".into(),
            None => "empty".into(),
            Some(_) => "array".into(),
        },
        Value::ServerError(error) => match error.details() {
            Some(details) if details.contains("no fencing token left") => {
                format!("{} (no token left)", error.code())
            }
            _ => error.code().to_owned(),
        },
        other => format!("{other:?}"),
    }
}

/// The server's family and version, from INFO server.
fn server_name(con: &mut redis::Connection) -> String {
    let info: String = redis::cmd("INFO").arg("server").query(con).expect("INFO");
    let field = |name: &str| {
        info.lines()
            .find_map(|line| line.strip_prefix(name))
            .map(|v| v.trim().to_owned())
    };
    match field("valkey_version:") {
        Some(version) => format!("Valkey {version}"),
        None => format!("Redis {}", field("redis_version:").unwrap_or_default()),
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name}={v}: not a number"))
        })
        .unwrap_or(default)
}

#[test]
fn the_embedded_executor_answers_every_script_call_as_redis_server_does() {
    let seed = env_u64("LOCK_DIFF_SEED", 1);
    let steps = env_u64("LOCK_DIFF_STEPS", 1000);
    let server = RedisServer::start();
    let name = server_name(&mut server.connection());
    let mut run = Run {
        seed,
        sides: Sides::new(&server),
        generator: Generator::new(seed),
        figures: Figures::default(),
        before: [Snapshot::new(), Snapshot::new()],
        last_time_us: 0,
        carried: HashMap::new(),
    };
    let started = Instant::now();
    // Bounded: each round is a step or a sleep, and a run has at most
    // `steps` steps and 4% of sleeps on average.
    while run.figures.steps < steps {
        run.next();
    }
    let f = &run.figures;
    println!(
        "differential run on {name}, seed {seed}: {} steps, {} compared, {} near a boundary \
         ({} resynchronised), 0 differences; {} sleeps, {:.1} s; largest differences from \
         TIME: tokens {} µs, expiries and TTLs {} ms (largest round trip {} µs)",
        f.steps,
        f.compared,
        f.near,
        f.resynced,
        f.sleeps,
        started.elapsed().as_secs_f64(),
        f.largest.token_us,
        f.largest.ms,
        f.largest.round_trip_us,
    );
    println!("compared answers: {:?}", f.answers);
    assert_eq!(f.compared + f.near, f.steps);
}

/// A script that uses what a lock script uses of the globals and the
/// libraries: it answers the same whatever ran before it.
const CHECK: &[&str] = &[
    "EVAL",
    "return {redis.call('set', KEYS[1], ARGV[1]), string.match(ARGV[1], '^(%d)'), \
     ('x'):rep(2), tonumber('7'), math.floor(1.5), type(table.sort)}",
    "1",
    "k",
    "42",
];

/// Fixed sequences of commands, each from an empty keyspace: the arguments
/// Redis reads one way and Rust's `parse` another, the options of Redis 7
/// (`SET … GET`, `EXAT`, `PXAT`; `PEXPIRE … NX | XX | GT | LT`), and
/// scripts that try to change the globals or the libraries, each followed
/// by one that uses them. In an argument, `@ms+N` (or `@ms-N`) is the
/// server's time at the sequence's start plus (minus) N ms, `@s+N` the same
/// in seconds.
const SEQUENCES: &[(&str, &[&[&str]])] = &[
    (
        "integers, as string2ll reads them",
        &[
            &["SET", "c", "10"],
            &["INCRBY", "c", "+5"],
            &["INCRBY", "c", "05"],
            &["INCRBY", "c", "00"],
            &["INCRBY", "c", "-0"],
            &["INCRBY", "c", " 5"],
            &["INCRBY", "c", "5 "],
            &["INCRBY", "c", ""],
            &["INCRBY", "c", "-"],
            &["INCRBY", "c", "1e3"],
            &["INCRBY", "c", "9223372036854775808"],
            &["INCRBY", "c", "000000000000000000001"],
            &["INCRBY", "c", "0"],
            &["INCRBY", "c", "-5"],
            &["INCRBY", "c", "-9223372036854775808"],
            &["GET", "c"],
            &["SET", "z", "05"],
            &["INCRBY", "z", "1"],
            &["SET", "z", "-0"],
            &["INCRBY", "z", "1"],
            &["SET", "m", "9223372036854775807"],
            &["INCRBY", "m", "1"],
            &["HSET", "h", "f", "05"],
            &["HINCRBY", "h", "f", "1"],
            &["HINCRBY", "h", "g", "+1"],
            &["HINCRBY", "h", "g", "2"],
            &["SET", "k", "v", "PX", "010"],
            &["SET", "k", "v", "PX", "+10"],
            &["SET", "k", "v", "EX", "-0"],
            &["SET", "k", "v"],
            &["PEXPIRE", "k", "010"],
            &["PEXPIREAT", "k", "+1"],
            &["PTTL", "k"],
            &["EVAL", "return #KEYS", "00"],
            &["EVAL", "return #KEYS", "+0"],
            &["EVAL", "return #KEYS", "-1"],
            &["EVAL", "return #KEYS", "2", "a"],
            &["EVAL", "return #KEYS", "1", "a"],
        ],
    ),
    (
        "SET's options",
        &[
            &["SET", "k", "v", "GET"],
            &["SET", "k", "w", "get"],
            &["SET", "k", "x", "NX", "GET"],
            &["GET", "k"],
            &["SET", "n", "v", "XX", "GET"],
            &["EXISTS", "n"],
            &["SET", "k", "y", "XX", "GET"],
            &["SET", "k", "z", "GET", "GET"],
            &["HSET", "h", "f", "v"],
            &["SET", "h", "v", "GET"],
            &["TYPE", "h"],
            &["SET", "k", "v", "PXAT", "@ms+5000"],
            &["PTTL", "k"],
            &["SET", "k", "v", "EXAT", "@s+10"],
            &["PTTL", "k"],
            &["SET", "k", "w", "KEEPTTL", "GET"],
            &["PTTL", "k"],
            &["SET", "k", "v", "PX", "100", "PX", "5000"],
            &["PTTL", "k"],
            &["SET", "k", "v", "EX", "1", "ex", "8"],
            &["PTTL", "k"],
            &["SET", "k", "v", "PXAT", "@ms-1000"],
            &["GET", "k"],
            &["EXISTS", "k"],
            &["SET", "k", "v", "PXAT", "0"],
            &["SET", "k", "v", "EXAT", "-1"],
            &["SET", "k", "v", "PX", "9223372036854775807"],
            &["SET", "k", "v", "EX", "9223372036854775"],
            &["SET", "k", "v", "PXAT", "9223372036854775807"],
            &["PTTL", "k"],
            &["SET", "k", "v", "PX", "5", "PXAT", "5"],
            &["SET", "k", "v", "KEEPTTL", "PX", "5"],
            &["SET", "k", "v", "PX", "5", "KEEPTTL"],
            &["SET", "k", "v", "NX", "XX"],
            &["SET", "k", "v", "PX"],
            &["SET", "k", "v", "PX", "x", "FOO"],
            &["SET", "k", "v", "PX", "x"],
            &["SET", "k", "v", "FOO"],
            &["SET", "k"],
        ],
    ),
    (
        "PEXPIRE's and PEXPIREAT's conditions",
        &[
            &["SET", "k", "v"],
            &["PEXPIRE", "k", "5000", "NX"],
            &["PEXPIRE", "k", "9000", "NX"],
            &["PEXPIRE", "k", "1000", "GT"],
            &["PEXPIRE", "k", "9000", "gt"],
            &["PTTL", "k"],
            &["PEXPIRE", "k", "9500", "LT"],
            &["PEXPIRE", "k", "2000", "LT"],
            &["PTTL", "k"],
            &["PEXPIRE", "k", "3000", "XX", "GT"],
            &["PTTL", "k"],
            &["PEXPIREAT", "k", "@ms+4000", "XX"],
            &["PTTL", "k"],
            &["PEXPIREAT", "k", "@ms+1000", "NX"],
            &["PEXPIRE", "k", "100", "gt", "gt"],
            &["SET", "p", "v"],
            &["PEXPIRE", "p", "100", "XX"],
            &["PEXPIRE", "p", "100", "GT"],
            &["PEXPIRE", "p", "100000", "LT"],
            &["PTTL", "p"],
            &["PEXPIRE", "p", "-1", "LT"],
            &["EXISTS", "p"],
            &["PEXPIRE", "none", "100", "NX"],
            &["PEXPIRE", "k", "100", "FOO"],
            &["PEXPIRE", "k", "x", "FOO"],
            &["PEXPIRE", "k", "x", "NX"],
            &["PEXPIRE", "k", "100", "NX", "XX"],
            &["PEXPIRE", "k", "100", "NX", "GT"],
            &["PEXPIRE", "k", "100", "GT", "LT"],
            &["PEXPIRE", "k", "9223372036854775807"],
            &["PEXPIREAT", "k", "9223372036854775807"],
            &["PTTL", "k"],
            &["PEXPIRE", "k"],
        ],
    ),
    (
        "scripts that would change what the next script sees",
        &[
            CHECK,
            &["EVAL", "rawset(_G, 'redis', nil)", "0"],
            CHECK,
            &["EVAL", "redis = nil", "0"],
            CHECK,
            &["EVAL", "string.match = nil", "0"],
            CHECK,
            &["EVAL", "rawset(string, 'match', nil)", "0"],
            CHECK,
            &["EVAL", "redis.call = nil", "0"],
            CHECK,
            &["EVAL", "math.floor = nil", "0"],
            CHECK,
            &["EVAL", "table.insert(string, 1)", "0"],
            CHECK,
            &["EVAL", "setmetatable(_G, nil)", "0"],
            CHECK,
            &["EVAL", "getmetatable('').__index = nil", "0"],
            CHECK,
            &["EVAL", "KEYS = {}", "0"],
            &["EVAL", "leaked = 1", "0"],
            &["EVAL", "return leaked", "0"],
            &["EVAL", "return type(print)", "0"],
            &[
                "EVAL",
                "return {tostring(getmetatable(string)), type(getmetatable(_G)), \
                 tostring(getmetatable('').__index == string)}",
                "0",
            ],
            &[
                "EVAL",
                "ARGV[3] = 'x' setmetatable(ARGV, {__index = function() return 'leaked' end}) \
                 return #ARGV",
                "0",
                "a",
            ],
            &["EVAL", "return {#ARGV, tostring(ARGV[5])}", "0", "a", "b"],
        ],
    ),
];

/// An answer as compared: a value, or an error's code and its text up to
/// " script:" (where Redis, Valkey and the embedded backend each name the
/// script their own way).
fn compared(answer: redis::RedisResult<Value>) -> Result<Value, (String, String)> {
    let error = |code: &str, detail: Option<&str>| {
        let detail = detail.unwrap_or_default();
        let detail = detail.split(" script:").next().unwrap_or_default();
        Err((code.to_owned(), detail.to_owned()))
    };
    match answer {
        Ok(Value::ServerError(e)) => error(e.code(), e.details()),
        Ok(value) => Ok(value),
        Err(e) => error(e.code().unwrap_or("?"), e.detail()),
    }
}

/// `arg` with its time (`@ms±N`, `@s+N`) read at `now_ms`.
fn at_time(arg: &str, now_ms: i64) -> String {
    let shifted = |rest: &str, base: i64| match rest.split_at(1) {
        ("+", n) => base + n.parse::<i64>().expect("a number"),
        (_, n) => base - n.parse::<i64>().expect("a number"),
    };
    if let Some(rest) = arg.strip_prefix("@ms") {
        shifted(rest, now_ms).to_string()
    } else if let Some(rest) = arg.strip_prefix("@s") {
        shifted(rest, now_ms / 1000).to_string()
    } else {
        arg.to_owned()
    }
}

/// Whether the server answers as Redis 7 does (Redis 6.2 refuses `SET …
/// NX GET` and `PEXPIRE`'s conditions, and words a few errors otherwise):
/// the embedded backend answers as Redis 7.
fn answers_as_redis_7(name: &str) -> bool {
    let version = name.rsplit(' ').next().unwrap_or_default();
    let major: u32 = version
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    name.starts_with("Valkey") || major >= 7
}

#[test]
fn the_embedded_keyspace_answers_each_command_as_redis_server_does() {
    let server = RedisServer::start();
    let mut con = server.connection();
    let name = server_name(&mut con);
    if !answers_as_redis_7(&name) {
        println!("{name}: skipped (the embedded backend answers as Redis 7)");
        return;
    }
    let embedded = EmbeddedKeyspace::new();
    let mut econ = embedded.connection();
    let mut compared_answers = 0;
    for (sequence, commands) in SEQUENCES {
        let _: () = redis::cmd("FLUSHALL").query(&mut con).expect("FLUSHALL");
        let _: () = redis::cmd("FLUSHALL").query(&mut econ).expect("FLUSHALL");
        let (secs, micros): (i64, i64) = redis::cmd("TIME").query(&mut con).expect("TIME");
        let now_us = secs * 1_000_000 + micros;
        embedded.set_time_us(u64::try_from(now_us).expect("a time after 1970"));
        for command in *commands {
            let mut cmd = redis::cmd(command[0]);
            for arg in &command[1..] {
                cmd.arg(at_time(arg, now_us / 1000));
            }
            let server_answer = compared(con.req_command(&cmd));
            let embedded_answer = compared(econ.req_command(&cmd));
            let same = match (&server_answer, &embedded_answer) {
                // A TTL read a few ms apart on the two clocks.
                (Ok(Value::Int(a)), Ok(Value::Int(b))) if command[0] == "PTTL" && *a >= 0 => {
                    (a - b).abs() <= 250
                }
                (a, b) => a == b,
            };
            assert!(
                same,
                "{name}, {sequence}: {command:?}\n  server:   {server_answer:?}\n  embedded: {embedded_answer:?}"
            );
            compared_answers += 1;
        }
    }
    println!("{name}: {compared_answers} answers compared, all the same");
}
