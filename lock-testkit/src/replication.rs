//! Replication: masters, replicas and sentinels on loopback TCP ports, and
//! a master with a replica and three sentinels watching it.

use std::time::Duration;

use crate::server::{started, Server, ServerOptions};
use crate::wait::wait_until;

/// What a data node or sentinel runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A master.
    Master,
    /// A replica of the master on this port.
    Replica(u16),
    /// A sentinel watching the master on this port as [`MASTER_NAME`], with
    /// this quorum.
    Sentinel(u16, usize),
}

/// The name the sentinels of [`Role::Sentinel`] give the master.
pub const MASTER_NAME: &str = "m";

/// The config lines of a sentinel that watches the master on
/// `127.0.0.1:master_port` as `name`: quorum `quorum`, down-after 500 ms, a
/// failover timeout of 2 s, one replica resynced at a time.
pub fn sentinel_monitor(name: &str, master_port: u16, quorum: usize) -> String {
    format!(
        "sentinel monitor {name} 127.0.0.1 {master_port} {quorum}\n\
         sentinel down-after-milliseconds {name} 500\n\
         sentinel failover-timeout {name} 2000\n\
         sentinel parallel-syncs {name} 1\n"
    )
}

impl ServerOptions {
    /// A server on a free loopback TCP port that runs as `role`: a data
    /// node with no delay before a diskless sync (a replica of its master),
    /// or a sentinel (see [`sentinel_monitor`]).
    pub fn role(role: Role) -> ServerOptions {
        let options = ServerOptions::tcp();
        match role {
            Role::Master => options.config("repl-diskless-sync-delay 0\n"),
            Role::Replica(master) => options.config(&format!(
                "repl-diskless-sync-delay 0\nreplicaof 127.0.0.1 {master}\n"
            )),
            Role::Sentinel(master, quorum) => {
                options
                    .sentinel()
                    .config(&sentinel_monitor(MASTER_NAME, master, quorum))
            }
        }
    }
}

impl Server {
    /// A master; panics if it does not start.
    pub fn master() -> Server {
        started(ServerOptions::role(Role::Master).start())
    }

    /// A replica of the master on `port`, once it acknowledges a write
    /// within `WAIT` (the master streams writes to a new replica only after
    /// its first acknowledgement, up to a second after the sync); panics if
    /// it does not start or sync within 20 s.
    pub fn replica_of(port: u16) -> Server {
        let replica = started(ServerOptions::role(Role::Replica(port)).start());
        let acknowledged = || -> Option<bool> {
            let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).ok()?;
            let mut con = client
                .get_connection_with_timeout(Duration::from_secs(2))
                .ok()?;
            let _: () = redis::cmd("SET")
                .arg("support:replicated")
                .arg(1)
                .query(&mut con)
                .ok()?;
            let acked: i64 = redis::cmd("WAIT").arg(1).arg(200).query(&mut con).ok()?;
            Some(acked == 1)
        };
        let up = wait_until(Duration::from_secs(20), || acknowledged() == Some(true));
        assert!(up, "replica of {port} did not sync within 20 s");
        replica
    }

    /// A sentinel watching the master on `port` as [`MASTER_NAME`]; panics
    /// if it does not start.
    pub fn sentinel(port: u16, quorum: usize) -> Server {
        started(ServerOptions::role(Role::Sentinel(port, quorum)).start())
    }
}

/// A master, one replica and three sentinels (quorum 2) watching it.
pub struct Sentinels {
    /// The master it started with.
    pub master: Server,
    /// Its replica.
    pub replica: Server,
    /// The sentinels.
    pub sentinels: Vec<Server>,
}

impl Sentinels {
    /// Starts them all and waits until every sentinel knows the replica
    /// and the other sentinels; panics if that takes over 20 s.
    pub fn start() -> Sentinels {
        let master = Server::master();
        let replica = Server::replica_of(master.port());
        let sentinels: Vec<_> = (0..3).map(|_| Server::sentinel(master.port(), 2)).collect();
        for sentinel in &sentinels {
            let ready = wait_until(Duration::from_secs(20), || {
                let master: Option<Vec<String>> =
                    sentinel.query(redis::cmd("SENTINEL").arg("MASTER").arg(MASTER_NAME));
                let field = |name: &str| {
                    let master = master.as_ref()?;
                    let at = master.iter().position(|f| f == name)?;
                    master.get(at + 1)?.parse::<usize>().ok()
                };
                field("num-slaves") == Some(1) && field("num-other-sentinels") == Some(2)
            });
            assert!(
                ready,
                "sentinel {} did not see its peers within 20 s",
                sentinel.port()
            );
        }
        Sentinels {
            master,
            replica,
            sentinels,
        }
    }

    /// The sentinels' URLs.
    pub fn urls(&self) -> Vec<String> {
        self.sentinels.iter().map(Server::url).collect()
    }

    /// The port of the master the sentinels name now.
    pub fn current_master_port(&self) -> Option<u16> {
        self.sentinels.iter().find_map(|sentinel| {
            let addr: Option<(String, u16)> = sentinel.query(
                redis::cmd("SENTINEL")
                    .arg("GET-MASTER-ADDR-BY-NAME")
                    .arg(MASTER_NAME),
            );
            addr.map(|(_, port)| port)
        })
    }
}
