//! The election mode's side of the harness: faults of the worker processes
//! themselves on a seeded plan (kill -9, then a fresh start; SIGSTOP past
//! the lease, then SIGCONT), beside the deployment's faults, and the ticks'
//! lists read from Redis at the end of the run.

use std::time::Duration;

use tokio::process::Child;

use crate::clock::now_ns;
use crate::election::{self, TickList};
use crate::history::Fault;
use crate::rng::Rng;
use lock_testkit::Server;

/// How long a paused worker stays stopped (ms): past every lease of
/// [`crate::election_worker::LEASES_MS`] but the longest for the first.
pub const PAUSES_MS: [u64; 5] = [400, 700, 1000, 1500, 2000];

/// One planned fault of a worker process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerFault {
    /// When, from the start of the run (ms).
    pub at_ms: u64,
    /// Which worker.
    pub proc: u32,
    /// kill -9 (then started again after `dur_ms`), else SIGSTOP for
    /// `dur_ms`, then SIGCONT.
    pub kill: bool,
    /// How long (ms).
    pub dur_ms: u64,
}

/// The plan of a run of `run_ms` with `workers` workers: one fault at a
/// time, from 1.5 to 2.5 s, then every 1.5 to 4 s after the last one
/// ended, until 3 s before the end. They come in rounds of three, two
/// pauses (of [`PAUSES_MS`]) and a kill (started again 100 to 400 ms
/// later) in a seeded order, so that a short run has both.
pub fn plan(seed: u64, run_ms: u64, workers: u32) -> Vec<WorkerFault> {
    let mut rng = Rng::derive(seed, &[0x3F]);
    let mut out = Vec::new();
    let mut at = rng.range(1500, 2500);
    let mut round = Vec::new();
    while workers > 0 && out.len() < 10_000 {
        if round.is_empty() {
            round = vec![false, false, true];
            let i = rng.range(0, 2) as usize;
            round.swap(i, 2);
        }
        let kill = round.pop().expect("a round has three");
        let dur_ms = if kill {
            rng.range(100, 400)
        } else {
            *rng.pick(&PAUSES_MS)
        };
        if at + dur_ms + 3000 > run_ms {
            break;
        }
        let proc = rng.range(0, u64::from(workers) - 1) as u32;
        out.push(WorkerFault {
            at_ms: at,
            proc,
            kill,
            dur_ms,
        });
        at += dur_ms + rng.range(1500, 4000);
    }
    out
}

fn signal(child: &Child, sig: libc::c_int) {
    if let Some(pid) = child.id() {
        // SAFETY: a plain kill(2) on our own child's pid.
        unsafe {
            libc::kill(pid as libc::pid_t, sig);
        }
    }
}

/// Applies `fault` to `children[fault.proc]`, starting it again with
/// `spawn(proc, run_ms left, life)` after a kill (not within 1 s of the
/// end); returns its window.
async fn apply<S>(
    fault: &WorkerFault,
    children: &mut [Child],
    lives: &mut [u32],
    end: tokio::time::Instant,
    spawn: &S,
) -> Fault
where
    S: Fn(u32, u64, u32) -> std::io::Result<Child>,
{
    let p = fault.proc as usize;
    let start = now_ns();
    let dur = Duration::from_millis(fault.dur_ms);
    let kind = if fault.kill {
        // By pid: our own child.
        let _ = children[p].start_kill();
        let _ = children[p].wait().await;
        tokio::time::sleep(dur).await;
        let left = end.saturating_duration_since(tokio::time::Instant::now());
        if left > Duration::from_secs(1) {
            lives[p] += 1;
            match spawn(fault.proc, left.as_millis() as u64, lives[p]) {
                Ok(child) => children[p] = child,
                Err(e) => eprintln!("worker {p} could not be started again: {e}"),
            }
        }
        "wkill".to_owned()
    } else {
        signal(&children[p], libc::SIGSTOP);
        tokio::time::sleep(dur).await;
        signal(&children[p], libc::SIGCONT);
        format!("wpause{}ms", fault.dur_ms)
    };
    Fault {
        kind,
        target: format!("worker{p}"),
        start,
        end: now_ns(),
    }
}

/// Runs the plan on the workers `children` (a killed one is started again
/// with `spawn`), then waits for them (bounded: killed by pid past the run
/// + 30 s); the fault windows.
pub async fn drive<S>(
    run_ms: u64,
    plan: &[WorkerFault],
    mut children: Vec<Child>,
    spawn: S,
) -> Vec<Fault>
where
    S: Fn(u32, u64, u32) -> std::io::Result<Child>,
{
    let start = tokio::time::Instant::now();
    let end = start + Duration::from_millis(run_ms);
    let mut lives = vec![0; children.len()];
    let mut faults = Vec::new();
    let workers = children.len();
    for fault in plan.iter().filter(|f| (f.proc as usize) < workers) {
        tokio::time::sleep_until(start + Duration::from_millis(fault.at_ms)).await;
        faults.push(apply(fault, &mut children, &mut lives, end, &spawn).await);
    }
    let limit = end + Duration::from_secs(30);
    for child in &mut children {
        if tokio::time::timeout_at(limit, child.wait()).await.is_err() {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
    }
    faults
}

/// `LRANGE` of a list of tokens on `server`.
pub fn lrange(server: &Server, list: &str) -> redis::RedisResult<Vec<u64>> {
    server.admin(|con| redis::cmd("LRANGE").arg(list).arg(0).arg(-1).query(con))
}

/// Every election key's list, read with `read(list)` (the first server
/// that answers); a list no server could give is left out, with a note
/// on stderr.
pub fn lists(prefix: &str, read: impl Fn(&str) -> Option<Vec<u64>>) -> Vec<TickList> {
    (0..election::KEYS)
        .filter_map(|k| {
            let key = format!("e{k}");
            let list = election::resource(prefix, &key);
            match read(&list) {
                Some(tokens) => Some(TickList { key, tokens }),
                None => {
                    eprintln!("the list {list} could not be read");
                    None
                }
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_is_seeded_spaced_and_ends_before_the_run() {
        let a = plan(7, 60_000, 3);
        assert_eq!(a, plan(7, 60_000, 3));
        assert_ne!(a, plan(8, 60_000, 3));
        assert!(a.len() >= 10, "{}", a.len());
        // Each round of three has one kill, in a seeded place.
        for round in a.chunks_exact(3) {
            assert_eq!(round.iter().filter(|f| f.kill).count(), 1);
        }
        let places: std::collections::BTreeSet<usize> = a
            .chunks_exact(3)
            .map(|r| r.iter().position(|f| f.kill).expect("a kill"))
            .collect();
        assert!(places.len() > 1, "{places:?}");
        let short = plan(7, 20_000, 3);
        assert!(short.len() >= 3 && short.iter().take(3).any(|f| f.kill));
        for pair in a.windows(2) {
            assert!(pair[1].at_ms >= pair[0].at_ms + pair[0].dur_ms + 1500);
        }
        assert!(a
            .iter()
            .all(|f| f.proc < 3 && f.at_ms + f.dur_ms + 3000 <= 60_000));
        assert!(plan(7, 60_000, 0).is_empty());
    }
}
