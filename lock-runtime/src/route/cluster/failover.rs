//! Releases sent again after a slot's master changed on Redis Cluster.
//!
//! A release that reached a master in the moments before a failover may
//! never reach the replica promoted in its place (see [`crate::route::replay`]).
//! While this client has releases within their lease, a task reads the slot
//! map (`CLUSTER SLOTS`, through the client's cluster connection) every
//! [`EVERY`] and compares it with the last one read; the releases of keys
//! whose slot has another master now are sent again there. Reading the map
//! costs one `CLUSTER SLOTS` a second per client, and only while it has
//! released within a lease; with nothing to send again, nothing is read.
//!
//! A replay loads its scripts on the master its pipeline goes to, and only
//! there: a frozen or dead node elsewhere does not fail it. The releases of
//! a slot that a replay did not send (the new master did not answer in
//! time, or not yet as a master) go again at the next read, though the map
//! did not change again, up to [`TRIES`] replays in all; past that their
//! keys stay taken until their lease ends, as without the log. Sending a
//! release twice changes nothing (see [`crate::route::replay`]).
//!
//! A release that was not answered at all (the cluster was down for a
//! moment while a master failed over: `CLUSTERDOWN`, `TRYAGAIN`, a dropped
//! connection) is owed the same way, though its slot's master may not
//! change: the route marks its slot ([`Unsent`]), and its releases go again
//! at the next read, up to [`TRIES`] replays. Without that, its hold would
//! stay taken until its lease ends (30 s by default), and this client's own
//! calls on the key would time out waiting for a hold it already gave up.
//!
//! A release sent again publishes its notice on the new master, with this
//! client's id, which this client skips (its releases woke its waiters when
//! they were first sent). But the waiters of this client that tried since
//! then found the key still held there: so the line of each key whose
//! release the new master ran is woken, and its head tries again. Only
//! those keys' lines: a waiter on another key has nothing new to find.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::cluster_async::ClusterConnection;
use redis::{
    AsyncConnectionConfig, ConnectionInfo, ErrorKind, Pipeline, PushInfo, RedisError, RedisResult,
    Script, Value,
};

use super::slots::{node_client, read_through, slot_of, SlotMap};
use crate::route::node::missed_release;
use crate::route::replay::ReplayLog;

/// How often the slot map is read while there are releases to send again.
pub(crate) const EVERY: Duration = Duration::from_secs(1);

/// How far apart the slots whose masters are asked in turn are: a third
/// of the slots, and not a divisor of their count, so every master is
/// asked in turn on clusters of 3 masters or fewer, and most on larger.
const ASK_STEP: u16 = 5461;

/// How many slots Redis Cluster has.
const SLOTS: u16 = 16384;

/// The longest one read of the map may take.
const READ_WITHIN: Duration = Duration::from_secs(2);

/// How many replays, one a read, the releases of a slot get in all while
/// they go unsent: 30 s or more (a read is a second apart or more), the
/// default lease.
const TRIES: u32 = 30;

/// The client's push handler, which wakes the lines of the keys whose
/// releases were sent again.
pub(crate) type OnPush = Arc<dyn Fn(PushInfo) + Send + Sync>;

/// The slot map the follower read last, for the errors of calls: they
/// name the master of a key's slot when redis-rs does not say which node
/// failed. Read at start, then every [`EVERY`] while there are releases
/// to send again.
#[derive(Default)]
pub(crate) struct LastMap(Mutex<Option<Arc<SlotMap>>>);

impl LastMap {
    /// The master of `slot` in the map read last, if any.
    pub(crate) fn master_of(&self, slot: u16) -> Option<Arc<str>> {
        let map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        map.as_ref()?.master_of(slot).cloned()
    }

    fn set(&self, map: Arc<SlotMap>) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(map);
    }
}

/// The slots of releases that failed unanswered since the follower's last
/// read: their releases go again at its next read.
#[derive(Default)]
pub(crate) struct Unsent(Mutex<BTreeSet<u16>>);

