//! The replicated deployments of the `cluster` and `sentinel` modes: a
//! Redis Cluster of 3 masters with a replica each, or a master, a replica
//! and three sentinels. Who is master now, and when the deployment is whole
//! again (every master has a replica that is online). Every wait here is
//! bounded; every process is a [`Server`], stopped by pid.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_testkit::cluster::{create_cluster, NODE_TIMEOUT_MS};
use lock_testkit::replication::sentinel_monitor;
use lock_testkit::{wait_until, Server, ServerOptions};

/// The master name the sentinels monitor.
pub const MASTER_NAME: &str = "chaos";

/// A server shared by the fault task and the run (a restart replaces its
/// process).
pub type Shared = Arc<Mutex<Server>>;

/// Which replicated deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    /// Redis Cluster: 3 masters, a replica each.
    Cluster,
    /// Sentinel: 1 master, 1 replica, 3 sentinels.
    Sentinel,
}

/// What a data node is now, from its `INFO replication`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A master, with this many replicas online.
    Master(usize),
    /// A replica of the master on this port; whether its link is up.
    Replica(u16, bool),
    /// No answer (down or frozen).
    Unknown,
}

/// The servers of a replicated deployment.
#[derive(Debug)]
pub struct Replicated {
    /// Which deployment.
    pub topology: Topology,
    /// The data nodes (`node0`...): masters and replicas.
    pub data: Vec<Shared>,
    /// The sentinels (empty for a cluster).
    pub sentinels: Vec<Shared>,
}

/// How long the deployment may take to form, or to be whole again.
pub const SETTLE_LIMIT: Duration = Duration::from_secs(20);

fn start(dir: &Path, name: &str, options: ServerOptions) -> std::io::Result<Shared> {
    let server = options.dir(dir.join(name)).start()?;
    Ok(Arc::new(Mutex::new(server)))
}

/// The arguments of a data node (beside a cluster node's own, which
/// [`ServerOptions::cluster_node`] gives): no delay before a diskless sync,
/// and for a cluster node, any replica may be promoted however long its
/// link was down.
pub fn data_args(topology: Topology, replica_of: Option<u16>) -> Vec<String> {
    let mut args = vec!["--repl-diskless-sync-delay".to_owned(), "0".to_owned()];
    if topology == Topology::Cluster {
        args.extend([
            "--cluster-replica-validity-factor".to_owned(),
            "0".to_owned(),
        ]);
    }
    if let Some(port) = replica_of {
        args.extend(["--replicaof".to_owned(), "127.0.0.1".to_owned()]);
        args.push(port.to_string());
    }
    args
}

/// `INFO <section>` of a server, or empty when it does not answer.
pub fn info(server: &Shared, section: &str) -> String {
    let server = server.lock().expect("server");
    server
        .admin(|con| redis::cmd("INFO").arg(section).query::<String>(con))
        .unwrap_or_default()
}

/// The role of a data node, from its `INFO replication`.
pub fn role(server: &Shared) -> Role {
    let text = info(server, "replication");
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().to_owned())
    };
    match field("role:").as_deref() {
        Some("master") => Role::Master(text.matches("state=online").count()),
        Some("slave") => {
            let port = field("master_port:")
                .and_then(|p| p.parse().ok())
                .unwrap_or(0);
            Role::Replica(port, field("master_link_status:").as_deref() == Some("up"))
        }
        _ => Role::Unknown,
    }
}

impl Replicated {
    /// Starts a 6-node cluster (3 masters, a replica each) in `dir` and
    /// waits until it is whole.
    pub fn cluster(dir: &Path) -> std::io::Result<Replicated> {
        let mut data = Vec::new();
        for i in 0..6 {
            let options = ServerOptions::tcp()
                .cluster_node(NODE_TIMEOUT_MS)
                .args(data_args(Topology::Cluster, None));
            data.push(start(dir, &format!("node{i}"), options)?);
        }
        let rep = Replicated {
            topology: Topology::Cluster,
            data,
            sentinels: Vec::new(),
        };
        create_cluster(&rep.ports(), 1)?;
        if !rep.wait_settled(SETTLE_LIMIT) {
            return Err(std::io::Error::other("the cluster did not form"));
        }
        Ok(rep)
    }

    /// Starts a master, a replica and three sentinels (quorum 2,
    /// down-after 500 ms, failover timeout 2 s) in `dir`, and waits until
    /// the replica is online and every sentinel knows the replica and the
    /// other sentinels.
    pub fn sentinel(dir: &Path) -> std::io::Result<Replicated> {
        let args = data_args(Topology::Sentinel, None);
        let master = start(dir, "node0", ServerOptions::tcp().args(args))?;
        let port = master.lock().expect("server").port();
        let args = data_args(Topology::Sentinel, Some(port));
        let replica = start(dir, "node1", ServerOptions::tcp().args(args))?;
        let conf = sentinel_monitor(MASTER_NAME, port, 2);
        let mut sentinels = Vec::new();
        for i in 0..3 {
            let options = ServerOptions::tcp().sentinel().config(&conf);
            sentinels.push(start(dir, &format!("sentinel{i}"), options)?);
        }
        let rep = Replicated {
            topology: Topology::Sentinel,
            data: vec![master, replica],
            sentinels,
        };
        let known = |s: &Shared| {
            let s = s.lock().expect("server");
            let fields: Vec<String> = s
                .admin(|con| {
                    redis::cmd("SENTINEL")
                        .arg("MASTER")
                        .arg(MASTER_NAME)
                        .query(con)
                })
                .unwrap_or_default();
            let get = |name: &str| {
                let at = fields.iter().position(|f| f == name)?;
                fields.get(at + 1).cloned()
            };
            get("num-slaves").as_deref() == Some("1")
                && get("num-other-sentinels").as_deref() == Some("2")
        };
        let ready = rep.wait_settled(SETTLE_LIMIT)
            && rep
                .sentinels
                .iter()
                .all(|s| wait_until(SETTLE_LIMIT, || known(s)));
        if !ready {
            return Err(std::io::Error::other("the sentinel group did not form"));
        }
        Ok(rep)
    }
}

