//! The history: one tab-separated line per body, call and fault, written by
//! hand (no serde), and parsed back for the checker.
//!
//! - `B proc task call acq key client enter exit token end`: a body ran.
//!   `acq` is the call id of the acquisition the body runs under: its own
//!   call id, or for a declared re-entry the outer call's acquisition.
//!   `end` is `done` (last statement reached) or `dropped` (cancelled,
//!   panicked, or stopped on a loss).
//! - `C proc task call acq key client start end wait lease outcome kind
//!   waiter_lease set`: how a call ended (times in ns on `CLOCK_MONOTONIC`,
//!   wait, lease and waiter lease in ns). `kind` is the kind of lock the
//!   call asked for: `plain` (no kind option), `read`, `write`,
//!   `permits:N` or `fair`. A fair call sends its first request, which
//!   takes its place in the line, as it starts: its `start` is when it
//!   began to wait, and its body's `enter` when it entered. `set` is 0 for
//!   a call on one key; a multi-key call (`run_locked_all`) is recorded as
//!   one call (and one body) per distinct key of its set, each with a call
//!   id of its own, and `set` is the call id of the set's first key in
//!   each. Lines of older histories may lack the last fields: without
//!   `kind` and `waiter_lease` a call is plain, without `set` on one key.
//! - `N proc task call acq parent kind`: how a declared re-entry was made
//!   in the body of call `parent` (which runs under acquisition `acq`):
//!   `sibling` (one of two calls joined with `tokio::join!` on the key the
//!   body holds) or `detached` (polled briefly, then spawned at the end of
//!   the body so that it may outlive the outer call).
//! - `R proc task call acq at token`: the body of `call` ran at `at` (a
//!   resume after a sleep), and `fencing_token()` there was `token` (0:
//!   none).
//! - `F kind target start end`: a fault window.
//! - `T`, `K`, `E`, `L`: the election mode's terms, ticks, term ends and
//!   lists ([`crate::election`]).

use std::fmt;

use crate::election::Records;

/// How a locked call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Outcome {
    /// The body returned `Ok`, and the call returned it.
    Ok,
    /// The body returned its own error.
    BodyErr,
    /// `LockError::Lost { reason: Expired }`.
    LostExpired,
    /// `LockError::Lost { reason: Taken }`.
    LostTaken,
    /// `LockError::Lost { reason: Detached }`: a re-entered call that
    /// outlived the hold it ran under, stopped. Not a loss of the lock: it
    /// excuses no overlap.
    LostDetached,
    /// `LockError::Timeout`.
    Timeout,
    /// `LockError::Backend`.
    Backend,
    /// `LockError::NoQuorum`.
    NoQuorum,
    /// `LockError::NotReplicated`: granted, too few replicas acknowledged
    /// it, given back.
    NotReplicated,
    /// Dropped by the worker's `tokio::time::timeout` wrapper.
    Cancelled,
    /// The body panicked (in a spawned task).
    Panic,
    /// The call's future was dropped from outside (its outer body ended).
    Dropped,
    /// `LockError::KindMismatch`: the key was live as a kind that cannot
    /// share it with the call's.
    KindMismatch,
    /// Any other error.
    Other,
}

/// Every outcome, in the order of the summary.
pub const OUTCOMES: [Outcome; 14] = [
    Outcome::Ok,
    Outcome::BodyErr,
    Outcome::LostExpired,
    Outcome::LostTaken,
    Outcome::LostDetached,
    Outcome::Timeout,
    Outcome::Backend,
    Outcome::NoQuorum,
    Outcome::NotReplicated,
    Outcome::Cancelled,
    Outcome::Panic,
    Outcome::Dropped,
    Outcome::KindMismatch,
    Outcome::Other,
];

