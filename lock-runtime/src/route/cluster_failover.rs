//! Releases sent again after a slot's master changed on Redis Cluster.
//!
//! A release that reached a master in the moments before a failover may
//! never reach the replica promoted in its place (see [`super::replay`]).
//! While this client has releases within their lease, a task reads the slot
//! map (`CLUSTER SLOTS`, through the client's cluster connection) every
//! [`EVERY`] and compares it with the last one read; the releases of keys
//! whose slot has another master now are sent again there. Reading the map
//! costs one `CLUSTER SLOTS` a second per client, and only while it has
//! released within a lease; with nothing to send again, nothing is read.
//!
//! A release sent again publishes its notice on the new master, with this
//! client's id, which this client skips (its releases woke its waiters when
//! they were first sent). But the waiters of this client that tried since
//! then found the key still held there: so the line of each key whose
//! release the new master ran is woken, and its head tries again. Only
//! those keys' lines: a waiter on another key has nothing new to find.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use futures_util::future::join_all;
use redis::cluster_async::ClusterConnection;
use redis::{Pipeline, PushInfo, RedisError, RedisResult, Script, Value};

use super::node::missed_release;
use super::replay::ReplayLog;
use super::slots::{read_through, slot_of, SlotMap};

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

/// Follows the slots' masters while `log` lives (the client's), keeping
/// the map read last in `last`; `seed_host` stands for a master listed
/// without a host.
pub(crate) async fn follow_masters(
    (log, last): (Weak<ReplayLog>, Arc<LastMap>),
    commands: ClusterConnection,
    seed_host: String,
    on_push: OnPush,
) {
    let mut known: Option<Arc<SlotMap>> = None;
    let mut asked: u16 = 0;
    let mut ticks = tokio::time::interval(EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(log) = log.upgrade() else { return };
        if known.is_some() && log.is_empty() {
            continue;
        }
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
        let Some(before) = known.replace(now.clone()) else {
            continue;
        };
        let moved = |key: &str| {
            let slot = slot_of(key.as_bytes());
            (before.master_of(slot) != now.master_of(slot)).then_some(slot)
        };
        let mut woken: HashSet<Box<str>> = HashSet::new();
        let wake = |key: &str| {
            if woken.insert(key.into()) {
                on_push(missed_release(key));
            }
        };
        let replayed = log
            .replay(
                moved,
                |pipeline, scripts| send(&commands, pipeline, scripts),
                wake,
            )
            .await;
        if replayed.sent + replayed.unsent > 0 {
            tracing::info!(
                ?replayed,
                "releases of the last lease sent again to new masters"
            );
        }
    }
}

/// Loads `scripts` on every master, then sends each command of `pipeline`
/// (all of one slot) on the cluster connection, at once: each one's answer.
async fn send(
    commands: &ClusterConnection,
    pipeline: Pipeline,
    scripts: Vec<&'static Script>,
) -> Result<Vec<RedisResult<Value>>, RedisError> {
    let mut con = commands.clone();
    for script in scripts {
        script.load_async(&mut con).await?;
    }
    let calls = pipeline.cmd_iter().map(|cmd| {
        let mut con = commands.clone();
        async move { cmd.query_async::<Value>(&mut con).await }
    });
    Ok(join_all(calls).await)
}
