//! Replica-synced writes on Redis Cluster (`sync_replicas`): each goes, with
//! its `WAIT`, to the master of its key's slot on a connection of that
//! master's own pool (see [`Replicated`]), so that one master's slow
//! replica delays only the calls on that master, and no call queues behind
//! another.
//!
//! The slot's master comes from `CLUSTER SLOTS`, asked through the client's
//! cluster connection and kept until a synced call meets a redirect
//! (`MOVED`, whose answer names the new master: the call is sent there once
//! more) or a connection error (the map is asked again before the next
//! call).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redis::cluster_async::ClusterConnection;
use redis::{Client, Cmd, ConnectionAddr, ConnectionInfo, RedisError, Script, Value};
use tokio::runtime::Handle;

use super::replicas::Replicated;
use crate::io::polled_on;
use crate::replica_sync::ReplicaSync;

/// The masters' synced pools and where each slot's master is.
pub(crate) struct MasterPools {
    sync: ReplicaSync,
    /// A seed's connection settings (credentials, TLS), used for every
    /// master with the master's address.
    base: ConnectionInfo,
    /// The client's connect and command timeouts.
    timeouts: (Duration, Duration),
    /// Slot ranges (first, last) and their master's `host:port`.
    slots: Mutex<Vec<(u16, u16, Arc<str>)>>,
    /// Set when the map may be out of date: asked again before next use.
    stale: AtomicBool,
    pools: Mutex<HashMap<Arc<str>, Arc<Replicated>>>,
}

impl MasterPools {
    /// No connection yet: each master's pool is made at its first call.
    pub(crate) fn new(
        sync: ReplicaSync,
        base: ConnectionInfo,
        timeouts: (Duration, Duration),
    ) -> Self {
        MasterPools {
            sync,
            base,
            timeouts,
            slots: Mutex::new(Vec::new()),
            stale: AtomicBool::new(true),
            pools: Mutex::new(HashMap::new()),
        }
    }

    /// How many replicas each write waits for.
    pub(crate) fn sync(&self) -> ReplicaSync {
        self.sync
    }

