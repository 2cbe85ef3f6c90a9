//! What the rules of [`crate::checker`] share: the history indexed by
//! call, the checker's limits, one broken rule, and the fault windows over
//! a stretch of time.

use std::collections::HashMap;

use crate::history::{Body, Call, Fault, History, LockKind, Nesting};

/// The checker's limits (ns).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The clients' command timeout.
    pub command_timeout: u64,
    /// The clients' connect timeout.
    pub connect_timeout: u64,
    /// The longest lease of any call.
    pub lease_max: u64,
    /// Slack of rule 3 (loaded cores).
    pub call_slack: u64,
    /// Longest unexplained stretch of rule 4.
    pub gap_slack: u64,
    /// How long after its hold's end rule 6 still accepts a moment of a
    /// body: a poll that began before the end can record its moment later
    /// on loaded cores.
    pub resume_slack: u64,
    /// How long before a body's first statement, or before the end of a
    /// call that got no body, its grant may already hold the key (rules 4
    /// and 7): 0 on one node and Redlock; with `sync_replicas`, the `WAIT`
    /// between the grant and the body, and for a call refused with
    /// `NotReplicated`, the attempt and the release that gives it back.
    pub grant_lead: u64,
    /// Rule 7's bound: how long after a call's release returned its key
    /// may still be held (a release sent again to a new master after a
    /// failover). `None`: rule 7 is off (one node, Redlock).
    pub release_bound: Option<u64>,
    /// Rule 16's slack: how long after a hold's last possible trusted end
    /// (a stall's start plus the lease) its body may still run. `None`:
    /// rule 16 is off (deployments where one node's stall does not stall
    /// every renewal: Redlock, Cluster, Sentinel).
    pub stall_slack: Option<u64>,
}

impl Limits {
    /// The limits of the Cluster and Sentinel modes, whose clients use
    /// `sync_replicas(1, sync_timeout)`: a grant may lead its body by the
    /// `WAIT`, and a refused one its call's end by an attempt and a
    /// release (3 command timeouts and the `WAIT`); rule 7 on, with a
    /// bound of 5 s (2 s for failure detection and promotion, 3 s more).
    pub fn replicated(sync_timeout: u64) -> Limits {
        let base = Limits::default();
        Limits {
            grant_lead: sync_timeout + 3 * base.command_timeout,
            release_bound: Some(5_000_000_000),
            stall_slack: None,
            ..base
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            command_timeout: 200_000_000,
            connect_timeout: 1_000_000_000,
            lease_max: 1_000_000_000,
            call_slack: 1_000_000_000,
            gap_slack: 200_000_000,
            resume_slack: 5_000_000,
            grant_lead: 0,
            release_bound: None,
            stall_slack: Some(100_000_000),
        }
    }
}

/// One broken rule.
#[derive(Debug, Clone)]
pub struct Violation {
    /// 1 to 16 (11 to 15: the election mode's).
    pub rule: u8,
    /// The key.
    pub key: String,
    /// Around when (ns).
    pub at: u64,
    /// What was seen.
    pub message: String,
    /// What kind of case (`same task`, `across processes`, an outcome):
    /// the output shows a few of each.
    pub shape: String,
}

/// The history with its calls indexed.
pub struct Index<'a> {
    /// The history.
    pub history: &'a History,
    calls: HashMap<(u32, u64), &'a Call>,
    bodies: HashMap<(u32, u64), &'a Body>,
    nestings: HashMap<(u32, u64), &'a Nesting>,
}

impl<'a> Index<'a> {
    /// Indexes `history`.
    pub fn new(history: &'a History) -> Index<'a> {
        let calls = history
            .calls
            .iter()
            .map(|c| ((c.proc, c.call), c))
            .collect();
        let bodies = history
            .bodies
            .iter()
            .map(|b| ((b.proc, b.call), b))
            .collect();
        let nestings = history
            .nestings
            .iter()
            .map(|n| ((n.proc, n.call), n))
            .collect();
        Index {
            history,
            calls,
            bodies,
            nestings,
        }
    }

    /// The call `call` of process `proc`.
    pub fn call(&self, proc: u32, call: u64) -> Option<&'a Call> {
        self.calls.get(&(proc, call)).copied()
    }

    /// The body of call `call` of process `proc`.
    pub fn body(&self, proc: u32, call: u64) -> Option<&'a Body> {
        self.bodies.get(&(proc, call)).copied()
    }

    /// How call `call` of process `proc` was made, if it is a sibling on a
    /// held key or a detached call.
    pub fn nesting(&self, proc: u32, call: u64) -> Option<&'a Nesting> {
        self.nestings.get(&(proc, call)).copied()
    }

    /// Whether the body's call, or its acquisition's, was told `Lost` (or
    /// never reported: the worker died), or was cut by the worker
    /// (cancelled, dropped, panicked) while a fault was on: a fault can
    /// erase or expire a grant, and a cut call can no longer be told.
    pub fn lost(&self, b: &Body) -> bool {
        [b.call, b.acq]
            .iter()
            .any(|&id| match self.call(b.proc, id) {
                Some(c) if c.outcome.is_cut() => {
                    let (from, to) = (c.start.min(b.enter), b.exit);
                    faults_over(&self.history.faults, from, to, 0)
                        .next()
                        .is_some()
                }
                Some(c) => c.outcome.is_lost(),
                None => true,
            })
    }

    /// The kind of the hold the body runs under: its acquisition's call's
    /// (plain when that call never reported).
    pub fn kind(&self, b: &Body) -> LockKind {
        self.call(b.proc, b.acq).map_or(LockKind::Plain, |c| c.kind)
    }

    /// Whether the lock was surely free right after the body: its call and
    /// acquisition both ended cleanly.
    pub fn clean(&self, b: &Body) -> bool {
        [b.call, b.acq]
            .iter()
            .all(|&id| self.call(b.proc, id).is_some_and(|c| c.outcome.is_clean()))
    }

    /// The bodies on each key, by enter time.
    pub fn by_key(&self) -> HashMap<&'a str, Vec<&'a Body>> {
        let mut map: HashMap<&str, Vec<&Body>> = HashMap::new();
        for b in &self.history.bodies {
            map.entry(b.key.as_str()).or_default().push(b);
        }
        for list in map.values_mut() {
            list.sort_by_key(|b| (b.enter, b.exit));
        }
        map
    }
}

/// Fault windows that overlap `[from, to]`, each stretched by `after`.
pub fn faults_over(
    faults: &[Fault],
    from: u64,
    to: u64,
    after: u64,
) -> impl Iterator<Item = &Fault> {
    faults
        .iter()
        .filter(move |f| f.start <= to && from <= f.end + after)
}
