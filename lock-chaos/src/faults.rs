//! The seeded fault schedule, and applying one fault to a node.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::clock::now_ns;
use crate::history::Fault;
use crate::proxy::Proxy;
use crate::rng::Rng;
use lock_testkit::Server;

/// One kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// SIGSTOP, then SIGCONT after the duration.
    Pause,
    /// kill -9, start empty on the same port.
    Restart,
    /// `SAVE`, keep running for the duration, kill -9, start from the dump.
    Restore,
    /// `CLIENT KILL TYPE normal`.
    KillNormal,
    /// `CLIENT KILL TYPE pubsub`.
    KillPubsub,
    /// The proxy delays each chunk by `param` ms for the duration.
    Delay,
    /// The proxy drops everything for the duration, then resets.
    BlackHole,
    /// The proxy closes every open connection.
    Reset,
    /// Cluster and Sentinel: kill -9 a master, wait for the failover,
    /// restart it empty as a replica.
    KillMaster,
    /// Cluster and Sentinel: `CLUSTER FAILOVER` on a replica, or
    /// `SENTINEL FAILOVER` on a sentinel.
    Failover,
    /// Cluster and Sentinel: kill -9 a replica and restart it empty.
    ReplicaRestart,
}

/// Every kind, for the plan and the summary.
pub const KINDS: [Kind; 8] = [
    Kind::Pause,
    Kind::Restart,
    Kind::Restore,
    Kind::KillNormal,
    Kind::KillPubsub,
    Kind::Delay,
    Kind::BlackHole,
    Kind::Reset,
];

/// The kinds of the `cluster` and `sentinel` modes.
pub const REPLICATED_KINDS: [Kind; 4] = [
    Kind::Pause,
    Kind::KillMaster,
    Kind::Failover,
    Kind::ReplicaRestart,
];

impl Kind {
    /// The word in the history.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Pause => "pause",
            Kind::Restart => "restart",
            Kind::Restore => "restore",
            Kind::KillNormal => "kill-normal",
            Kind::KillPubsub => "kill-pubsub",
            Kind::Delay => "delay",
            Kind::BlackHole => "blackhole",
            Kind::Reset => "reset",
            Kind::KillMaster => "kill-master",
            Kind::Failover => "failover",
            Kind::ReplicaRestart => "replica-restart",
        }
    }
}

/// One planned fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    /// When, from the start of the run (ms).
    pub at_ms: u64,
    /// What.
    pub kind: Kind,
    /// Which node.
    pub node: usize,
    /// How long (ms; 0 for instant faults).
    pub dur_ms: u64,
    /// The delay of a `Delay` (ms).
    pub param: u64,
    /// For proxy faults: one worker's link only (a partial partition), or
    /// every worker's (`None`).
    pub link: Option<usize>,
}

/// What a plan is for.
#[derive(Debug, Clone)]
pub struct Shape {
    /// How many nodes.
    pub nodes: usize,
    /// How many workers (one link each per node).
    pub workers: usize,
    /// The run's length (ms).
    pub run_ms: u64,
    /// At most this many nodes under a fault at once.
    pub max_busy: usize,
    /// The kinds to use (all of [`KINDS`] by default).
    pub kinds: Vec<Kind>,
}

/// The kind named `name` (as in the history, without parameters).
pub fn kind_named(name: &str) -> Option<Kind> {
    KINDS
        .iter()
        .chain(&REPLICATED_KINDS)
        .copied()
        .find(|k| k.as_str() == name)
}

/// The fault plan of a run of `run_ms` on `nodes` nodes: a fault every
/// 0.4–1.6 s (one gap in five is a calm 3–5 s), from 1.5 s until 3 s before
/// the end, one at a time per node and at most `max_busy` nodes at once.
/// A fault on one worker's link (a partial partition) does not keep its node
/// busy: a restart or a pause of the node can come while one worker is cut
/// off, as in a real network. Kinds come in rounds (each kind once per
/// round, in a seeded order), so that a short run sees most.
pub fn plan(seed: u64, shape: &Shape) -> Vec<Planned> {
    let Shape {
        nodes,
        workers,
        run_ms,
        max_busy,
        ref kinds,
    } = *shape;
    let mut rng = Rng::derive(seed, &[0xFA17, nodes as u64]);
    let mut out: Vec<Planned> = Vec::new();
    let mut busy_until = vec![0u64; nodes];
    let mut link_busy_until = vec![vec![0u64; workers]; nodes];
    let mut t = 1500;
    let mut bag: Vec<Kind> = Vec::new();
    for _ in 0..100_000 {
        // Now and then a calm stretch, where availability is checked
        // without faults to explain it.
        t += if rng.chance(20) {
            rng.range(3000, 5000)
        } else {
            rng.range(400, 1600)
        };
        if t + 3000 >= run_ms {
            break;
        }
        let free: Vec<usize> = (0..nodes).filter(|&n| busy_until[n] <= t).collect();
        let busy = nodes - free.len();
        if free.is_empty() || busy >= max_busy {
            continue;
        }
        if bag.is_empty() {
            // Every kind once per round, in a seeded order.
            bag = kinds.clone();
            for i in (1..bag.len()).rev() {
                bag.swap(i, rng.range(0, i as u64) as usize);
            }
        }
        let kind = bag.pop();
        let Some(kind) = kind else { break };
        let (dur_ms, param) = match kind {
            Kind::Pause => (*rng.pick(&[80, 150, 400, 700, 1500, 2500]), 0),
            Kind::Restore => (rng.range(50, 900), 0),
            Kind::Delay => (rng.range(300, 2000), *rng.pick(&[20, 100, 300])),
            Kind::BlackHole => (rng.range(150, 2000), 0),
            _ => (0, 0),
        };
        let node = *rng.pick(&free);
        let proxy_fault = matches!(kind, Kind::Delay | Kind::BlackHole | Kind::Reset);
        let link = (proxy_fault && workers > 1 && rng.chance(50))
            .then(|| rng.range(0, workers as u64 - 1) as usize);
        match link {
            Some(l) if link_busy_until[node][l] > t => continue,
            Some(l) => link_busy_until[node][l] = t + dur_ms + 500,
            None => busy_until[node] = t + dur_ms + 500,
        }
        out.push(Planned {
            at_ms: t,
            kind,
            node,
            dur_ms,
            param,
            link,
        });
    }
    out
}