impl Unsent {
    /// A release of a key of `slot` failed unanswered.
    pub(crate) fn mark(&self, slot: u16) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(slot);
    }

    /// The slots marked since the last call.
    fn take(&self) -> BTreeSet<u16> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// What the follower shares with the route: the releases kept (while the
/// client lives), the map read last, and the slots of releases that failed
/// unanswered.
pub(crate) struct Shared {
    pub log: Weak<ReplayLog>,
    pub last: Arc<LastMap>,
    pub unsent: Arc<Unsent>,
    /// Where the releases go again.
    pub masters: Masters,
}

/// Follows the slots' masters while the client's log lives, keeping the
/// map read last; `seed_host` stands for a master listed without a host.
pub(crate) async fn follow_masters(
    shared: Shared,
    commands: ClusterConnection,
    seed_host: String,
    on_push: OnPush,
) {
    let Shared {
        log,
        last,
        unsent,
        masters,
    } = shared;
    let mut followed = Followed::default();
    let mut asked: u16 = 0;
    let mut ticks = tokio::time::interval(EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(log) = log.upgrade() else { return };
        if followed.started() && log.is_empty() {
            followed.nothing_owed();
            unsent.take();
            continue;
        }
        followed.owe(unsent.take());
        // A different master each time (as the connection knows them): a
        // dead one costs one tick.
        asked = (asked + ASK_STEP) % SLOTS;
        let read = read_through(&commands, asked, &seed_host);
        let Ok(Ok(now)) = tokio::time::timeout(READ_WITHIN, read).await else {
            continue;
        };
        if now.is_empty() {
            continue;
        }
        let now = Arc::new(now);
        last.set(now.clone());
        let Some(moved) = followed.read(now.clone()) else {
            continue;
        };
        let mut woken: HashSet<Box<str>> = HashSet::new();
        let wake = |key: &str| {
            if woken.insert(key.into()) {
                on_push(missed_release(key));
            }
        };
        let replayed = log
            .replay(
                |key| moved.slot(key),
                |slot, pipeline, scripts| masters.send(now.master_of(slot), pipeline, scripts),
                wake,
            )
            .await;
        let given_up = followed.replayed(&replayed.unsent_in);
        if replayed.sent + replayed.unsent > 0 {
            tracing::info!(
                sent = replayed.sent,
                freed = replayed.freed,
                unsent = replayed.unsent,
                unsent_slots = replayed.unsent_in.len(),
                "releases of the last lease sent again to new masters"
            );
        }
        if given_up > 0 {
            tracing::warn!(
                slots = given_up,
                tries = TRIES,
                "releases could not be sent again to their slots' new masters; their keys \
                 stay taken there until their lease ends"
            );
        }
    }
}

/// What the follower keeps from one read to the next.
#[derive(Default)]
struct Followed {
    /// The map read last.
    known: Option<Arc<SlotMap>>,
    /// The slots whose releases the last replay did not send, or whose
    /// release failed unanswered since, each with the replays that did not
    /// send them so far.
    owed: HashMap<u16, u32>,
}

impl Followed {
    /// Whether a map was read yet.
    fn started(&self) -> bool {
        self.known.is_some()
    }

    /// Takes `now`, the map just read: the slots whose releases go again;
    /// none at the first read, which has nothing to compare with.
    fn read(&mut self, now: Arc<SlotMap>) -> Option<Moved<'_>> {
        let before = self.known.replace(now.clone())?;
        Some(Moved {
            before,
            now,
            owed: &self.owed,
        })
    }

    /// After a replay that did not send the releases of the slots
    /// `unsent`: those go again at the next read, up to [`TRIES`] replays
    /// each; no other slot is owed. How many slots were given up.
    fn replayed(&mut self, unsent: &BTreeSet<u16>) -> usize {
        let mut given_up = 0;
        let owed = unsent
            .iter()
            .filter_map(|&slot| {
                let tries = self.owed.get(&slot).copied().unwrap_or(0) + 1;
                let left = tries < TRIES;
                given_up += usize::from(!left);
                left.then_some((slot, tries))
            })
            .collect();
        self.owed = owed;
        given_up
    }

    /// The releases of the slots `unsent` failed unanswered: they go again
    /// at the next read (a slot owed already keeps its count of replays).
    fn owe(&mut self, unsent: BTreeSet<u16>) {
        for slot in unsent {
            self.owed.entry(slot).or_insert(0);
        }
    }

    /// The log keeps nothing: no release is owed.
    fn nothing_owed(&mut self) {
        self.owed.clear();
    }
}

