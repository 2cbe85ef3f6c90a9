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
use redis::{Cmd, ConnectionAddr, ConnectionInfo, RedisError, Script, Value};
use tokio::runtime::Handle;

use super::slots::{node_client, read_through, slot_of, SlotMap};
use crate::io::polled_on;
use crate::replica_sync::ReplicaSync;
use crate::route::replicas::Replicated;

/// The masters' synced pools and where each slot's master is.
pub(crate) struct MasterPools {
    sync: ReplicaSync,
    /// A seed's connection settings (credentials, TLS), used for every
    /// master with the master's address.
    base: ConnectionInfo,
    /// The client's connect and command timeouts.
    timeouts: (Duration, Duration),
    /// The first seed's host, for a master listed without one.
    seed_host: String,
    /// Each slot range's master, as last read.
    slots: Mutex<SlotMap>,
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
        let seed_host = match base.addr() {
            ConnectionAddr::Tcp(host, _) | ConnectionAddr::TcpTls { host, .. } => host.clone(),
            _ => String::new(),
        };
        MasterPools {
            sync,
            base,
            seed_host,
            timeouts,
            slots: Mutex::new(SlotMap::default()),
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
    /// more, to the master it names. All of it, reading the slot map
    /// included, ends within the command timeout plus the replicas'
    /// timeout.
    pub(crate) async fn run(
        &self,
        home: &Handle,
        commands: &ClusterConnection,
        routed: (&'static Script, &str),
        (cmd, undo): (Cmd, Option<Cmd>),
    ) -> Result<(Value, usize), RedisError> {
        let bound = self.timeouts.1.saturating_add(self.sync.timeout);
        let run = self.run_unbounded(home, commands, routed, cmd, undo);
        match polled_on(home, tokio::time::timeout(bound, run)).await {
            Ok(answer) => answer,
            Err(_) => Err(RedisError::from((
                redis::ErrorKind::Io,
                "no replica-synced answer within the command timeout and the replicas' timeout",
            ))),
        }
    }

    /// [`run`](Self::run), without the bound.
    async fn run_unbounded(
        &self,
        home: &Handle,
        commands: &ClusterConnection,
        (script, key): (&'static Script, &str),
        cmd: Cmd,
        undo: Option<Cmd>,
    ) -> Result<(Value, usize), RedisError> {
        let slot = slot_of(key.as_bytes());
        let known = match self.stale.swap(false, Ordering::Relaxed) {
            true => None,
            false => self.master_of(slot),
        };
        let master = match known {
            Some(master) => master,
            None => {
                // Calls that meet a map not read yet read it each.
                if let Err(error) = self.read_slots(home, commands, slot).await {
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
        slots.master_of(slot).cloned()
    }

    /// Records that `master` serves `slot` now.
    fn set_master(&self, slot: u16, master: Arc<str>) {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        slots.set(slot, master);
    }

    /// Reads the slot map by `CLUSTER SLOTS`.
    async fn read_slots(
        &self,
        home: &Handle,
        commands: &ClusterConnection,
        slot: u16,
    ) -> Result<(), RedisError> {
        let map = polled_on(home, read_through(commands, slot, &self.seed_host)).await?;
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
