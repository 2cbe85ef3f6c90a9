//! The faults of the `cluster` and `sentinel` modes: a seeded sequence of
//! killed masters, manual failovers, replica restarts and frozen nodes,
//! applied one at a time to the servers. Each fault's window runs from its
//! start until the deployment is whole again (every master has a replica
//! online), at most [`SETTLE_LIMIT`] later.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::clock::now_ns;
use crate::faults::Kind;
use crate::history::Fault;
use crate::rng::Rng;
use crate::topology::{role, Replicated, Role, Topology, MASTER_NAME, SETTLE_LIMIT};
use lock_testkit::wait_until;

/// One planned fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The quiet time before it, after the previous fault's window (ms).
    pub gap_ms: u64,
    /// What.
    pub kind: Kind,
    /// How long a pause lasts (ms; 0 for the other kinds).
    pub dur_ms: u64,
    /// Which node or sentinel, as an index into the candidates at the time
    /// (modulo their count): roles change as the run goes.
    pub pick: u64,
}

/// The plan of a run of `run_ms`: gaps of 0.5–2 s between faults, one gap
/// in five a calm 3–5 s; kinds in rounds (each once per round, in a seeded
/// order); pauses of 0.5, 1, 1.5, 2 or 3 s. As many steps as could fit if
/// every fault took no time; the run stops taking them 3 s before its end.
pub fn plan(seed: u64, run_ms: u64, kinds: &[Kind]) -> Vec<Step> {
    let mut rng = Rng::derive(seed, &[0xFA11, 0x0BE5]);
    let mut out = Vec::new();
    let mut bag: Vec<Kind> = Vec::new();
    let mut t = 0;
    while t < run_ms && !kinds.is_empty() {
        let gap_ms = if rng.chance(20) {
            rng.range(3000, 5000)
        } else {
            rng.range(500, 2000)
        };
        if bag.is_empty() {
            bag = kinds.to_vec();
            for i in (1..bag.len()).rev() {
                bag.swap(i, rng.range(0, i as u64) as usize);
            }
        }
        let kind = bag.pop().expect("a kind");
        let dur_ms = match kind {
            Kind::Pause => *rng.pick(&[500, 1000, 1500, 2000, 3000]),
            _ => 0,
        };
        t += gap_ms + dur_ms;
        out.push(Step {
            gap_ms,
            kind,
            dur_ms,
            pick: rng.next_u64(),
        });
    }
    out
}

/// What applying one fault gave: its window and a line for the report.
#[derive(Debug, Clone)]
pub struct Applied {
    /// The window (start to whole again).
    pub fault: Fault,
    /// What happened, with times from the fault's start.
    pub note: String,
}

fn secs(since: Instant) -> String {
    format!("{:.2} s", since.elapsed().as_secs_f64())
}

/// Waits until the deployment is whole (after node `restarted`, if any,
/// reports a replica link up), bounded; says when.
fn whole(rep: &Replicated, t0: Instant, restarted: Option<usize>) -> String {
    let linked = restarted.is_none_or(|i| {
        wait_until(SETTLE_LIMIT, || {
            matches!(role(&rep.data[i]), Role::Replica(_, true))
        })
    });
    if linked && rep.wait_settled(SETTLE_LIMIT) {
        format!("whole again at {}", secs(t0))
    } else {
        format!("NOT whole again within {} s", SETTLE_LIMIT.as_secs())
    }
}

/// Restarts data node `i` empty; on Sentinel, as a replica of the master
/// the sentinels name (when that is another node).
fn restart(rep: &Replicated, i: usize) {
    let master = rep.named_master().filter(|&p| rep.node_on(p) != Some(i));
    let mut server = rep.data[i].lock().expect("server");
    if rep.topology == Topology::Sentinel {
        server.set_args(crate::topology::data_args(Topology::Sentinel, master));
    }
    let _ = server.restart(false);
}

/// kill -9 a master, wait until its replica is promoted (and, on
/// Sentinel, named by the sentinels), restart it at once.
fn kill_master(rep: &Replicated, pick: u64) -> (String, String) {
    let masters = rep.masters();
    let Some(&m) = masters.get(pick as usize % masters.len().max(1)) else {
        return ("none".into(), "no master found".into());
    };
    let replica = rep.replica_of(m);
    let t0 = Instant::now();
    rep.data[m].lock().expect("server").stop();
    let promoted = replica.is_some_and(|r| {
        let port = rep.data[r].lock().expect("server").port();
        wait_until(SETTLE_LIMIT, || {
            matches!(role(&rep.data[r]), Role::Master(_))
                && (rep.topology == Topology::Cluster || rep.named_master() == Some(port))
        })
    });
    let promoted = if promoted {
        format!(
            "replica node{} promoted after {}",
            replica.unwrap_or(0),
            secs(t0)
        )
    } else {
        format!("no promotion within {} s", SETTLE_LIMIT.as_secs())
    };
    restart(rep, m);
    let restarted = secs(t0);
    let note = format!(
        "{promoted}, restarted at {restarted}, {}",
        whole(rep, t0, Some(m))
    );
    (format!("node{m}"), note)
}

