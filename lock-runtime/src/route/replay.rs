//! Releases sent again after the topology changed.
//!
//! A release that reached a master in the moments before a failover may
//! never reach the replica that takes its place: a write is streamed to the
//! replicas after it answers, and a failover (a crash, or `SENTINEL
//! FAILOVER`, whose demoted master drops what it did not stream) loses it.
//! The promoted replica then keeps the hold, and the key stays taken by a
//! call that already returned until the hold's lease ends.
//!
//! So a route that can fail over keeps the releases it sent within the last
//! lease, as built commands ("operations as values": this module knows no
//! lock kind), and sends them again to the new master once it follows one
//! (see [`ReplayLog::replay`]). That is safe because every release is
//! idempotent and frees only its own acquisition: its owner id is unique
//! per acquisition and never reused (see `docs/redis-layout.md`), so a
//! release sent again frees the hold it was meant for, if it is still
//! there, and changes nothing otherwise.
//!
//! The log is bounded two ways. An entry is useless once the lease of the
//! hold it released has run out (the hold has expired everywhere), so it
//! goes then; and the log keeps at most [`MAX_ENTRIES`]: past that, the
//! entry with the least lease left is dropped and counted, and the next
//! replay says how many were dropped (their keys stay taken until their
//! lease ends, as without this log). Entries are kept in the order their
//! leases end, not the order they were sent, so both bounds drop the entry
//! that ends first, whatever the leases: a release of a long lease keeps
//! only itself, not every shorter one sent after it, and a route that
//! follows its masters only while the log keeps something (Cluster) stops
//! once the last lease has run out. Keeping an entry costs O(log n).
//!
//! At 1,000 releases a second with the default 30 s lease the log holds
//! about 30,000 entries, about 15 MB (an entry is about 500 bytes: the
//! command's buffer, its argument offsets, the key and an instant), and a
//! replay is 30 pipelines of 1,000 script calls, sent at once: about 6 MB
//! on the wire and 0.1 s of the new master's time (3.7 µs a call that
//! frees, 2.5 µs one that finds nothing, measured on redis-server 7.0 with
//! `redis-cli --pipe`).

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use redis::{Cmd, Pipeline, RedisError, RedisResult, Script, Value};

use super::ScriptCall;

/// The most entries the log keeps (see the module's docs): room for about
/// 2,000 releases a second with a 30 s lease.
pub(crate) const MAX_ENTRIES: usize = 65_536;

/// Script calls per pipeline in a replay: one round trip each.
const CHUNK: usize = 1_000;

/// How long one replay may take in all; what is left then is not sent.
const REPLAY_WITHIN: Duration = Duration::from_secs(5);

/// One release as it was sent.
struct Entry {
    /// The lock's key, which routes the command.
    key: Box<str>,
    /// The command as built: an `EVALSHA` of the release script.
    cmd: Cmd,
    /// The script `cmd` calls, loaded first on a node that lacks it (a
    /// promoted replica's script cache is empty).
    script: &'static Script,
}

/// Where an entry is kept: when the lease of the hold it released ends
/// (after it, that hold has expired everywhere), then the order entries
/// came in, which tells apart entries that end at the same instant.
type Until = (Instant, u64);

/// What one replay did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Replayed {
    /// Releases sent again that the master ran.
    pub sent: usize,
    /// Of those, how many freed a hold that was still there.
    pub freed: usize,
    /// Releases not known to have run: their pipeline failed, their own
    /// call failed, or time ran out.
    pub unsent: usize,
    /// The groups of those releases.
    pub unsent_in: BTreeSet<u16>,
}

