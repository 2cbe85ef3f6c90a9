//! The election mode's worker tasks: each task campaigns with `lead` on
//! its election key (task `t` of worker `p` on `e<(p + t) % 3>`, so that
//! each key has campaigners in several workers), on either client, with a
//! short lease; each term ticks (a fenced write of its token onto the key's list)
//! a planned number of times and resigns (its future returns `Ok`, and the
//! task calls `lead` again), or steps down when a tick is refused. A third
//! of the terms hand the ticking to a spawned task that stops on
//! `Term::ended` (its ticks carry the token by hand); the others tick in
//! the term's future, with the token the write takes from the term's hold.
//! Every term's start, tick and end is recorded ([`crate::election`]).
//!
//! With the test-only feature `defect-unfenced-ticks`, the handed-off
//! ticker ignores `Term::ended` and every tick is written under a fence of
//! its term's own (so in effect unfenced): a leader that lost its term
//! still writes. Rules 11 and 13 must catch it.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use lock_runtime::{LockError, LockOptions, LossReason, Term, TermEnd};

use crate::clock::now_ns;
use crate::election::{self, EndKind, TermEnded, TermStart, Tick, TickResult, Why};
use crate::process::{self, WorkerArgs};
use crate::record;
use crate::rng::Rng;

/// Whether the known defect of unfenced ticks is on.
const UNFENCED: bool = cfg!(feature = "defect-unfenced-ticks");

/// The leases a campaign draws from (ms): short, so that a paused or
/// killed leader is replaced within a second.
pub const LEASES_MS: [u64; 3] = [300, 500, 800];

/// One call of `lead`, drawn from the seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Campaign {
    /// 0: `lock_runtime::lead` on the global client; 1: the second
    /// client's `lead`.
    pub client: u8,
    /// The terms' lease (ms).
    pub lease_ms: u64,
}

/// What one term does, drawn when it begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TermPlan {
    /// How many ticks before it resigns.
    pub ticks: u64,
    /// The time between ticks (ms).
    pub tick_ms: u64,
    /// Whether a spawned task ticks (stopping on `Term::ended`).
    pub handed: bool,
}

/// A random campaign.
pub fn campaign(rng: &mut Rng) -> Campaign {
    Campaign {
        client: u8::from(rng.chance(50)),
        lease_ms: *rng.pick(&LEASES_MS),
    }
}

/// A random term: 3 to 40 ticks, 10 to 40 ms apart (a term of 20 ms to
/// 1.6 s), handed to a spawned task one time in three.
pub fn term_plan(rng: &mut Rng) -> TermPlan {
    TermPlan {
        ticks: rng.range(3, 40),
        tick_ms: rng.range(10, 40),
        handed: rng.chance(33),
    }
}

/// Who ticks, and where.
#[derive(Debug, Clone)]
struct Seat {
    proc: u32,
    task: u32,
    key: String,
    /// The list (and fence) the ticks are written to.
    resource: String,
    client: u8,
    until: Instant,
}

/// The tasks a campaign spawned (end watchers, handed-off tickers), awaited
/// before the next campaign so that their records are written.
type Spawned = Arc<Mutex<Vec<JoinHandle<()>>>>;

/// One fenced write of `token` onto the key's list; `by_hand`: the token
/// is given by hand (a spawned task is outside the term's hold).
async fn write(seat: &Seat, token: u64, by_hand: bool) -> Result<(), LockError> {
    let fence = if UNFENCED {
        format!("{}:t{token}", seat.resource)
    } else {
        seat.resource.clone()
    };
    let w = match seat.client {
        0 => lock_runtime::fenced(fence),
        _ => process::second().fenced_write(fence),
    };
    let w = w.cmd("RPUSH", [&seat.resource], token);
    let w = if by_hand { w.token(token) } else { w };
    w.run().await.map(|_| ())
}

