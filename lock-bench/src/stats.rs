//! Percentiles, medians and Redis's own command counts.

use std::collections::BTreeMap;
use std::time::Duration;

use redis::aio::MultiplexedConnection;

/// The `q`-quantile (0..=1) of `samples`, by nearest rank; zero when empty.
pub fn quantile(samples: &mut [Duration], q: f64) -> Duration {
    if samples.is_empty() {
        return Duration::ZERO;
    }
    samples.sort_unstable();
    let rank = ((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len());
    samples[rank - 1]
}

/// The median of `values` (the mean of the middle two for an even count);
/// NaN when empty.
pub fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Commands that the bench itself sends to watch the server, and those that
/// connection set-up sends: not counted against any contender.
const OURS: &[&str] = &[
    "info",
    "config|resetstat",
    // Redis 6.2 counts CONFIG RESETSTAT under its command's name.
    "config",
    "flushall",
    "dbsize",
    "hello",
    "client|setinfo",
    "ping",
    "select",
];

/// Commands that a client of the library sends in the background, not for
/// any lock call: its registry entry's refresh every 30 s, and after a
/// reconnect (`CLIENT SETNAME`, then `HSET` + `PEXPIRE` in one `MULTI`; see
/// lock-runtime's `presence.rs` and `backend/registry.rs`). `HSET` and
/// `PEXPIRE` are among [`INSIDE_SCRIPTS`] already; `client` is how Redis
/// 6.2 names every `CLIENT` subcommand. Not counted against any call, so
/// that a window that crosses a refresh counts the calls' own commands.
const BACKGROUND: &[&str] = &["client|setname", "client", "multi", "exec"];

/// Commands that only the Lua scripts call (this library's and rslock's),
/// which INFO commandstats counts too. They are not round trips. `set` is
/// both: this library's scripts call it, and rslock sends `SET NX` itself
/// (see [`Commands::round_trips`]).
const INSIDE_SCRIPTS: &[&str] = &[
    "exists",
    "hexists",
    "hincrby",
    "pexpire",
    "pexpireat",
    "pttl",
    "hget",
    "hmget",
    "hlen",
    "hset",
    "hdel",
    "hgetall",
    "type",
    "time",
    "del",
    "publish",
    "spublish",
    "get",
    "mget",
    "set",
];

/// The CPU time (user + system) that the server has used so far, from
/// INFO cpu (`used_cpu_user` + `used_cpu_sys`, in µs as getrusage gives
/// them): finer than /proc's 10 ms ticks.
pub async fn server_cpu(con: &mut MultiplexedConnection) -> redis::RedisResult<Duration> {
    let info: String = redis::cmd("INFO").arg("cpu").query_async(con).await?;
    let seconds: f64 = info
        .lines()
        .filter_map(|line| {
            let (name, value) = line.split_once(':')?;
            matches!(name, "used_cpu_user" | "used_cpu_sys")
                .then(|| value.trim().parse::<f64>().ok())?
        })
        .sum();
    Ok(Duration::from_secs_f64(seconds))
}

/// Calls per command name, as INFO commandstats reports them, and the
/// server's time inside them (µs, a script's including what it calls).
#[derive(Debug, Default, Clone)]
pub struct Commands(pub BTreeMap<String, u64>, pub BTreeMap<String, u64>);

impl Commands {
    /// Resets the server's counters (CONFIG RESETSTAT).
    pub async fn reset(con: &mut MultiplexedConnection) -> redis::RedisResult<()> {
        redis::cmd("CONFIG").arg("RESETSTAT").query_async(con).await
    }

    /// The server's counters since the last reset, without the bench's own
    /// commands.
    pub async fn read(con: &mut MultiplexedConnection) -> redis::RedisResult<Commands> {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(con)
            .await?;
        let mut calls = BTreeMap::new();
        let mut usec = BTreeMap::new();
        for line in info.lines() {
            let Some(rest) = line.strip_prefix("cmdstat_") else {
                continue;
            };
            let Some((name, fields)) = rest.split_once(':') else {
                continue;
            };
            if OURS.contains(&name) {
                continue;
            }
            let field = |key: &str| -> u64 {
                fields
                    .split(',')
                    .find_map(|f| f.strip_prefix(key))
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0)
            };
            calls.insert(name.to_owned(), field("calls="));
            usec.insert(name.to_owned(), field("usec="));
        }
        Ok(Commands(calls, usec))
    }

    /// Adds `other`'s counts and times to these.
    pub fn add(&mut self, other: &Commands) {
        for (name, n) in &other.0 {
            *self.0.entry(name.clone()).or_default() += n;
        }
        for (name, usec) in &other.1 {
            *self.1.entry(name.clone()).or_default() += usec;
        }
    }

    pub fn get(&self, name: &str) -> u64 {
        self.0.get(name).copied().unwrap_or(0)
    }

    /// Commands sent by clients for their calls: everything except what
    /// scripts call inside and the clients' [`BACKGROUND`] commands.
    /// `set` counts as sent by a client in a run where no script called
    /// `time`: this library's acquire script calls both, rslock's clients
    /// send `SET NX` (its extend script also calls `set`, but no workload
    /// except (e) extends).
    pub fn round_trips(&self) -> u64 {
        self.sent().map(|(_, n)| n).sum()
    }

    /// The commands that clients sent, with their counts: see
    /// [`Commands::round_trips`].
    fn sent(&self) -> impl Iterator<Item = (&str, u64)> {
        let direct_sets = self.get("time") == 0;
        self.0
            .iter()
            .filter(move |(name, _)| {
                (!INSIDE_SCRIPTS.contains(&name.as_str()) || (direct_sets && *name == "set"))
                    && !BACKGROUND.contains(&name.as_str())
            })
            .map(|(name, n)| (name.as_str(), *n))
    }

    /// Server time (µs) inside the commands that clients sent, scripts
    /// included with the commands they call.
    pub fn server_usec(&self) -> u64 {
        self.sent()
            .map(|(name, _)| self.1.get(name).copied().unwrap_or(0))
            .sum()
    }

    /// Script calls: EVALSHA, EVAL and SCRIPT LOAD (after a NOSCRIPT).
    pub fn script_calls(&self) -> u64 {
        self.get("evalsha") + self.get("eval") + self.get("script|load")
    }

    /// Server time (µs) inside the script calls, what they call included.
    pub fn script_usec(&self) -> u64 {
        ["evalsha", "eval"]
            .iter()
            .map(|name| self.1.get(*name).copied().unwrap_or(0))
            .sum()
    }

    /// Server time (µs) inside the commands that scripts called.
    pub fn inside_usec(&self) -> u64 {
        self.inside().map(|(_, _, usec)| usec).sum()
    }

    /// The commands that scripts called, with their calls and time (µs).
    fn inside(&self) -> impl Iterator<Item = (&str, u64, u64)> {
        let direct_sets = self.get("time") == 0;
        self.0
            .iter()
            .filter(move |(name, n)| {
                **n > 0
                    && INSIDE_SCRIPTS.contains(&name.as_str())
                    && !(direct_sets && *name == "set")
            })
            .map(|(name, n)| {
                let usec = self.1.get(name).copied().unwrap_or(0);
                (name.as_str(), *n, usec)
            })
    }

    /// "hgetall 2.00 (1.10 µs)" for each command that scripts called, per
    /// `per` operations, the most time first.
    pub fn inside_per_op(&self, per: u64) -> String {
        let per = per.max(1) as f64;
        let mut parts: Vec<(&str, u64, u64)> = self.inside().collect();
        parts.sort_by_key(|&(name, _, usec)| (std::cmp::Reverse(usec), name));
        let parts: Vec<String> = parts
            .iter()
            .map(|(name, n, usec)| {
                format!(
                    "{name} {:.2} ({:.2} µs)",
                    *n as f64 / per,
                    *usec as f64 / per
                )
            })
            .collect();
        if parts.is_empty() {
            "none".into()
        } else {
            parts.join(", ")
        }
    }

    /// "evalsha 2.00" for each command sent by clients, per `per` operations.
    pub fn per_op(&self, per: u64) -> String {
        let per = per.max(1) as f64;
        let parts: Vec<String> = self
            .sent()
            .filter(|(_, n)| *n > 0)
            .map(|(name, n)| format!("{name} {:.2}", n as f64 / per))
            .collect();
        if parts.is_empty() {
            "none".into()
        } else {
            parts.join(", ")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lock_testkit::Server;

    /// A window in which a client refreshed its registry entry (as
    /// lock-runtime's `backend/registry.rs` sends it) counts only the two
    /// script calls of a pair as round trips, and only their time.
    #[tokio::test]
    async fn a_registry_refresh_is_not_a_round_trip_of_the_calls() {
        let server = Server::tcp(&[]);
        let mut con = redis::Client::open(server.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let script = redis::Script::new("redis.call('TIME') return redis.call('GET', KEYS[1])");
        let _: Option<String> = script.key("k").invoke_async(&mut con).await.unwrap();
        Commands::reset(&mut con).await.unwrap();
        for _ in 0..2 {
            let _: Option<String> = script.key("k").invoke_async(&mut con).await.unwrap();
        }
        let _: () = redis::cmd("CLIENT")
            .arg("SETNAME")
            .arg("lock-runtime:bench")
            .query_async(&mut con)
            .await
            .unwrap();
        let _: () = redis::pipe()
            .atomic()
            .cmd("HSET")
            .arg("lock:client:c")
            .arg("name")
            .arg("x")
            .ignore()
            .cmd("PEXPIRE")
            .arg("lock:client:c")
            .arg(90_000)
            .ignore()
            .query_async(&mut con)
            .await
            .unwrap();
        let commands = Commands::read(&mut con).await.unwrap();
        assert_eq!(commands.get("evalsha"), 2, "{commands:?}");
        assert_eq!(commands.round_trips(), 2, "{}", commands.per_op(1));
        assert_eq!(commands.server_usec(), commands.script_usec());
    }
}