impl Outcome {
    /// The word in the history.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::BodyErr => "body_err",
            Outcome::LostExpired => "lost_expired",
            Outcome::LostTaken => "lost_taken",
            Outcome::LostDetached => "lost_detached",
            Outcome::Timeout => "timeout",
            Outcome::Backend => "backend",
            Outcome::NoQuorum => "no_quorum",
            Outcome::NotReplicated => "not_replicated",
            Outcome::Cancelled => "cancelled",
            Outcome::Panic => "panic",
            Outcome::Dropped => "dropped",
            Outcome::KindMismatch => "kind_mismatch",
            Outcome::Other => "other",
        }
    }

    /// The outcome for a word of the history.
    pub fn parse(s: &str) -> Option<Outcome> {
        OUTCOMES.iter().copied().find(|o| o.as_str() == s)
    }

    /// Whether the call was told that its lock was lost.
    pub fn is_lost(self) -> bool {
        matches!(self, Outcome::LostExpired | Outcome::LostTaken)
    }

    /// Whether the call was not ended by the library itself (the worker
    /// dropped it, or it panicked).
    pub fn is_cut(self) -> bool {
        matches!(self, Outcome::Cancelled | Outcome::Dropped | Outcome::Panic)
    }

    /// Whether the call ended with its release awaited: the lock is free
    /// right after.
    pub fn is_clean(self) -> bool {
        matches!(self, Outcome::Ok | Outcome::BodyErr)
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The kind of lock a call asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum LockKind {
    /// No kind option: the plain (exclusive) lock.
    #[default]
    Plain,
    /// `mode(LockMode::Read)`: shares the key with other readers.
    Read,
    /// `mode(LockMode::Write)`: exclusive, the same lock as a plain call.
    Write,
    /// `permits(n)`: at most n holders at once.
    Permits(u32),
    /// `fair(true)`: exclusive; waiters served in the order they began to
    /// wait.
    Fair,
}

impl LockKind {
    /// The word in the history.
    pub fn as_str(self) -> String {
        match self {
            LockKind::Plain => "plain".into(),
            LockKind::Read => "read".into(),
            LockKind::Write => "write".into(),
            LockKind::Permits(n) => format!("permits:{n}"),
            LockKind::Fair => "fair".into(),
        }
    }

    /// The kind for a word of the history.
    pub fn parse(s: &str) -> Option<LockKind> {
        Some(match s {
            "plain" => LockKind::Plain,
            "read" => LockKind::Read,
            "write" => LockKind::Write,
            "fair" => LockKind::Fair,
            _ => LockKind::Permits(s.strip_prefix("permits:")?.parse().ok()?),
        })
    }

    /// Whether a holder of this kind is the only one inside: plain, write
    /// and fair.
    pub fn is_exclusive(self) -> bool {
        matches!(self, LockKind::Plain | LockKind::Write | LockKind::Fair)
    }

    /// Whether holders of this kind and of `other` may be inside at once:
    /// two readers, or two permit holders of one count (at most that many:
    /// rule 8 counts them).
    pub fn shares_with(self, other: LockKind) -> bool {
        match (self, other) {
            (LockKind::Read, LockKind::Read) => true,
            (LockKind::Permits(a), LockKind::Permits(b)) => a == b,
            _ => false,
        }
    }
}

impl fmt::Display for LockKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.as_str())
    }
}

/// One body: from its first statement to its last (or its drop).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Body {
    /// Worker index.
    pub proc: u32,
    /// Task index within the worker.
    pub task: u32,
    /// The call that ran this body.
    pub call: u64,
    /// The acquisition this body runs under (`call`, or the outer call's).
    pub acq: u64,
    /// The lock key (without prefix).
    pub key: String,
    /// Which client: 0 the global one, 1 the second one.
    pub client: u8,
    /// First statement (ns).
    pub enter: u64,
    /// Last statement or drop (ns).
    pub exit: u64,
    /// The fencing token seen in the body (0: none).
    pub token: u64,
    /// Whether the last statement was reached.
    pub done: bool,
}

