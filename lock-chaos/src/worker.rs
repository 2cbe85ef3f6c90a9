//! The worker process: tasks that make random locked calls through two
//! clients and record every body and call.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use lock_runtime::{
    distributed_lock, LockClient, LockClientBuilder, LockError, LockMode, LockOptions,
};

use crate::history::{LockKind, NestKind, Outcome};
use crate::multi;
use crate::plan::{self, How, Inner, Op, Space, Step};
use crate::process::{self, WorkerArgs};
use crate::record::{self, BodyGuard, CallGuard, Ctx};
use crate::rng::Rng;

/// A body's error: the lock's, or its own.
#[derive(Debug)]
pub enum CallError {
    /// From the lock.
    Lock(LockError),
    /// The body's own error.
    Body,
}

impl From<LockError> for CallError {
    fn from(e: LockError) -> Self {
        CallError::Lock(e)
    }
}

type Boxed = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The client settings of every worker: short leases and timeouts, so that
/// faults matter within seconds.
pub fn builder(prefix: &str) -> LockClientBuilder {
    LockClient::builder()
        .key_prefix(prefix)
        .default_lease(Duration::from_millis(500))
        .default_wait(Duration::from_secs(1))
        .command_timeout(Duration::from_millis(200))
        .connect_timeout(Duration::from_secs(1))
        .node_timeout(Duration::from_millis(80))
}

/// The `WAIT` timeout of `sync_replicas(1, ..)` on Cluster and Sentinel.
pub const SYNC_TIMEOUT_MS: u64 = 250;

