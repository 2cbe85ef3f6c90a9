//! A Redis Cluster of our own: 6 redis-server processes on loopback ports
//! (3 masters, a replica each), made with `redis-cli --cluster create`,
//! stopped by pid.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use super::{cli_bin, not_startable, server_bin, TempDir};

/// Every wait on the cluster's state is bounded by this.
const STATE_LIMIT: Duration = Duration::from_secs(30);

/// One node's process.
pub struct ClusterNode {
    pub port: u16,
    child: Option<Child>,
}

/// The cluster: its nodes, in the order given to `--cluster create` (the
/// first three start as masters).
pub struct RedisCluster {
    pub nodes: Vec<ClusterNode>,
    _dir: TempDir,
}

/// `n` free loopback ports whose cluster bus ports (+10000) are free too,
/// both below the kernel's range for outgoing connections (32768 up), so
/// that no client takes a bus port between the check and the start.
fn free_ports(n: usize) -> Vec<u16> {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let base = 12000 + (std::process::id() % 250) as u16 * 32;
    let mut ports = Vec::new();
    for _ in 0..2000 {
        if ports.len() == n {
            break;
        }
        let port = 12000 + (base - 12000 + NEXT.fetch_add(1, Ordering::Relaxed)) % 10000;
        let free = |p: u16| TcpListener::bind(("127.0.0.1", p)).is_ok();
        if free(port) && free(port + 10000) {
            ports.push(port);
        }
    }
    assert_eq!(ports.len(), n, "free loopback ports");
    ports
}

impl RedisCluster {
    /// Starts 6 nodes, makes them a cluster of 3 masters with a replica
    /// each, and waits until every node says `cluster_state:ok`.
    pub fn start() -> RedisCluster {
        let dir = TempDir::new("cluster");
        let ports = free_ports(6);
        let nodes = ports
            .iter()
            .map(|&port| ClusterNode {
                port,
                child: Some(spawn(&dir, port)),
            })
            .collect();
        let cluster = RedisCluster { nodes, _dir: dir };
        for i in 0..cluster.nodes.len() {
            cluster.wait_until(i, ping);
        }
        let cli = cli_bin();
        let mut create = Command::new(&cli);
        create.arg("--cluster").arg("create");
        for port in &ports {
            create.arg(format!("127.0.0.1:{port}"));
        }
        let status = create
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap_or_else(|e| panic!("{}: {e}", not_startable(&cli)));
        assert!(status.success(), "redis-cli --cluster create");
        cluster.wait_ok();
        for i in 0..cluster.nodes.len() {
            cluster.wait_until(i, |con| {
                let replication = info(con, "replication");
                replication.contains("role:slave") && replication.contains("master_link_status:up")
                    || replication.contains("connected_slaves:1")
            });
        }
        cluster
    }

    /// Waits until every running node says `cluster_state:ok` (every slot
    /// served).
    pub fn wait_ok(&self) {
        for i in 0..self.nodes.len() {
            if self.nodes[i].child.is_some() {
                self.wait_until(i, |con| {
                    redis::cmd("CLUSTER")
                        .arg("INFO")
                        .query::<String>(con)
                        .is_ok_and(|info| info.contains("cluster_state:ok"))
                });
            }
        }
    }

    fn wait_until(&self, i: usize, mut f: impl FnMut(&mut redis::Connection) -> bool) {
        let deadline = Instant::now() + STATE_LIMIT;
        while Instant::now() < deadline {
            if let Ok(mut con) = self.try_connection(i) {
                if f(&mut con) {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("cluster node {i} not ready within {STATE_LIMIT:?}");
    }

    /// The URL of node `i`.
    pub fn url(&self, i: usize) -> String {
        format!("redis://127.0.0.1:{}/", self.nodes[i].port)
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
        self.nodes[i].child.is_some()
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
        let of_master = format!("master_port:{}", self.nodes[master].port);
        (0..self.nodes.len())
            .find(|&i| {
                i != master
                    && self.nodes[i].child.is_some()
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
        let Some(master) = self.nodes.iter().position(|n| n.port.to_string() == port) else {
            return false;
        };
        let Ok(mut master_con) = self.try_connection(master) else {
            return false;
        };
        field(&info(&mut master_con, "replication"), "master_repl_offset") == Some(offset)
    }

    fn any_running(&self) -> usize {
        (0..self.nodes.len())
            .find(|&i| self.nodes[i].child.is_some())
            .expect("a running node")
    }

    /// Kills node `i` (SIGKILL by pid).
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.nodes[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends `signal` (`-STOP`, `-CONT`) to node `i` by pid.
    pub fn signal(&self, i: usize, signal: &str) {
        let pid = self.nodes[i].child.as_ref().expect("node running").id();
        let status = Command::new("kill")
            .arg(signal)
            .arg(pid.to_string())
            .status()
            .expect("kill");
        assert!(status.success(), "kill {signal} {pid}");
    }

    /// Freezes node `i` until the guard is dropped (SIGSTOP, then SIGCONT).
    pub fn pause(&self, i: usize) -> Paused<'_> {
        self.signal(i, "-STOP");
        Paused { cluster: self, i }
    }
}

/// A frozen node; thawed on drop, also when the test panics.
pub struct Paused<'a> {
    cluster: &'a RedisCluster,
    i: usize,
}

impl Drop for Paused<'_> {
    fn drop(&mut self) {
        self.cluster.signal(self.i, "-CONT");
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                // A frozen node does not die of SIGKILL before SIGCONT on
                // every kernel; thaw it first.
                let _ = Command::new("kill")
                    .arg("-CONT")
                    .arg(child.id().to_string())
                    .status();
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

fn spawn(dir: &TempDir, port: u16) -> Child {
    let node_dir = dir.path().join(port.to_string());
    std::fs::create_dir_all(&node_dir).expect("node dir");
    let bin = server_bin();
    Command::new(&bin)
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--cluster-enabled", "yes"])
        .args(["--cluster-config-file", "nodes.conf"])
        .args(["--cluster-node-timeout", "1000"])
        .args(["--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(&node_dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", not_startable(&bin)))
}

fn ping(con: &mut redis::Connection) -> bool {
    redis::cmd("PING").query::<String>(con).is_ok()
}

/// `INFO section`, or empty if the node does not answer.
pub fn info(con: &mut redis::Connection, section: &str) -> String {
    redis::cmd("INFO")
        .arg(section)
        .query(con)
        .unwrap_or_default()
}