/// One call: how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// Worker index.
    pub proc: u32,
    /// Task index within the worker.
    pub task: u32,
    /// Call id, unique within the worker.
    pub call: u64,
    /// The acquisition (`call`, or the outer call's for a re-entry).
    pub acq: u64,
    /// The lock key (without prefix).
    pub key: String,
    /// Which client.
    pub client: u8,
    /// When the call started (ns).
    pub start: u64,
    /// When it returned or was dropped (ns).
    pub end: u64,
    /// Its `wait` (ns).
    pub wait: u64,
    /// Its lease (ns).
    pub lease: u64,
    /// How it ended.
    pub outcome: Outcome,
    /// The kind of lock it asked for.
    pub kind: LockKind,
    /// How long a place it kept in a line (a fair waiter's, a waiting
    /// writer's claim ahead of new readers) lives without a heartbeat (ns;
    /// 0 in older histories).
    pub waiter_lease: u64,
    /// 0 for a call on one key; for one key of a multi-key call, the call
    /// id of the set's first key (the same in the records of every key of
    /// the set).
    pub set: u64,
}

/// One fault window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// What kind (`pause`, `restart`, ...).
    pub kind: String,
    /// Which server (`node0`...).
    pub target: String,
    /// Start (ns).
    pub start: u64,
    /// End (ns).
    pub end: u64,
}

/// How a declared re-entry was made in its outer body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NestKind {
    /// One of two calls joined with `tokio::join!` on the key the outer
    /// body holds, through the same client.
    Sibling,
    /// Polled briefly in the outer body, then spawned when the outer body
    /// returns, so that it may outlive the outer call.
    Detached,
}

impl NestKind {
    /// The word in the history.
    pub fn as_str(self) -> &'static str {
        match self {
            NestKind::Sibling => "sibling",
            NestKind::Detached => "detached",
        }
    }

    /// The kind for a word of the history.
    pub fn parse(s: &str) -> Option<NestKind> {
        [NestKind::Sibling, NestKind::Detached]
            .into_iter()
            .find(|k| k.as_str() == s)
    }
}

/// Where a declared re-entry was made: in the body of call `parent`, under
/// acquisition `acq`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nesting {
    /// Worker index.
    pub proc: u32,
    /// Task index within the worker.
    pub task: u32,
    /// The re-entering call.
    pub call: u64,
    /// The acquisition it re-enters.
    pub acq: u64,
    /// The call whose body made it.
    pub parent: u64,
    /// How it was made.
    pub kind: NestKind,
}

/// A moment a body was seen running: a resume after one of its sleeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resume {
    /// Worker index.
    pub proc: u32,
    /// Task index within the worker.
    pub task: u32,
    /// The call whose body ran.
    pub call: u64,
    /// The acquisition that body runs under.
    pub acq: u64,
    /// When (ns).
    pub at: u64,
    /// `fencing_token()` at that moment (0: none).
    pub token: u64,
}

impl Nesting {
    /// The history line (with a newline).
    pub fn line(&self) -> String {
        format!(
            "N\t{}\t{}\t{}\t{}\t{}\t{}\n",
            self.proc,
            self.task,
            self.call,
            self.acq,
            self.parent,
            self.kind.as_str()
        )
    }
}

impl Resume {
    /// The history line (with a newline).
    pub fn line(&self) -> String {
        format!(
            "R\t{}\t{}\t{}\t{}\t{}\t{}\n",
            self.proc, self.task, self.call, self.acq, self.at, self.token
        )
    }
}

impl Body {
    /// The history line (with a newline).
    pub fn line(&self) -> String {
        let end = if self.done { "done" } else { "dropped" };
        format!(
            "B\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
            self.proc,
            self.task,
            self.call,
            self.acq,
            self.key,
            self.client,
            self.enter,
            self.exit,
            self.token,
            end
        )
    }
}

impl Call {
    /// The history line (with a newline).
    pub fn line(&self) -> String {
        format!(
            "C\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
            self.proc,
            self.task,
            self.call,
            self.acq,
            self.key,
            self.client,
            self.start,
            self.end,
            self.wait,
            self.lease,
            self.outcome,
            self.kind,
            self.waiter_lease,
            self.set
        )
    }

    /// Whether the call is a declared re-entry.
    pub fn is_reentry(&self) -> bool {
        self.acq != self.call
    }

    /// Whether the call is (one key of) a multi-key call.
    pub fn in_set(&self) -> bool {
        self.set != 0
    }
}

