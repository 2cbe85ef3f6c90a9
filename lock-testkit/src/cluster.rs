//! A Redis Cluster of our own: redis-server processes on loopback ports (3
//! masters, and a replica each unless asked otherwise), made with
//! `redis-cli --cluster create`, stopped by pid.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::binaries::{cli_bin, not_startable};
use crate::server::{Paused, Server, ServerOptions};

/// Every wait on the cluster's state is bounded by this.
const STATE_LIMIT: Duration = Duration::from_secs(30);

/// The cluster nodes' `cluster-node-timeout` (ms).
pub const NODE_TIMEOUT_MS: u64 = 1000;

/// The cluster: its nodes, in the order given to `--cluster create` (the
/// first three start as masters).
pub struct RedisCluster {
    /// The nodes.
    pub nodes: Vec<Server>,
}

/// Makes the nodes on `ports` (loopback) a cluster with
/// `redis-cli --cluster create`, the first ones masters and `replicas` a
/// master.
pub fn create_cluster(ports: &[u16], replicas: usize) -> std::io::Result<()> {
    let cli = cli_bin();
    let mut create = Command::new(&cli);
    create.arg("--cluster").arg("create");
    for port in ports {
        create.arg(format!("127.0.0.1:{port}"));
    }
    let status = create
        .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", not_startable(&cli))))?;
    if !status.success() {
        return Err(std::io::Error::other(format!(
            "{} --cluster create failed",
            cli.to_string_lossy()
        )));
    }
    Ok(())
}