impl Replicated {
    /// The data nodes' ports, in order.
    pub fn ports(&self) -> Vec<u16> {
        self.data
            .iter()
            .map(|s| s.lock().expect("server").port())
            .collect()
    }

    /// The index of the data node on `port`.
    pub fn node_on(&self, port: u16) -> Option<usize> {
        self.ports().iter().position(|&p| p == port)
    }

    /// The URLs the workers' clients are given: every cluster node, or
    /// every sentinel.
    pub fn worker_urls(&self) -> Vec<String> {
        let servers = match self.topology {
            Topology::Cluster => &self.data,
            Topology::Sentinel => &self.sentinels,
        };
        servers
            .iter()
            .map(|s| s.lock().expect("server").url())
            .collect()
    }

    /// The port of the master the sentinels name now (the first that
    /// answers).
    pub fn named_master(&self) -> Option<u16> {
        self.sentinels.iter().find_map(|s| {
            let s = s.lock().expect("server");
            let addr: (String, u16) = s
                .admin(|con| {
                    redis::cmd("SENTINEL")
                        .arg("GET-MASTER-ADDR-BY-NAME")
                        .arg(MASTER_NAME)
                        .query(con)
                })
                .ok()?;
            Some(addr.1)
        })
    }

    /// The data nodes that are masters now (for Sentinel: the master the
    /// sentinels name, if it says it is one).
    pub fn masters(&self) -> Vec<usize> {
        if self.topology == Topology::Sentinel {
            let named = self.named_master().and_then(|p| self.node_on(p));
            return named
                .filter(|&i| matches!(role(&self.data[i]), Role::Master(_)))
                .into_iter()
                .collect();
        }
        (0..self.data.len())
            .filter(|&i| matches!(role(&self.data[i]), Role::Master(_)))
            .collect()
    }

    /// The data nodes that are replicas now.
    pub fn replicas(&self) -> Vec<usize> {
        (0..self.data.len())
            .filter(|&i| matches!(role(&self.data[i]), Role::Replica(..)))
            .collect()
    }

    /// The replica of the master `i`, if one says so.
    pub fn replica_of(&self, i: usize) -> Option<usize> {
        let port = self.data[i].lock().expect("server").port();
        (0..self.data.len())
            .find(|&r| matches!(role(&self.data[r]), Role::Replica(p, _) if p == port))
    }

    /// Whether the deployment is whole: as many masters as shards, each
    /// with a replica online and every replica's link up (and for a
    /// cluster, every node says `cluster_state:ok`; for Sentinel, the
    /// master is the one the sentinels name).
    pub fn settled(&self) -> bool {
        let roles: Vec<Role> = self.data.iter().map(role).collect();
        let masters = roles
            .iter()
            .filter(|r| matches!(r, Role::Master(1..)))
            .count();
        let linked = roles
            .iter()
            .filter(|r| matches!(r, Role::Replica(_, true)))
            .count();
        let shards = self.data.len() / 2;
        if masters != shards || linked != shards {
            return false;
        }
        match self.topology {
            Topology::Cluster => self.data.iter().all(|s| {
                let s = s.lock().expect("server");
                s.admin(|con| redis::cmd("CLUSTER").arg("INFO").query::<String>(con))
                    .is_ok_and(|i| i.contains("cluster_state:ok"))
            }),
            Topology::Sentinel => self
                .named_master()
                .and_then(|p| self.node_on(p))
                .is_some_and(|i| matches!(roles[i], Role::Master(1..))),
        }
    }

    /// Waits (bounded) until the deployment is whole; whether it is.
    pub fn wait_settled(&self, limit: Duration) -> bool {
        wait_until(limit, || self.settled())
    }
}

/// CRC16 (XMODEM), as Redis Cluster hashes keys.
fn crc16(data: &[u8]) -> u16 {
    let mut crc = 0u16;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// A key prefix under which the workers' 4 keys (`k0`..`k3`) fall in the
/// slot ranges of all 3 masters as `redis-cli --cluster create` makes them
/// (0–5460, 5461–10922, 10923–16383), so that a fault on any master
/// touches some key.
pub fn cluster_prefix() -> String {
    for n in 0..1000 {
        let prefix = format!("lock:cluster{n}:");
        let mut ranges = [false; 3];
        for k in 0..4 {
            let slot = crc16(format!("{prefix}k{k}").as_bytes()) % 16384;
            ranges[usize::from(slot / 5461).min(2)] = true;
        }
        if ranges.iter().all(|&r| r) {
            return prefix;
        }
    }
    "lock:cluster:".to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_as_redis() {
        // CLUSTER KEYSLOT foo = 12182, bar = 5061.
        assert_eq!(crc16(b"foo") % 16384, 12182);
        assert_eq!(crc16(b"bar") % 16384, 5061);
        assert!(cluster_prefix().starts_with("lock:cluster"));
    }
}