/// A manual failover: `CLUSTER FAILOVER` on a replica, or `SENTINEL
/// FAILOVER` on a sentinel; waits until a new master serves.
fn manual_failover(rep: &Replicated, pick: u64) -> (String, String) {
    let t0 = Instant::now();
    let (target, answer, promoted) = if rep.topology == Topology::Cluster {
        let replicas = rep.replicas();
        let Some(&r) = replicas.get(pick as usize % replicas.len().max(1)) else {
            return ("none".into(), "no replica found".into());
        };
        let server = rep.data[r].lock().expect("server");
        let answer = server.admin(|con| redis::cmd("CLUSTER").arg("FAILOVER").query::<String>(con));
        drop(server);
        let promoted = wait_until(Duration::from_secs(10), || {
            matches!(role(&rep.data[r]), Role::Master(_))
        });
        (format!("node{r}"), answer, promoted)
    } else {
        let before = rep.named_master();
        let s = pick as usize % rep.sentinels.len();
        let sentinel = rep.sentinels[s].lock().expect("server");
        let answer = sentinel.admin(|con| {
            redis::cmd("SENTINEL")
                .arg("FAILOVER")
                .arg(MASTER_NAME)
                .query::<String>(con)
        });
        drop(sentinel);
        let promoted = wait_until(Duration::from_secs(10), || {
            rep.named_master().is_some_and(|p| Some(p) != before)
        });
        (format!("sentinel{s}"), answer, promoted)
    };
    let answer = match answer {
        Ok(a) => a,
        Err(e) => format!("error: {e}"),
    };
    let promoted = if promoted {
        format!("new master after {}", secs(t0))
    } else {
        "no new master within 10 s".to_owned()
    };
    (
        target,
        format!("answer {answer}, {promoted}, {}", whole(rep, t0, None)),
    )
}

/// kill -9 a replica and restart it at once.
fn replica_restart(rep: &Replicated, pick: u64) -> (String, String) {
    let replicas = rep.replicas();
    let Some(&r) = replicas.get(pick as usize % replicas.len().max(1)) else {
        return ("none".into(), "no replica found".into());
    };
    let t0 = Instant::now();
    rep.data[r].lock().expect("server").stop();
    restart(rep, r);
    (
        format!("node{r}"),
        format!("restarted, {}", whole(rep, t0, Some(r))),
    )
}

/// SIGSTOP a data node for `dur_ms`, then SIGCONT.
fn pause(rep: &Replicated, pick: u64, dur_ms: u64) -> (String, String) {
    let i = pick as usize % rep.data.len();
    let was = role(&rep.data[i]);
    let t0 = Instant::now();
    let _ = rep.data[i].lock().expect("server").signal(libc::SIGSTOP);
    std::thread::sleep(Duration::from_millis(dur_ms));
    let _ = rep.data[i].lock().expect("server").signal(libc::SIGCONT);
    let was = match was {
        Role::Master(_) => "a master",
        Role::Replica(..) => "a replica",
        Role::Unknown => "unknown",
    };
    let whole = whole(rep, t0, None);
    let now = match role(&rep.data[i]) {
        Role::Master(_) => "a master",
        Role::Replica(..) => "a replica",
        Role::Unknown => "unknown",
    };
    (format!("node{i}"), format!("was {was}, now {now}, {whole}"))
}

/// Applies `step` now (blocking: run it on a blocking thread).
pub fn apply(rep: &Replicated, step: &Step) -> Applied {
    let start = now_ns();
    let (target, note) = match step.kind {
        Kind::KillMaster => kill_master(rep, step.pick),
        Kind::Failover => manual_failover(rep, step.pick),
        Kind::ReplicaRestart => replica_restart(rep, step.pick),
        Kind::Pause => pause(rep, step.pick, step.dur_ms),
        other => (
            "none".into(),
            format!("{} does not apply here", other.as_str()),
        ),
    };
    let kind = match step.kind {
        Kind::Pause => format!("pause{}ms", step.dur_ms),
        other => other.as_str().to_owned(),
    };
    let end = now_ns();
    Applied {
        fault: Fault {
            kind,
            target,
            start,
            end,
        },
        note,
    }
}

/// Runs the plan until 3 s before `run_ms` from `started`, one fault at a
/// time, each after its gap: the windows, and a note for each.
pub async fn run(
    rep: Arc<Replicated>,
    steps: Vec<Step>,
    started: Instant,
    run_ms: u64,
) -> Vec<Applied> {
    let end = started + Duration::from_millis(run_ms.saturating_sub(3000));
    let mut out = Vec::new();
    let mut at = started + Duration::from_millis(1500);
    for step in steps {
        at += Duration::from_millis(step.gap_ms);
        if at >= end {
            break;
        }
        tokio::time::sleep_until(at.into()).await;
        let rep = rep.clone();
        let applied = tokio::task::spawn_blocking(move || apply(&rep, &step)).await;
        let Ok(applied) = applied else { break };
        out.push(applied);
        at = Instant::now();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_plan() {
        let kinds = crate::faults::REPLICATED_KINDS;
        let a = plan(7, 60_000, &kinds);
        assert_eq!(a, plan(7, 60_000, &kinds));
        assert_ne!(a, plan(8, 60_000, &kinds));
        for kind in kinds {
            assert!(a.iter().any(|s| s.kind == kind), "{kind:?}");
        }
        assert!(a.iter().all(|s| (500..=5000).contains(&s.gap_ms)));
        assert!(plan(7, 60_000, &[]).is_empty());
    }
}
