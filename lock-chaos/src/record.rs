//! Recording from inside a worker: the history file, and the guards that
//! write a body's or a call's line when it ends, however it ends.

use std::fs::File;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use crate::clock::now_ns;
use crate::history::{Body, Call, LockKind, NestKind, Nesting, Outcome, Resume};

static OUT: OnceLock<Mutex<File>> = OnceLock::new();
static CALL_IDS: AtomicU64 = AtomicU64::new(1);

/// Sends every record of this process to `file` (unbuffered: one write per
/// line, so a killed worker loses at most the line being written).
pub fn init(file: File) {
    let _ = OUT.set(Mutex::new(file));
}

/// Writes `line` (one record, with its newline) to the history file.
pub fn emit(line: &str) {
    if let Some(out) = OUT.get() {
        let mut file = out.lock().unwrap_or_else(|e| e.into_inner());
        let _ = file.write_all(line.as_bytes());
    }
}

/// A new call id, unique in this process.
pub fn next_call_id() -> u64 {
    CALL_IDS.fetch_add(1, Ordering::Relaxed)
}

/// Records that the call of `ctx` (a declared re-entry) was made in the
/// body of call `parent` as a `kind`.
pub fn nesting(ctx: &Ctx, parent: u64, kind: NestKind) {
    let nesting = Nesting {
        proc: ctx.proc,
        task: ctx.task,
        call: ctx.call,
        acq: ctx.acq,
        parent,
        kind,
    };
    emit(&nesting.line());
}

/// Records that the body of `ctx` runs now, with the fencing token it sees.
pub fn resume(ctx: &Ctx) {
    let resume = Resume {
        proc: ctx.proc,
        task: ctx.task,
        call: ctx.call,
        acq: ctx.acq,
        at: now_ns(),
        token: lock_runtime::fencing_token().unwrap_or(0),
    };
    emit(&resume.line());
}

/// Who makes a call: what its body and call lines share.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// Worker index.
    pub proc: u32,
    /// Task index.
    pub task: u32,
    /// Call id.
    pub call: u64,
    /// Acquisition (own call id, or the outer call's for a re-entry).
    pub acq: u64,
    /// Key, without prefix.
    pub key: String,
    /// Client (0 global, 1 second).
    pub client: u8,
    /// Whether the call is top-level (a drop then means the wrapper's
    /// timeout cancelled it).
    pub top: bool,
    /// 0 for a call on one key; for one key of a multi-key call, the call
    /// id of the set's first key.
    pub set: u64,
}

/// Writes the body's line when dropped: at its last statement
/// ([`BodyGuard::done`]) or when the body is dropped (cancelled, panicked,
/// stopped on a loss).
pub struct BodyGuard {
    body: Body,
}

impl BodyGuard {
    /// Call as the body's first statement: records the token of the
    /// innermost hold (`fencing_token()`).
    pub fn enter(ctx: &Ctx) -> BodyGuard {
        let enter = now_ns();
        BodyGuard::entered(ctx, enter, lock_runtime::fencing_token().unwrap_or(0))
    }

    /// Call as the first statement of a multi-key call's body, once per key
    /// of its set, with the time read once for all: records the token of
    /// the key `ctx` names (`fencing_token_of`).
    pub fn enter_key(ctx: &Ctx, enter: u64) -> BodyGuard {
        let token = lock_runtime::fencing_token_of(&ctx.key).unwrap_or(0);
        BodyGuard::entered(ctx, enter, token)
    }

    fn entered(ctx: &Ctx, enter: u64, token: u64) -> BodyGuard {
        BodyGuard {
            body: Body {
                proc: ctx.proc,
                task: ctx.task,
                call: ctx.call,
                acq: ctx.acq,
                key: ctx.key.clone(),
                client: ctx.client,
                enter,
                exit: 0,
                token,
                done: false,
            },
        }
    }

    /// Call as the body's last statement.
    pub fn done(mut self) {
        self.body.done = true;
    }
}

impl Drop for BodyGuard {
    fn drop(&mut self) {
        self.body.exit = now_ns();
        emit(&self.body.line());
    }
}

/// Writes the call's line when it ends or is dropped.
pub struct CallGuard {
    call: Call,
    top: bool,
    outcome: Option<Outcome>,
}

impl CallGuard {
    /// Call just before the locked call starts: its wait, lease and
    /// waiter lease (ms), and the kind of lock it asks for.
    pub fn start(
        ctx: &Ctx,
        (wait_ms, lease_ms, waiter_lease_ms): (u64, u64, u64),
        kind: LockKind,
    ) -> CallGuard {
        CallGuard {
            call: Call {
                proc: ctx.proc,
                task: ctx.task,
                call: ctx.call,
                acq: ctx.acq,
                key: ctx.key.clone(),
                client: ctx.client,
                start: now_ns(),
                end: 0,
                wait: wait_ms * 1_000_000,
                lease: lease_ms * 1_000_000,
                outcome: Outcome::Other,
                kind,
                waiter_lease: waiter_lease_ms * 1_000_000,
                set: ctx.set,
            },
            top: ctx.top,
            outcome: None,
        }
    }

    /// The call returned this.
    pub fn finish(mut self, outcome: Outcome) {
        self.outcome = Some(outcome);
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        self.call.end = now_ns();
        self.call.outcome = match self.outcome {
            Some(outcome) => outcome,
            None if std::thread::panicking() => Outcome::Panic,
            None if self.top => Outcome::Cancelled,
            None => Outcome::Dropped,
        };
        emit(&self.call.line());
    }
}