    /// Runs `cmd` (an EVALSHA of `script` on `key`) and `WAIT` on the
    /// slot's master; see [`Replicated::run`]. A redirect sends it once
    /// more, to the master it names.
    pub(crate) async fn run(
        &self,
        home: &Handle,
        commands: &ClusterConnection,
        (script, key): (&'static Script, &str),
        cmd: Cmd,
        undo: Option<Cmd>,
    ) -> Result<(Value, usize), RedisError> {
        let slot = slot_of(key);
        let known = match self.stale.swap(false, Ordering::Relaxed) {
            true => None,
            false => self.master_of(slot),
        };
        let master = match known {
            Some(master) => master,
            None => {
                // Calls that meet a map not read yet read it each.
                if let Err(error) = self.read_slots(home, commands).await {
                    self.stale.store(true, Ordering::Relaxed);
                    return Err(error);
                }
                self.master_of(slot).ok_or_else(|| {
                    RedisError::from((redis::ErrorKind::Io, "no master serves the lock's slot"))
                })?
            }
        };
        let answer = self
            .pool(&master)?
            .run(home, script, cmd.clone(), undo.clone())
            .await;
        match answer {
            Err(error) if error.redirect_node().is_some() => {
                let Some((to, _)) = error.redirect_node() else {
                    return Err(error);
                };
                let to: Arc<str> = to.into();
                self.set_master(slot, to.clone());
                self.stale.store(true, Ordering::Relaxed);
                self.pool(&to)?.run(home, script, cmd, undo).await
            }
            Err(error) => {
                if error.is_io_error() || error.is_connection_dropped() || error.is_timeout() {
                    self.stale.store(true, Ordering::Relaxed);
                }
                Err(error)
            }
            answer => answer,
        }
    }

    /// The master of `slot`, as last read.
    fn master_of(&self, slot: u16) -> Option<Arc<str>> {
        let slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        slots
            .iter()
            .find(|(first, last, _)| (*first..=*last).contains(&slot))
            .map(|(_, _, master)| master.clone())
    }

    /// Records that `master` serves `slot` now.
    fn set_master(&self, slot: u16, master: Arc<str>) {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        slots.retain(|(first, last, _)| !(*first..=*last).contains(&slot));
        slots.push((slot, slot, master));
    }

    /// Reads the slot map by `CLUSTER SLOTS`.
    async fn read_slots(
        &self,
        home: &Handle,
        commands: &ClusterConnection,
    ) -> Result<(), RedisError> {
        let mut con = commands.clone();
        let answer: Value = polled_on(
            home,
            redis::cmd("CLUSTER").arg("SLOTS").query_async(&mut con),
        )
        .await?;
        let map = slot_masters(answer)?;
        *self.slots.lock().unwrap_or_else(PoisonError::into_inner) = map;
        Ok(())
    }

    /// The synced pool of `master` (`host:port`), made at first use.
    fn pool(&self, master: &Arc<str>) -> Result<Arc<Replicated>, RedisError> {
        let mut pools = self.pools.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(pool) = pools.get(master) {
            return Ok(pool.clone());
        }
        let client = node_client(&self.base, master)?;
        let pool = Arc::new(Replicated::new(self.sync, client, self.timeouts));
        pools.insert(master.clone(), pool.clone());
        Ok(pool)
    }
}

/// The hash slot of `key`: CRC16 (XMODEM) of its hash tag (the part
/// between the first `{` and the next `}`, when not empty) or of the whole
/// key, modulo 16384.
pub(crate) fn slot_of(key: &str) -> u16 {
    let key = key.as_bytes();
    let tag = key.iter().position(|b| *b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let close = rest.iter().position(|b| *b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    crc16::State::<crc16::XMODEM>::calculate(tag.unwrap_or(key)) % 16384
}

/// A client for the cluster node `node` (`host:port`) with `base`'s
/// credentials and TLS settings.
pub(crate) fn node_client(base: &ConnectionInfo, node: &str) -> Result<Client, RedisError> {
    let (host, port) = node
        .rsplit_once(':')
        .and_then(|(h, p)| Some((h.to_owned(), p.parse().ok()?)))
        .ok_or_else(|| {
            RedisError::from((
                redis::ErrorKind::Parse,
                "a cluster node's address has no port",
                node.to_owned(),
            ))
        })?;
    let addr = match base.addr() {
        ConnectionAddr::TcpTls {
            insecure,
            tls_params,
            ..
        } => ConnectionAddr::TcpTls {
            host,
            port,
            insecure: *insecure,
            tls_params: tls_params.clone(),
        },
        _ => ConnectionAddr::Tcp(host, port),
    };
    Client::open(base.clone().set_addr(addr))
}

/// `CLUSTER SLOTS`' answer as slot ranges and their master's `host:port`.
pub(crate) fn slot_masters(answer: Value) -> Result<Vec<(u16, u16, Arc<str>)>, RedisError> {
    let ranges: Vec<Vec<Value>> = redis::from_redis_value(answer)?;
    let mut map = Vec::with_capacity(ranges.len());
    for range in ranges {
        let [first, last, master, ..] = range.as_slice() else {
            continue;
        };
        let (first, last): (u16, u16) = (
            redis::from_redis_value(first.clone())?,
            redis::from_redis_value(last.clone())?,
        );
        let master: Vec<Value> = redis::from_redis_value(master.clone())?;
        let [host, port, ..] = master.as_slice() else {
            continue;
        };
        let host: String = redis::from_redis_value(host.clone())?;
        let port: u16 = redis::from_redis_value(port.clone())?;
        map.push((first, last, format!("{host}:{port}").into()));
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use redis::cluster_routing::Slot;

    #[test]
    fn slots_are_redis_rs_slots() {
        let keys = [
            "lock:a",
            "lock:{user1}:x",
            "{}x",
            "a{}{b}",
            "{b}",
            "x{",
            "}y{z}",
            "",
        ];
        for key in keys {
            assert_eq!(
                Slot::new(super::slot_of(key)),
                Some(Slot::for_key(key)),
                "{key}"
            );
        }
        for n in 0..2000 {
            let key = format!("lock:order:{n}");
            assert_eq!(Slot::new(super::slot_of(&key)), Some(Slot::for_key(&key)));
        }
    }
}