/// The slots whose releases go again at one read.
struct Moved<'a> {
    before: Arc<SlotMap>,
    now: Arc<SlotMap>,
    owed: &'a HashMap<u16, u32>,
}

impl Moved<'_> {
    /// The slot of `key`, if its releases go again: its master changed
    /// since the map read before, or a replay did not send them yet.
    fn slot(&self, key: &str) -> Option<u16> {
        let slot = slot_of(key.as_bytes());
        let changed = self.before.master_of(slot) != self.now.master_of(slot);
        (changed || self.owed.contains_key(&slot)).then_some(slot)
    }
}

/// The follower's own connections, one per master it sends releases to
/// (made at first use, dropped when one fails), with the client's
/// credentials, TLS settings and timeouts.
///
/// A replay never goes through the client's cluster connection: there, each
/// release of a pipeline is a request of its own, and when the connection
/// still routes the slot to a master that died, every one of them fails,
/// is retried and asks for the slot map again. A replay of a few thousand
/// releases at once did that, and left the cluster connection refreshing
/// its map for ever, every call of the client timing out (redis-rs 1.8).
/// Here a replay is one pipeline on one connection to the master the map
/// just read names; if that node is dead or no master, the pipeline fails
/// (or its releases answer `MOVED`) once, and goes again at the next read.
pub(crate) struct Masters {
    base: ConnectionInfo,
    config: AsyncConnectionConfig,
    open: Mutex<HashMap<Arc<str>, MultiplexedConnection>>,
}