impl RedisCluster {
    /// Starts 6 nodes, makes them a cluster of 3 masters with a replica
    /// each, and waits until every node says `cluster_state:ok`; panics if
    /// that fails.
    pub fn start() -> RedisCluster {
        RedisCluster::try_start(1).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Starts 3 masters with `replicas` replicas each, makes them a
    /// cluster, and waits until every node says `cluster_state:ok` and every
    /// replica's link to its master is up.
    pub fn try_start(replicas: usize) -> std::io::Result<RedisCluster> {
        let nodes = (0..3 * (1 + replicas))
            .map(|_| ServerOptions::tcp().cluster_node(NODE_TIMEOUT_MS).start())
            .collect::<std::io::Result<Vec<Server>>>()?;
        let cluster = RedisCluster { nodes };
        let ports: Vec<u16> = cluster.nodes.iter().map(Server::port).collect();
        create_cluster(&ports, replicas)?;
        cluster.try_wait_ok()?;
        if replicas > 0 {
            for i in 0..cluster.nodes.len() {
                cluster.try_wait_until(i, |con| {
                    let replication = info(con, "replication");
                    replication.contains("role:slave")
                        && replication.contains("master_link_status:up")
                        || replication.contains(&format!("connected_slaves:{replicas}"))
                })?;
            }
        }
        Ok(cluster)
    }

    /// Waits until every running node says `cluster_state:ok` (every slot
    /// served).
    pub fn wait_ok(&self) {
        self.try_wait_ok().unwrap_or_else(|e| panic!("{e}"));
    }

    fn try_wait_ok(&self) -> std::io::Result<()> {
        for i in 0..self.nodes.len() {
            if self.nodes[i].is_running() {
                self.try_wait_until(i, |con| {
                    redis::cmd("CLUSTER")
                        .arg("INFO")
                        .query::<String>(con)
                        .is_ok_and(|info| info.contains("cluster_state:ok"))
                })?;
            }
        }
        Ok(())
    }

    fn try_wait_until(
        &self,
        i: usize,
        mut f: impl FnMut(&mut redis::Connection) -> bool,
    ) -> std::io::Result<()> {
        let deadline = Instant::now() + STATE_LIMIT;
        while Instant::now() < deadline {
            if let Ok(mut con) = self.try_connection(i) {
                if f(&mut con) {
                    return Ok(());
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(std::io::Error::other(format!(
            "cluster node {i} not ready within {STATE_LIMIT:?}"
        )))
    }

    /// The URL of node `i`.
    pub fn url(&self, i: usize) -> String {
        self.nodes[i].url()
    }

    /// Every node's URL.
    pub fn urls(&self) -> Vec<String> {
        (0..self.nodes.len()).map(|i| self.url(i)).collect()
    }

    fn try_connection(&self, i: usize) -> redis::RedisResult<redis::Connection> {
        let con = redis::Client::open(self.url(i))?
            .get_connection_with_timeout(Duration::from_secs(2))?;
        con.set_read_timeout(Some(Duration::from_secs(5)))?;
        Ok(con)
    }

    /// A plain connection to node `i`.
    pub fn connection(&self, i: usize) -> redis::Connection {
        self.try_connection(i).expect("connect to a cluster node")
    }

    /// Node `i`'s cluster id.
    pub fn node_id(&self, i: usize) -> String {
        redis::cmd("CLUSTER")
            .arg("MYID")
            .query(&mut self.connection(i))
            .expect("CLUSTER MYID")
    }

    /// Whether node `i` is a master now.
    pub fn is_master(&self, i: usize) -> bool {
        self.nodes[i].is_running()
            && self
                .try_connection(i)
                .map(|mut con| info(&mut con, "replication").contains("role:master"))
                .unwrap_or(false)
    }

    /// The running node that serves `key`'s slot as master.
    pub fn master_of(&self, key: &str) -> usize {
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut self.connection(self.any_running()))
            .expect("CLUSTER KEYSLOT");
        self.master_of_slot(slot)
    }

    /// The running master that serves `slot`, as the masters see it.
    pub fn master_of_slot(&self, slot: u16) -> usize {
        (0..self.nodes.len())
            .find(|&i| self.is_master(i) && self.owns(i, slot))
            .expect("a master serves the slot")
    }

    fn owns(&self, i: usize, slot: u16) -> bool {
        let id = self.node_id(i);
        let shards: redis::Value = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query(&mut self.connection(i))
            .expect("CLUSTER SLOTS");
        let redis::Value::Array(ranges) = shards else {
            return false;
        };
        ranges.iter().any(|range| {
            let redis::Value::Array(parts) = range else {
                return false;
            };
            let (Some(redis::Value::Int(from)), Some(redis::Value::Int(to))) =
                (parts.first(), parts.get(1))
            else {
                return false;
            };
            let master_id = match parts.get(2) {
                Some(redis::Value::Array(m)) => match m.get(2) {
                    Some(redis::Value::BulkString(id)) => String::from_utf8_lossy(id).into_owned(),
                    _ => String::new(),
                },
                _ => String::new(),
            };
            *from <= slot as i64 && slot as i64 <= *to && master_id == id
        })
    }

    /// A replica (running) of master `master`.
    pub fn replica_of(&self, master: usize) -> usize {
        let of_master = format!("master_port:{}", self.nodes[master].port());
        (0..self.nodes.len())
            .find(|&i| {
                i != master
                    && self.nodes[i].is_running()
                    && self
                        .try_connection(i)
                        .map(|mut con| info(&mut con, "replication").contains(&of_master))
                        .unwrap_or(false)
            })
            .expect("the master has a running replica")
    }

    /// Promotes replica `replica` with `CLUSTER FAILOVER`, as an operator
    /// would: first waits until the replica is in sync with its master (a
    /// replica that is behind drops the request without an answer to say
    /// so), then asks, and asks again while the promotion does not come.
    /// Panics if the replica is not a master within `STATE_LIMIT`.
    pub fn manual_failover(&self, replica: usize) {
        let deadline = Instant::now() + STATE_LIMIT;
        while Instant::now() < deadline {
            if self.in_sync(replica) {
                let mut con = self.connection(replica);
                let _ = redis::cmd("CLUSTER").arg("FAILOVER").query::<()>(&mut con);
                // A manual failover gives up after twice the node timeout
                // (1 s here); wait a little longer than that before asking
                // again.
                let asked = Instant::now();
                while asked.elapsed() < Duration::from_secs(3) {
                    if self.is_master(replica) {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            } else {
                std::thread::sleep(Duration::from_millis(50));
            }
            if self.is_master(replica) {
                return;
            }
        }
        panic!("the replica was not promoted within {STATE_LIMIT:?}");
    }

    /// Whether replica `i` has its link to the master up and has processed
    /// everything the master has sent.
    fn in_sync(&self, i: usize) -> bool {
        let Ok(mut con) = self.try_connection(i) else {
            return false;
        };
        let replication = info(&mut con, "replication");
        let field = |text: &str, name: &str| -> Option<String> {
            text.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
                .map(|v| v.trim().to_string())
        };
        if field(&replication, "master_link_status").as_deref() != Some("up") {
            return false;
        }
        let (Some(port), Some(offset)) = (
            field(&replication, "master_port"),
            field(&replication, "slave_repl_offset"),
        ) else {
            return false;
        };
        let Some(master) = self.nodes.iter().position(|n| n.port().to_string() == port) else {
            return false;
        };
        let Ok(mut master_con) = self.try_connection(master) else {
            return false;
        };
        field(&info(&mut master_con, "replication"), "master_repl_offset") == Some(offset)
    }

    fn any_running(&self) -> usize {
        (0..self.nodes.len())
            .find(|&i| self.nodes[i].is_running())
            .expect("a running node")
    }

    /// Kills node `i` (SIGKILL by pid).
    pub fn kill(&mut self, i: usize) {
        self.nodes[i].stop();
    }

    /// Freezes node `i` until the guard is dropped (SIGSTOP, then SIGCONT).
    pub fn pause(&self, i: usize) -> Paused {
        self.nodes[i].pause()
    }
}

/// `INFO section`, or empty if the node does not answer.
pub fn info(con: &mut redis::Connection, section: &str) -> String {
    redis::cmd("INFO")
        .arg(section)
        .query(con)
        .unwrap_or_default()
}