/// A server and the proxies in front of it, one per worker.
#[derive(Debug)]
pub struct Node {
    /// Its name in the history (`node0`...).
    pub name: String,
    /// The server (behind a lock: restarts replace its process).
    pub server: Arc<Mutex<Server>>,
    /// The proxies, one per worker: worker `w` goes through `proxies[w]`.
    pub proxies: Vec<Proxy>,
}

/// `CLIENT KILL TYPE <kind>` (normal or pubsub); how many were killed.
fn client_kill(server: &Server, kind: &str) -> redis::RedisResult<u64> {
    server.admin(|con| {
        redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg(kind)
            .query::<u64>(con)
    })
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f)
        .await
        .expect("blocking fault step")
}

/// Applies `fault` to `node` now; returns its window.
pub async fn apply(fault: &Planned, node: &Node) -> Fault {
    let start = now_ns();
    let dur = Duration::from_millis(fault.dur_ms);
    let proxies = match fault.link {
        Some(w) => &node.proxies[w..=w],
        None => &node.proxies[..],
    };
    let server = node.server.clone();
    match fault.kind {
        Kind::Pause => {
            let _ = server.lock().expect("server").signal(libc::SIGSTOP);
            tokio::time::sleep(dur).await;
            let _ = server.lock().expect("server").signal(libc::SIGCONT);
        }
        Kind::Restart => {
            let _ = blocking(move || server.lock().expect("server").restart(false)).await;
        }
        Kind::Restore => {
            let s = server.clone();
            let _ = blocking(move || s.lock().expect("server").save()).await;
            tokio::time::sleep(dur).await;
            let _ = blocking(move || server.lock().expect("server").restart(true)).await;
        }
        Kind::KillNormal | Kind::KillPubsub => {
            let kind = if fault.kind == Kind::KillNormal {
                "normal"
            } else {
                "pubsub"
            };
            let _ = blocking(move || client_kill(&server.lock().expect("server"), kind)).await;
        }
        Kind::Delay => {
            proxies.iter().for_each(|p| p.delay(fault.param));
            tokio::time::sleep(dur).await;
            proxies.iter().for_each(Proxy::pass);
        }
        Kind::BlackHole => {
            proxies.iter().for_each(Proxy::black_hole);
            tokio::time::sleep(dur).await;
            // Dropped chunks leave the streams torn: close them.
            proxies.iter().for_each(Proxy::reset);
            proxies.iter().for_each(Proxy::pass);
        }
        Kind::Reset => proxies.iter().for_each(Proxy::reset),
        // Replicated deployments only (`crate::failover`).
        Kind::KillMaster | Kind::Failover | Kind::ReplicaRestart => {}
    }
    let kind = match fault.kind {
        Kind::Delay => format!("delay{}ms", fault.param),
        Kind::Pause => format!("pause{}ms", fault.dur_ms),
        other => other.as_str().to_owned(),
    };
    let target = match fault.link {
        Some(w) => format!("{}/w{w}", node.name),
        None => node.name.clone(),
    };
    Fault {
        kind,
        target,
        start,
        end: now_ns(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_plan_within_limits() {
        let shape = Shape {
            nodes: 5,
            workers: 3,
            run_ms: 60_000,
            max_busy: 2,
            kinds: KINDS.to_vec(),
        };
        let a = plan(7, &shape);
        assert_eq!(a, plan(7, &shape));
        assert_ne!(a, plan(8, &shape));
        assert!(a.len() > 20);
        // Node-wide faults: at most `max_busy` at once. A worker's link:
        // one fault at a time.
        let during =
            |f: &Planned, g: &Planned| g.at_ms <= f.at_ms && f.at_ms < g.at_ms + g.dur_ms + 500;
        for f in &a {
            let node_wide = a
                .iter()
                .filter(|g| g.link.is_none() && during(f, g))
                .count();
            assert!(f.link.is_some() || node_wide <= 2, "{f:?}");
            let same_link = a
                .iter()
                .filter(|g| {
                    g.link.is_some() && g.link == f.link && g.node == f.node && during(f, g)
                })
                .count();
            assert!(f.link.is_none() || same_link == 1, "{f:?}");
        }
        assert!(
            a.iter().any(|f| f.link.is_some()),
            "some partial partitions"
        );
    }
}