async fn connect(prefix: &str, deploy: &str, urls: &[String]) -> Result<LockClient, LockError> {
    let mut last = None;
    let refs: Vec<&str> = urls.iter().map(String::as_str).collect();
    let synced = || builder(prefix).sync_replicas(1, Duration::from_millis(SYNC_TIMEOUT_MS));
    for _ in 0..20 {
        let result = match deploy {
            "cluster" => synced().cluster(&refs).await,
            "sentinel" => synced().sentinel(&refs, crate::topology::MASTER_NAME).await,
            _ if urls.len() == 1 => builder(prefix).connect(&urls[0]).await,
            _ => builder(prefix).redlock(&refs).await,
        };
        match result {
            Ok(client) => return Ok(client),
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(last.expect("at least one attempt"))
}

#[distributed_lock(key = "k<key>", lease = "500ms", wait = "1s")]
async fn annotated(key: u64, step: &Step, ctx: &Ctx) -> Result<(), CallError> {
    body(step, ctx).await
}

/// A plain call on a read-write key of the kinds workload: a writer.
#[distributed_lock(key = "rw<key>", lease = "500ms", wait = "1s")]
async fn annotated_rw(key: u64, step: &Step, ctx: &Ctx) -> Result<(), CallError> {
    body(step, ctx).await
}

/// The body of every call: records itself, sleeps, makes its nested calls,
/// and at its end spawns its detached call, if any.
async fn body(step: &Step, ctx: &Ctx) -> Result<(), CallError> {
    let guard = BodyGuard::enter(ctx);
    let half = Duration::from_millis(step.sleep_ms / 2);
    tokio::time::sleep(half).await;
    let detached = inner(step, ctx).await;
    tokio::time::sleep(Duration::from_millis(step.sleep_ms) - half).await;
    if step.panic {
        panic!("lock-chaos: planned panic in a body");
    }
    guard.done();
    if let Some(rest) = detached {
        detach(rest);
    }
    if step.fail {
        Err(CallError::Body)
    } else {
        Ok(())
    }
}

/// The body of a multi-key call, whose keys `ctxs` name: records a body
/// on each key (with that key's token), sleeps, and makes its re-entry
/// (a call on one key of the set) under that key's acquisition.
async fn multi_body(step: &Step, ctxs: &[Ctx]) -> Result<(), CallError> {
    let enter = crate::clock::now_ns();
    let guards: Vec<BodyGuard> = ctxs
        .iter()
        .map(|ctx| BodyGuard::enter_key(ctx, enter))
        .collect();
    let half = Duration::from_millis(step.sleep_ms / 2);
    tokio::time::sleep(half).await;
    let held = match &step.inner {
        Inner::Reenter(inner) => ctxs.iter().find(|c| c.key == inner.key_name()),
        _ => None,
    };
    // The plan gives a multi-key body a re-entry or nothing: no detached
    // call to spawn.
    let _ = inner(step, held.unwrap_or(&ctxs[0])).await;
    tokio::time::sleep(Duration::from_millis(step.sleep_ms) - half).await;
    if step.panic {
        panic!("lock-chaos: planned panic in a body");
    }
    for guard in guards {
        guard.done();
    }
    if step.fail {
        Err(CallError::Body)
    } else {
        Ok(())
    }
}

/// The body's nested calls; a detached call still running after its first
/// poll is returned, to be spawned when the body returns.
async fn inner(step: &Step, ctx: &Ctx) -> Option<Boxed> {
    let reentry = |kind: Option<NestKind>| Site {
        task: ctx.task,
        reentry_of: Some(ctx.acq),
        top: false,
        nesting: kind.map(|kind| (ctx.call, kind)),
    };
    match &step.inner {
        Inner::Nothing => {}
        Inner::Reenter(inner) => call(inner, reentry(None)).await,
        Inner::Nested(inner) => call(inner, Site::nested(ctx.task)).await,
        Inner::Siblings(a, b) => {
            let site = Site::nested(ctx.task);
            tokio::join!(call(a, site), call(b, site));
        }
        Inner::HeldSiblings(a, b) => {
            let site = reentry(Some(NestKind::Sibling));
            tokio::join!(call(a, site), call(b, site));
        }
        Inner::Detached(inner) => {
            let mut fut = call(inner, reentry(Some(NestKind::Detached)));
            let poll = Duration::from_millis(plan::DETACH_POLL_MS);
            if tokio::time::timeout(poll, &mut fut).await.is_err() {
                return Some(fut);
            }
        }
        Inner::Ticks { ticks, tick_ms } => {
            for _ in 0..*ticks {
                tokio::time::sleep(Duration::from_millis(*tick_ms)).await;
                record::resume(ctx);
            }
        }
    }
    None
}

/// Detached calls still running, awaited before the worker exits so that
/// their records are written.
static DETACHED: Mutex<Vec<JoinHandle<()>>> = Mutex::new(Vec::new());

/// Spawns the rest of a detached call.
fn detach(rest: Boxed) {
    let mut running = DETACHED.lock().unwrap_or_else(|e| e.into_inner());
    running.retain(|handle| !handle.is_finished());
    running.push(tokio::spawn(rest));
}

/// Awaits the detached calls still running.
async fn detached_ended() {
    let handles = std::mem::take(&mut *DETACHED.lock().unwrap_or_else(|e| e.into_inner()));
    for handle in handles {
        let _ = handle.await;
    }
}

fn classify(result: Result<(), CallError>) -> Outcome {
    match result {
        Ok(()) => Outcome::Ok,
        Err(CallError::Body) => Outcome::BodyErr,
        Err(CallError::Lock(e)) => match e {
            LockError::Lost { reason, .. } => match reason {
                lock_runtime::LossReason::Expired => Outcome::LostExpired,
                lock_runtime::LossReason::Detached => Outcome::LostDetached,
                // Taken, gone, freed, or a release that could not confirm
                // the hold (`Unconfirmed`): a loss all the same.
                _ => Outcome::LostTaken,
            },
            LockError::Timeout { .. } => Outcome::Timeout,
            LockError::Backend { .. } => Outcome::Backend,
            LockError::NoQuorum { .. } => Outcome::NoQuorum,
            LockError::NotReplicated { .. } => Outcome::NotReplicated,
            LockError::KindMismatch { .. } => Outcome::KindMismatch,
            _ => Outcome::Other,
        },
    }
}

/// Where a call is made.
#[derive(Debug, Clone, Copy)]
struct Site {
    /// The task.
    task: u32,
    /// The acquisition it re-enters, for a declared re-entry.
    reentry_of: Option<u64>,
    /// Whether the call is top-level.
    top: bool,
    /// The call whose body makes it, and how, for a sibling on the held
    /// key or a detached call.
    nesting: Option<(u64, NestKind)>,
}

impl Site {
    /// A separate acquisition, nested in a body of `task`.
    fn nested(task: u32) -> Site {
        Site {
            task,
            reentry_of: None,
            top: false,
            nesting: None,
        }
    }
}

/// One locked call, made at `site`.
fn call(step: &Step, site: Site) -> Boxed {
    site_call(step.clone(), site)
}

fn site_call(step: Step, site: Site) -> Boxed {
    if !step.set.is_empty() {
        return multi_call(step, site);
    }
    Box::pin(async move {
        let id = record::next_call_id();
        let ctx = Ctx {
            proc: PROC.get().copied().unwrap_or(0),
            task: site.task,
            call: id,
            acq: site.reentry_of.unwrap_or(id),
            key: step.key_name(),
            client: step.client,
            top: site.top,
            set: 0,
        };
        if let Some((parent, kind)) = site.nesting {
            record::nesting(&ctx, parent, kind);
        }
        let guard = CallGuard::start(&ctx, times(&step), step.kind);
        let options = options(&step);
        let result = match (step.how, step.client) {
            (How::Annotated, _) if step.space == Space::ReadWrite => {
                annotated_rw(step.key, &step, &ctx).await
            }
            (How::Annotated, _) => annotated(step.key, &step, &ctx).await,
            (How::RunLocked, 0) => {
                lock_runtime::run_locked(&ctx.key, options, body(&step, &ctx)).await
            }
            (How::RunLocked, _) => {
                let second = process::second();
                second
                    .run_locked(&ctx.key, options, body(&step, &ctx))
                    .await
            }
        };
        guard.finish(classify(result));
    })
}

/// A call's wait, lease and waiter lease (ms), as its record keeps them.
fn times(step: &Step) -> (u64, u64, u64) {
    let waiter_lease = step
        .waiter_lease_ms
        .unwrap_or(plan::DEFAULT_WAITER_LEASE_MS);
    (step.wait_ms, step.lease_ms, waiter_lease)
}

/// A call's options: lease, wait, renewal, kind and waiter lease.
fn options(step: &Step) -> LockOptions {
    let mut options = LockOptions::new()
        .lease(Duration::from_millis(step.lease_ms))
        .wait(Duration::from_millis(step.wait_ms))
        .renew(step.renew);
    options = match step.kind {
        LockKind::Plain => options,
        LockKind::Read => options.mode(LockMode::Read),
        LockKind::Write => options.mode(LockMode::Write),
        LockKind::Permits(n) => options.permits(n),
        LockKind::Fair => options.fair(true),
    };
    if let Some(ms) = step.waiter_lease_ms {
        options = options.waiter_lease(Duration::from_millis(ms));
    }
    options
}

/// A multi-key call (`run_locked_all` on the keys the step lists, on its
/// client), made at the top of a task. Each distinct key of the set is
/// recorded as a call and a body of its own, with an id of its own and
/// the set's (its first key's id), so that every rule sees a hold of each
/// key, with that key's fencing token.
fn multi_call(step: Step, site: Site) -> Boxed {
    Box::pin(async move {
        let listed: Vec<String> = step.set.iter().map(|&k| step.name_of(k)).collect();
        let mut ctxs: Vec<Ctx> = Vec::with_capacity(listed.len());
        for key in &listed {
            if ctxs.iter().any(|c| &c.key == key) {
                continue;
            }
            let id = record::next_call_id();
            ctxs.push(Ctx {
                proc: PROC.get().copied().unwrap_or(0),
                task: site.task,
                call: id,
                acq: id,
                key: key.clone(),
                client: step.client,
                top: site.top,
                set: ctxs.first().map_or(id, |first| first.call),
            });
        }
        let guards: Vec<CallGuard> = ctxs
            .iter()
            .map(|ctx| CallGuard::start(ctx, times(&step), step.kind))
            .collect();
        let options = options(&step);
        let body = multi_body(&step, &ctxs);
        let result = match step.client {
            0 => lock_runtime::run_locked_all(&listed, options, body).await,
            _ => {
                let second = process::second();
                second.run_locked_all(&listed, options, body).await
            }
        };
        let outcome = classify(result);
        for guard in guards {
            guard.finish(outcome);
        }
    })
}

static PROC: OnceLock<u32> = OnceLock::new();

/// Runs one top-level operation: maybe in a spawned task, maybe under a
/// client-side timeout.
async fn run_op(op: Op, task: u32) {
    let timeout = op.timeout_ms.map(Duration::from_millis);
    let fut = async move {
        let site = Site {
            top: true,
            ..Site::nested(task)
        };
        let call = site_call(op.step, site);
        match timeout {
            Some(limit) => {
                let _ = tokio::time::timeout(limit, call).await;
            }
            None => call.await,
        }
    };
    if op.spawn {
        // A panic stays in the spawned task; its records are written.
        let _ = tokio::spawn(fut).await;
    } else {
        fut.await;
    }
}

async fn task_loop(args: WorkerArgs, task: u32, until: Instant) {
    let mut rng = Rng::derive(args.seed, &[u64::from(args.proc), u64::from(task)]);
    for _ in 0..1_000_000 {
        if Instant::now() >= until {
            break;
        }
        let multi = args.multi > 0 && rng.chance(args.multi);
        let op = if multi {
            let setting = multi::Setting {
                kinds: args.lock_kinds,
                cluster: args.deploy == "cluster",
            };
            multi::op(&mut rng, setting)
        } else if args.lock_kinds {
            plan::kinds_op(&mut rng, args.deploy == "redlock")
        } else {
            plan::op(&mut rng, args.distinct_siblings)
        };
        run_op(op, task).await;
        let pause = rng.range(0, 5);
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
}

/// The worker's main: connects both clients, runs the tasks, returns when
/// they are done (bounded).
pub async fn run(args: WorkerArgs) -> Result<(), String> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&args.out)
        .map_err(|e| format!("open {}: {e}", args.out))?;
    record::init(file);
    let _ = PROC.set(args.proc);
    std::panic::set_hook(Box::new(|info| {
        if !info.to_string().contains("planned panic") {
            eprintln!("{info}");
        }
    }));
    let global = connect(&args.prefix, &args.deploy, &args.urls)
        .await
        .map_err(|e| e.to_string())?;
    lock_runtime::init(global).map_err(|e| e.to_string())?;
    let second = connect(&args.prefix, &args.deploy, &args.urls)
        .await
        .map_err(|e| e.to_string())?;
    process::set_second(second);
    let until = Instant::now() + Duration::from_millis(args.run_ms);
    if args.election {
        crate::election_worker::run(&args, until).await;
        return Ok(());
    }
    let handles: Vec<_> = (0..args.tasks)
        .map(|task| tokio::spawn(task_loop(args.clone(), task, until)))
        .collect();
    let all = async {
        for handle in handles {
            let _ = handle.await;
        }
        detached_ended().await;
    };
    if tokio::time::timeout(Duration::from_millis(args.run_ms + 20_000), all)
        .await
        .is_err()
    {
        eprintln!("worker {}: tasks did not finish in time", args.proc);
    }
    Ok(())
}
