//! What a worker process is told on its command line, and the second
//! client that its workloads (the locked calls of `worker.rs`, the
//! campaigns of `election_worker.rs`) share.

use std::sync::OnceLock;

use lock_runtime::LockClient;

/// What a worker is told on its command line.
#[derive(Debug, Clone)]
pub struct WorkerArgs {
    /// Worker index.
    pub proc: u32,
    /// The run's seed.
    pub seed: u64,
    /// How many tasks.
    pub tasks: u32,
    /// Server URLs: one node or five for Redlock (through the proxies),
    /// the cluster's nodes, or the sentinels.
    pub urls: Vec<String>,
    /// The deployment: `single`, `redlock`, `cluster` or `sentinel`.
    pub deploy: String,
    /// The key prefix.
    pub prefix: String,
    /// Where to write the history.
    pub out: String,
    /// How long to make calls (ms).
    pub run_ms: u64,
    /// Whether sibling calls always take two different keys.
    pub distinct_siblings: bool,
    /// Whether the tasks run the kinds workload ([`crate::plan::kinds_op`])
    /// instead of the plain one.
    pub lock_kinds: bool,
    /// The share of top-level operations that are multi-key calls
    /// ([`crate::multi::op`], %).
    pub multi: u64,
    /// Whether the tasks campaign for leadership instead
    /// ([`crate::election_worker`]).
    pub election: bool,
    /// How many times this worker was started before in the run (a killed
    /// worker is started again, with the next number).
    pub life: u32,
}

static SECOND: OnceLock<LockClient> = OnceLock::new();

/// Sets the worker's second client, once.
pub fn set_second(client: LockClient) {
    let _ = SECOND.set(client);
}

/// The worker's second client (connected before any task runs).
pub fn second() -> &'static LockClient {
    SECOND.get().expect("second client")
}