/// One tick, recorded.
async fn tick(seat: &Seat, token: u64, handed: bool) -> TickResult {
    let sent = now_ns();
    let result = match write(seat, token, handed).await {
        Ok(()) => TickResult::Ok,
        Err(LockError::Fenced { .. }) => TickResult::Fenced,
        Err(_) => TickResult::Error,
    };
    let tick = Tick {
        proc: seat.proc,
        task: seat.task,
        key: seat.key.clone(),
        token,
        handed,
        sent,
        acked: now_ns(),
        result,
    };
    record::emit(&tick.line());
    result
}

/// The ticks of the term's future itself.
async fn body_ticks(seat: &Seat, token: u64, plan: TermPlan) -> Why {
    for i in 0..plan.ticks {
        if i > 0 {
            tokio::time::sleep(Duration::from_millis(plan.tick_ms)).await;
        }
        if Instant::now() >= seat.until {
            return Why::Stop;
        }
        if tick(seat, token, false).await == TickResult::Fenced {
            return Why::Refused;
        }
    }
    Why::Resign
}

/// The ticks of a task the leader handed them to: it stops when the term
/// ends (unless the defect is on).
async fn handed_ticks(seat: Seat, term: Term, plan: TermPlan) -> Why {
    let ended = term.ended();
    tokio::pin!(ended);
    for i in 0..plan.ticks {
        if i > 0 {
            let pause = tokio::time::sleep(Duration::from_millis(plan.tick_ms));
            tokio::select! {
                biased;
                _ = &mut ended, if !UNFENCED => return Why::None,
                () = pause => {}
            }
        }
        if Instant::now() >= seat.until {
            return Why::Stop;
        }
        if tick(&seat, term.token(), true).await == TickResult::Fenced {
            return Why::Refused;
        }
    }
    Why::Resign
}

/// A term's future: records its start, ticks (or hands the ticking to a
/// spawned task and waits for it), and says why it returns in `why`.
async fn serve(
    seat: Seat,
    term: Term,
    plan: TermPlan,
    why: Arc<Mutex<Why>>,
    spawned: Spawned,
) -> Result<(), LockError> {
    let start = TermStart {
        proc: seat.proc,
        task: seat.task,
        key: seat.key.clone(),
        token: term.token(),
        client: seat.client,
        at: now_ns(),
    };
    record::emit(&start.line());
    let result = if plan.handed {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let ticker = handed_ticks(seat, term.clone(), plan);
        let handle = tokio::spawn(async move {
            let _ = tx.send(ticker.await);
        });
        spawned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(handle);
        rx.await.unwrap_or(Why::None)
    } else {
        body_ticks(&seat, term.token(), plan).await
    };
    *why.lock().unwrap_or_else(|e| e.into_inner()) = result;
    Ok(())
}

/// The history's word for a term's end.
fn end_kind(end: TermEnd) -> EndKind {
    match end {
        TermEnd::Lost(LossReason::Expired) => EndKind::LostExpired,
        // Found in Redis: another owner's hold, the key gone, or freed.
        TermEnd::Lost(LossReason::Taken | LossReason::Gone | LossReason::ForceUnlocked) => {
            EndKind::LostTaken
        }
        TermEnd::Lost(_) => EndKind::LostOther,
        TermEnd::Returned => EndKind::Returned,
        TermEnd::ShutDown => EndKind::ShutDown,
        _ => EndKind::Cancelled,
    }
}

/// Records the term's end when it comes.
fn watch_end(seat: &Seat, term: Term, why: Arc<Mutex<Why>>) -> JoinHandle<()> {
    let seat = seat.clone();
    tokio::spawn(async move {
        let end = term.ended().await;
        let ended = TermEnded {
            proc: seat.proc,
            task: seat.task,
            key: seat.key,
            token: term.token(),
            at: now_ns(),
            end: end_kind(end),
            why: *why.lock().unwrap_or_else(|e| e.into_inner()),
        };
        record::emit(&ended.line());
    })
}

type Campaigning = Pin<Box<dyn Future<Output = Result<(), LockError>> + Send>>;