/// One pipeline of a replay: its group, the calls, the key of each, and
/// the scripts they call.
type Chunk = (u16, Pipeline, Vec<Box<str>>, Vec<&'static Script>);

/// The releases a route sent within the last lease.
pub(crate) struct ReplayLog {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// By when their lease ends: the first entry is the one with the least
    /// lease left.
    entries: BTreeMap<Until, Entry>,
    /// Entries kept so far, for [`Until`].
    kept: u64,
    /// Entries dropped past [`MAX_ENTRIES`] since the last replay.
    dropped: u64,
}

impl ReplayLog {
    /// An empty log.
    pub(crate) fn new() -> Self {
        ReplayLog {
            state: Mutex::new(State::default()),
        }
    }

    /// Keeps `call`, a release of a hold (or a place in a line) of lease
    /// `lease`, sent now. Call it before sending, so that a switch of
    /// master after the send finds it.
    pub(crate) fn record(&self, call: &ScriptCall<'_>, lease: Duration) {
        let now = Instant::now();
        self.record_at(call.key, call.cmd.clone(), call.script, (now, now + lease));
    }

    /// Whether the log keeps nothing now.
    pub(crate) fn is_empty(&self) -> bool {
        let mut state = self.lock();
        state.expire(Instant::now());
        state.entries.is_empty()
    }

    /// Keeps `cmd`, a release of `key` by `EVALSHA` of `script`, sent at
    /// `now`, until `until`; past the cap, drops the entry with the least
    /// lease left (maybe this one).
    fn record_at(&self, key: &str, cmd: Cmd, script: &'static Script, times: (Instant, Instant)) {
        let (now, until) = times;
        let entry = Entry {
            key: key.into(),
            cmd,
            script,
        };
        let mut state = self.lock();
        state.expire(now);
        state.kept += 1;
        let at = (until, state.kept);
        state.entries.insert(at, entry);
        if state.entries.len() > MAX_ENTRIES {
            state.entries.pop_first();
            state.dropped += 1;
        }
    }

    /// How many entries the log keeps now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().entries.len()
    }
}