impl Fault {
    /// The history line (with a newline).
    pub fn line(&self) -> String {
        format!(
            "F\t{}\t{}\t{}\t{}\n",
            self.kind, self.target, self.start, self.end
        )
    }
}

/// Everything recorded in one run (one mode).
#[derive(Debug, Clone, Default)]
pub struct History {
    /// All bodies.
    pub bodies: Vec<Body>,
    /// All calls that reported an end.
    pub calls: Vec<Call>,
    /// All fault windows.
    pub faults: Vec<Fault>,
    /// How the siblings and detached calls were made.
    pub nestings: Vec<Nesting>,
    /// The resumes recorded in bodies.
    pub resumes: Vec<Resume>,
    /// The election mode's records.
    pub election: Records,
    /// Lines that did not parse (a worker killed mid-line).
    pub bad_lines: usize,
}

impl History {
    /// Every record as history lines (bodies, calls, nestings, resumes,
    /// then faults).
    pub fn to_text(&self) -> String {
        let bodies = self.bodies.iter().map(Body::line);
        let calls = self.calls.iter().map(Call::line);
        bodies
            .chain(calls)
            .chain(self.nestings.iter().map(Nesting::line))
            .chain(self.resumes.iter().map(Resume::line))
            .chain(self.faults.iter().map(Fault::line))
            .chain(std::iter::once(self.election.to_text()))
            .collect()
    }

    /// The earliest time in the history (ms offsets in reports count from it).
    pub fn origin(&self) -> u64 {
        let calls = self.calls.iter().map(|c| c.start);
        calls
            .chain(self.faults.iter().map(|f| f.start))
            .chain(self.election.origin())
            .min()
            .unwrap_or(0)
    }

    /// Adds the lines of `text`.
    pub fn parse_into(&mut self, text: &str) {
        for line in text.lines().filter(|l| !l.is_empty()) {
            if self.parse_line(line).is_none() {
                self.bad_lines += 1;
            }
        }
    }

    fn parse_line(&mut self, line: &str) -> Option<()> {
        let f: Vec<&str> = line.split('\t').collect();
        let n = |i: usize| f.get(i).and_then(|s| s.parse::<u64>().ok());
        match (f[0], f.len()) {
            ("B", 11) => self.bodies.push(Body {
                proc: n(1)? as u32,
                task: n(2)? as u32,
                call: n(3)?,
                acq: n(4)?,
                key: f[5].to_owned(),
                client: n(6)? as u8,
                enter: n(7)?,
                exit: n(8)?,
                token: n(9)?,
                done: f[10] == "done",
            }),
            ("C", 12 | 14 | 15) => self.calls.push(Call {
                proc: n(1)? as u32,
                task: n(2)? as u32,
                call: n(3)?,
                acq: n(4)?,
                key: f[5].to_owned(),
                client: n(6)? as u8,
                start: n(7)?,
                end: n(8)?,
                wait: n(9)?,
                lease: n(10)?,
                outcome: Outcome::parse(f[11])?,
                kind: match f.get(12) {
                    Some(kind) => LockKind::parse(kind)?,
                    None => LockKind::Plain,
                },
                waiter_lease: if f.len() > 13 { n(13)? } else { 0 },
                set: if f.len() > 14 { n(14)? } else { 0 },
            }),
            ("N", 7) => self.nestings.push(Nesting {
                proc: n(1)? as u32,
                task: n(2)? as u32,
                call: n(3)?,
                acq: n(4)?,
                parent: n(5)?,
                kind: NestKind::parse(f[6])?,
            }),
            ("R", 7) => self.resumes.push(Resume {
                proc: n(1)? as u32,
                task: n(2)? as u32,
                call: n(3)?,
                acq: n(4)?,
                at: n(5)?,
                token: n(6)?,
            }),
            ("F", 5) => self.faults.push(Fault {
                kind: f[1].to_owned(),
                target: f[2].to_owned(),
                start: n(3)?,
                end: n(4)?,
            }),
            ("T" | "K" | "E" | "L", _) => return self.election.parse(&f),
            _ => return None,
        }
        Some(())
    }
}

#[cfg(test)]
#[path = "history_tests.rs"]
mod tests;