/// One campaign of `seat`: `lead` until a term's future returns (or the
/// run's end, plus 2 s), then the tasks it spawned are awaited (bounded).
async fn run_campaign(seat: Seat, c: Campaign, mut terms: Rng) {
    let spawned = Spawned::default();
    let (s, sp) = (seat.clone(), spawned.clone());
    let f = move |term: Term| {
        let plan = term_plan(&mut terms);
        let why = Arc::new(Mutex::new(Why::None));
        let watcher = watch_end(&s, term.clone(), why.clone());
        sp.lock().unwrap_or_else(|e| e.into_inner()).push(watcher);
        serve(s.clone(), term, plan, why, sp.clone())
    };
    let options = LockOptions::new().lease(Duration::from_millis(c.lease_ms));
    let lead: Campaigning = match c.client {
        0 => Box::pin(lock_runtime::lead(&seat.key, options, f)),
        _ => Box::pin(process::second().lead(&seat.key, options, f)),
    };
    let limit = seat.until.saturating_duration_since(Instant::now()) + Duration::from_secs(2);
    // Past the limit the campaign is dropped (the run is over).
    if let Ok(Err(e)) = tokio::time::timeout(limit, lead).await {
        eprintln!("worker {} task {}: lead: {e}", seat.proc, seat.task);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let handles = std::mem::take(&mut *spawned.lock().unwrap_or_else(|e| e.into_inner()));
    for handle in handles {
        let _ = tokio::time::timeout(Duration::from_secs(5), handle).await;
    }
}

/// One task: campaigns on its key until the run's end, calling `lead`
/// again as soon as it returned (a resignation, or a term that stepped
/// down), with a new draw of client and lease.
async fn task_loop(args: WorkerArgs, task: u32, until: Instant) {
    let path = [u64::from(args.proc), u64::from(task), u64::from(args.life)];
    let mut rng = Rng::derive(args.seed ^ 0xE1EC, &path);
    let key = format!(
        "e{}",
        (u64::from(args.proc) + u64::from(task)) % election::KEYS
    );
    for _ in 0..1_000_000 {
        if Instant::now() >= until {
            break;
        }
        let c = campaign(&mut rng);
        let seat = Seat {
            proc: args.proc,
            task,
            resource: election::resource(&args.prefix, &key),
            key: key.clone(),
            client: c.client,
            until,
        };
        let terms = Rng::new(rng.next_u64());
        run_campaign(seat, c, terms).await;
    }
}

/// The election worker's tasks, once both clients are connected; returns
/// when they are done (bounded).
pub async fn run(args: &WorkerArgs, until: Instant) {
    let handles: Vec<_> = (0..args.tasks)
        .map(|task| tokio::spawn(task_loop(args.clone(), task, until)))
        .collect();
    let all = async {
        for handle in handles {
            let _ = handle.await;
        }
    };
    let limit = until.saturating_duration_since(Instant::now()) + Duration::from_secs(20);
    if tokio::time::timeout(limit, all).await.is_err() {
        eprintln!(
            "worker {}: election tasks did not finish in time",
            args.proc
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn campaigns_and_terms_cover_their_ranges() {
        let mut rng = Rng::new(5);
        let (mut clients, mut leases, mut handed) = ([0; 2], [0; 3], 0);
        for _ in 0..1000 {
            let c = campaign(&mut rng);
            clients[usize::from(c.client)] += 1;
            let lease = LEASES_MS.iter().position(|&l| l == c.lease_ms);
            leases[lease.expect("a lease of the list")] += 1;
            let t = term_plan(&mut rng);
            assert!((3..=40).contains(&t.ticks) && (10..=40).contains(&t.tick_ms));
            handed += usize::from(t.handed);
        }
        assert!(clients.iter().all(|&n| n > 400), "{clients:?}");
        assert!(leases.iter().all(|&n| n > 250), "{leases:?}");
        assert!((250..420).contains(&handed), "{handed}");
    }
}