/// Sending the entries again.
impl ReplayLog {
    /// Sends the releases of the last lease again through `run`, which
    /// loads the scripts it is given, then sends one pipeline of the group
    /// it is given to a master and answers each command's result;
    /// `answered` is called with the key of each release that the master
    /// answered (it ran there: it may have freed a hold, or withdrawn a
    /// place in a line). `group` names the pipeline an entry's key goes in
    /// (on Cluster its hash slot: a pipeline may not span slots), or `None`
    /// to leave the entry out. Pipelines of at most [`CHUNK`] calls, all
    /// sent at once, answered within [`REPLAY_WITHIN`]. The entries stay: a
    /// later switch sends them again, and so may the caller for the groups
    /// whose releases went unsent.
    pub(crate) async fn replay<F, Fut>(
        &self,
        group: impl Fn(&str) -> Option<u16>,
        run: F,
        mut answered: impl FnMut(&str),
    ) -> Replayed
    where
        F: Fn(u16, Pipeline, Vec<&'static Script>) -> Fut,
        Fut: Future<Output = Result<Vec<RedisResult<Value>>, RedisError>>,
    {
        use futures_util::StreamExt as _;
        let (pipelines, dropped) = self.pipelines(group, Instant::now());
        if dropped > 0 {
            tracing::warn!(
                dropped,
                max = MAX_ENTRIES,
                "releases past the replay log's cap were not sent again; their keys stay \
                 taken until their lease ends"
            );
        }
        let mut done = Replayed::default();
        // The pipelines not answered yet: how many calls, and of which groups.
        let mut pending: usize = pipelines.iter().map(|(_, _, keys, _)| keys.len()).sum();
        let mut waiting: BTreeMap<u16, usize> = BTreeMap::new();
        let mut sends: futures_util::stream::FuturesUnordered<_> = pipelines
            .into_iter()
            .map(|(group, pipeline, keys, scripts)| {
                *waiting.entry(group).or_default() += 1;
                let sent = run(group, pipeline, scripts);
                async move { (sent.await, group, keys) }
            })
            .collect();
        let deadline = tokio::time::Instant::now() + REPLAY_WITHIN;
        while let Ok(Some((answer, group, keys))) =
            tokio::time::timeout_at(deadline, sends.next()).await
        {
            pending -= keys.len();
            if let Some(left) = waiting.get_mut(&group) {
                *left -= 1;
            }
            let answers = answer.unwrap_or_else(|error| {
                tracing::debug!(%error, calls = keys.len(), "a replay pipeline failed");
                Vec::new()
            });
            let ran = done.count(&keys, &answers, &mut answered);
            if ran < keys.len() {
                done.unsent += keys.len() - ran;
                done.unsent_in.insert(group);
            }
        }
        done.unsent += pending;
        done.unsent_in.extend(
            waiting
                .into_iter()
                .filter(|(_, left)| *left > 0)
                .map(|(g, _)| g),
        );
        done
    }

    /// The entries live at `now` that `group` keeps, as pipelines of at most
    /// [`CHUNK`] calls of one group, each with its calls' keys and the
    /// scripts they call; and the count dropped past the cap since the last
    /// replay.
    fn pipelines(&self, group: impl Fn(&str) -> Option<u16>, now: Instant) -> (Vec<Chunk>, u64) {
        let mut state = self.lock();
        state.expire(now);
        let dropped = std::mem::take(&mut state.dropped);
        let mut groups: BTreeMap<u16, Vec<&Entry>> = BTreeMap::new();
        for entry in state.entries.values() {
            if let Some(g) = group(&entry.key) {
                groups.entry(g).or_default().push(entry);
            }
        }
        let pipelines = groups
            .iter()
            .flat_map(|(group, entries)| entries.chunks(CHUNK).map(|chunk| (*group, chunk)))
            .map(|(group, chunk)| {
                let mut pipeline = redis::pipe();
                pipeline.ignore_errors();
                let mut scripts: Vec<&'static Script> = Vec::new();
                let mut keys = Vec::with_capacity(chunk.len());
                for entry in chunk {
                    if !scripts.iter().any(|s| std::ptr::eq(*s, entry.script)) {
                        scripts.push(entry.script);
                    }
                    pipeline.add_command(entry.cmd.clone());
                    keys.push(entry.key.clone());
                }
                (group, pipeline, keys, scripts)
            })
            .collect();
        (pipelines, dropped)
    }

    /// The keys of the entries kept, the one with the least lease left
    /// first.
    #[cfg(test)]
    fn keys(&self) -> Vec<Box<str>> {
        let state = self.lock();
        state
            .entries
            .values()
            .map(|entry| entry.key.clone())
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Replayed {
    /// Counts the calls of `keys` that `answers` (one each, in order) say
    /// ran, telling `answered` of each; how many ran.
    fn count(
        &mut self,
        keys: &[Box<str>],
        answers: &[RedisResult<Value>],
        answered: &mut impl FnMut(&str),
    ) -> usize {
        let mut ran = 0;
        for (key, answer) in keys.iter().zip(answers) {
            if let Ok(value) = answer {
                ran += 1;
                self.freed += usize::from(matches!(value, Value::Int(1)));
                answered(key);
            }
        }
        self.sent += ran;
        ran
    }
}

impl State {
    /// Drops the entries whose lease has run out by `now`: the first ones.
    fn expire(&mut self, now: Instant) {
        while self
            .entries
            .first_key_value()
            .is_some_and(|((until, _), _)| *until <= now)
        {
            self.entries.pop_first();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn release(key: &str) -> Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg("0123456789abcdef0123456789abcdef01234567")
            .arg(1)
            .arg(key)
            .arg("owner");
        cmd
    }

    static SCRIPT: std::sync::LazyLock<Script> =
        std::sync::LazyLock::new(|| Script::new("return 1"));

    /// How many entries are live at `now`.
    fn live_at(log: &ReplayLog, now: Instant) -> usize {
        let mut state = log.lock();
        state.expire(now);
        state.entries.len()
    }

    #[test]
    fn entries_go_after_their_lease() {
        let log = ReplayLog::new();
        let start = Instant::now();
        let at = |s| start + Duration::from_secs(s);
        let lease = |sent, lease| (at(sent), at(sent + lease));
        log.record_at("a", release("a"), &SCRIPT, lease(0, 30));
        log.record_at("b", release("b"), &SCRIPT, lease(29, 30));
        // Sent later with a shorter lease: runs out first.
        log.record_at("s", release("s"), &SCRIPT, lease(29, 1));
        assert_eq!(log.len(), 3);
        log.record_at("c", release("c"), &SCRIPT, lease(31, 30));
        let keys = log.keys();
        assert_eq!(keys.iter().map(|k| &**k).collect::<Vec<_>>(), ["b", "c"]);
        let (pipelines, _) = log.pipelines(|key| (key != "b").then_some(0), at(32));
        let keys: Vec<&str> = pipelines.iter().flat_map(|p| &p.2).map(|k| &**k).collect();
        assert_eq!(keys, ["c"]);
    }

    #[test]
    fn a_long_lease_keeps_only_itself() {
        let log = ReplayLog::new();
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        log.record_at("long", release("long"), &SCRIPT, (at(0), at(60_000)));
        for i in 0..1_000 {
            let key = format!("short:{i}");
            log.record_at(&key, release(&key), &SCRIPT, (at(i), at(i + 1_000)));
        }
        assert_eq!(
            live_at(&log, at(2_000)),
            1,
            "the short releases ran out behind the long one"
        );
        assert_eq!(log.keys().first().map(|k| &**k), Some("long"));
        assert_eq!(live_at(&log, at(60_000)), 0);
        // With the real clock: entries whose lease has run out leave the
        // log empty.
        let now = Instant::now();
        log.record_at("gone", release("gone"), &SCRIPT, (now, now));
        assert!(log.is_empty());
    }

    #[test]
    fn past_the_cap_the_least_lease_left_goes_and_is_counted() {
        let log = ReplayLog::new();
        let now = Instant::now();
        let ends = |secs| (now, now + Duration::from_secs(secs));
        log.record_at("long", release("long"), &SCRIPT, ends(600));
        for i in 0..MAX_ENTRIES + 1 {
            log.record_at(&i.to_string(), release("k"), &SCRIPT, ends(30));
        }
        // One that ends before every entry kept goes at once.
        log.record_at("soonest", release("k"), &SCRIPT, ends(1));
        assert_eq!(log.len(), MAX_ENTRIES);
        let keys = log.keys();
        assert_eq!(keys.first().map(|k| &**k), Some("2"), "0 and 1 dropped");
        assert_eq!(keys.last().map(|k| &**k), Some("long"), "the long one kept");
        assert!(!keys.iter().any(|k| &**k == "soonest"));
        let (pipelines, dropped) = log.pipelines(|_| Some(0), now);
        assert_eq!(dropped, 3);
        assert_eq!(pipelines.len(), MAX_ENTRIES.div_ceil(CHUNK));
        let (_, first, keys, scripts) = &pipelines[0];
        assert_eq!((first.len(), keys.len(), scripts.len()), (CHUNK, CHUNK, 1));
        assert_eq!(log.pipelines(|_| Some(0), now).1, 0, "counted once");
    }

    #[tokio::test]
    async fn a_replay_names_each_release_the_master_ran() {
        let log = ReplayLog::new();
        let now = Instant::now();
        let ends = (now, now + Duration::from_secs(30));
        for key in ["freed", "not-held", "refused", "other-group"] {
            log.record_at(key, release(key), &SCRIPT, ends);
        }
        // The master frees the first, finds nothing for the second and
        // refuses the third (NOSCRIPT, say): that one may go again.
        let answers = || {
            vec![
                Ok(Value::Int(1)),
                Ok(Value::Int(-1)),
                Err(RedisError::from((redis::ErrorKind::Io, "refused"))),
            ]
        };
        let group = |key: &str| (key != "other-group").then_some(0);
        let mut answered = Vec::new();
        let replayed = log
            .replay(
                group,
                |_, _, _| async move { Ok(answers()) },
                |key| answered.push(key.to_owned()),
            )
            .await;
        assert_eq!(answered, ["freed", "not-held"]);
        let sent = Replayed {
            sent: 2,
            freed: 1,
            unsent: 1,
            unsent_in: BTreeSet::from([0]),
        };
        assert_eq!(replayed, sent);
        let failed = |_, _, _| async { Err(RedisError::from((redis::ErrorKind::Io, "down"))) };
        let mut answered = 0;
        let replayed = log.replay(group, failed, |_| answered += 1).await;
        assert_eq!((replayed.unsent, answered), (3, 0));
        assert_eq!(replayed.unsent_in, BTreeSet::from([0]));
    }

    #[tokio::test]
    async fn a_replay_names_the_groups_whose_releases_went_unsent() {
        let log = ReplayLog::new();
        let now = Instant::now();
        let ends = (now, now + Duration::from_secs(30));
        for key in ["a:1", "a:2", "b:1", "c:1"] {
            log.record_at(key, release(key), &SCRIPT, ends);
        }
        // Group 1 ("a") is answered, group 2 ("b") fails as a whole,
        // group 3 ("c") is left out.
        let group = |key: &str| match &key[..1] {
            "a" => Some(1),
            "b" => Some(2),
            _ => None,
        };
        let run = |group: u16, pipeline: Pipeline, _| async move {
            match group {
                1 => Ok(vec![Ok(Value::Int(1)); pipeline.len()]),
                _ => Err(RedisError::from((redis::ErrorKind::Io, "frozen"))),
            }
        };
        let replayed = log.replay(group, run, |_| {}).await;
        let expected = Replayed {
            sent: 2,
            freed: 2,
            unsent: 1,
            unsent_in: BTreeSet::from([2]),
        };
        assert_eq!(replayed, expected);
    }

    #[test]
    fn an_entry_is_small() {
        // Inline; the command's buffers and the key add about 350 bytes.
        assert!(
            std::mem::size_of::<(Until, Entry)>() <= 160,
            "{}",
            std::mem::size_of::<(Until, Entry)>()
        );
    }
}