impl Masters {
    /// No connection yet; `base` gives the credentials and TLS settings,
    /// `connect` and `command` the timeouts.
    pub(crate) fn new(base: ConnectionInfo, (connect, command): (Duration, Duration)) -> Self {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(connect))
            .set_response_timeout(Some(command));
        Masters {
            base,
            config,
            open: Mutex::new(HashMap::new()),
        }
    }

    /// The connection to `master`, made if there is none.
    async fn connection(&self, master: &Arc<str>) -> Result<MultiplexedConnection, RedisError> {
        let known = {
            let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
            open.get(master).cloned()
        };
        if let Some(con) = known {
            return Ok(con);
        }
        let client = node_client(&self.base, master)?;
        let con = client
            .get_multiplexed_async_connection_with_config(&self.config)
            .await?;
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(master.clone(), con.clone());
        Ok(con)
    }

    /// Loads `scripts` on `master`, then sends `pipeline` there as one
    /// pipeline: each command's answer (a release that ran, or its error,
    /// `MOVED` from a node that is no master of the slot).
    async fn send(
        &self,
        master: Option<&Arc<str>>,
        pipeline: Pipeline,
        scripts: Vec<&'static Script>,
    ) -> Result<Vec<RedisResult<Value>>, RedisError> {
        let Some(master) = master else {
            return Err(RedisError::from((
                ErrorKind::ClusterConnectionNotFound,
                "the slot map names no master of the slot",
            )));
        };
        let mut con = self.connection(master).await?;
        let sent = async {
            for script in scripts {
                script.load_async(&mut con).await?;
            }
            pipeline.query_async(&mut con).await
        };
        let answers = sent.await;
        if answers.is_err() {
            self.open
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(master);
        }
        answers
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "lock:order:7";
    const OTHER: &str = "lock:invoice:9";

    /// A map where `master` serves [`KEY`]'s slot and one master, always
    /// the same, serves [`OTHER`]'s.
    fn map(master: &str) -> Arc<SlotMap> {
        let mut map = SlotMap::default();
        map.set(slot_of(KEY.as_bytes()), master.into());
        map.set(slot_of(OTHER.as_bytes()), "10.0.0.3:7002".into());
        Arc::new(map)
    }

    #[test]
    fn releases_a_replay_did_not_send_go_again_at_the_next_read() {
        let slot = slot_of(KEY.as_bytes());
        assert_ne!(slot, slot_of(OTHER.as_bytes()));
        let mut followed = Followed::default();
        assert!(
            followed.read(map("10.0.0.1:7000")).is_none(),
            "nothing before"
        );
        // The key's slot failed over: its releases go, the other's not.
        let moved = followed.read(map("10.0.0.4:7003")).expect("a map before");
        assert_eq!((moved.slot(KEY), moved.slot(OTHER)), (Some(slot), None));
        // The replay did not send them: they go again at the next read,
        // though the map did not change since.
        assert_eq!(followed.replayed(&BTreeSet::from([slot])), 0);
        let moved = followed.read(map("10.0.0.4:7003")).expect("a map before");
        assert_eq!((moved.slot(KEY), moved.slot(OTHER)), (Some(slot), None));
        // Sent: they do not go again.
        assert_eq!(followed.replayed(&BTreeSet::new()), 0);
        let moved = followed.read(map("10.0.0.4:7003")).expect("a map before");
        assert_eq!(moved.slot(KEY), None);
    }

    #[test]
    fn a_release_that_failed_unanswered_goes_again_though_its_master_did_not_change() {
        let slot = slot_of(KEY.as_bytes());
        let mut followed = Followed::default();
        followed.read(map("10.0.0.1:7000"));
        // A release of KEY failed (the cluster was down): its slot is owed.
        followed.owe(BTreeSet::from([slot]));
        let moved = followed.read(map("10.0.0.1:7000")).expect("a map before");
        assert_eq!((moved.slot(KEY), moved.slot(OTHER)), (Some(slot), None));
        // Sent: not again.
        assert_eq!(followed.replayed(&BTreeSet::new()), 0);
        let moved = followed.read(map("10.0.0.1:7000")).expect("a map before");
        assert_eq!(moved.slot(KEY), None);
        // A slot owed already keeps its count of replays.
        followed.owe(BTreeSet::from([slot]));
        followed.replayed(&BTreeSet::from([slot]));
        followed.owe(BTreeSet::from([slot]));
        assert_eq!(followed.owed.get(&slot), Some(&1));
    }

    #[test]
    fn releases_that_keep_going_unsent_are_given_up_after_their_tries() {
        let slot = slot_of(KEY.as_bytes());
        let unsent = BTreeSet::from([slot]);
        let mut followed = Followed::default();
        followed.read(map("10.0.0.1:7000"));
        let moved = followed.read(map("10.0.0.4:7003")).expect("a map before");
        assert_eq!(moved.slot(KEY), Some(slot));
        for tried in 1..TRIES {
            assert_eq!(followed.replayed(&unsent), 0, "after {tried} replays");
            let moved = followed.read(map("10.0.0.4:7003")).expect("a map before");
            assert_eq!(moved.slot(KEY), Some(slot), "after {tried} replays");
        }
        assert_eq!(followed.replayed(&unsent), 1, "given up");
        let moved = followed.read(map("10.0.0.4:7003")).expect("a map before");
        assert_eq!(moved.slot(KEY), None);
        // A later failover of the slot sends them again, with tries anew.
        let moved = followed.read(map("10.0.0.1:7000")).expect("a map before");
        assert_eq!(moved.slot(KEY), Some(slot));
        // With nothing in the log, nothing is owed.
        assert_eq!(followed.replayed(&unsent), 0);
        followed.nothing_owed();
        let moved = followed.read(map("10.0.0.1:7000")).expect("a map before");
        assert_eq!(moved.slot(KEY), None);
    }
}
