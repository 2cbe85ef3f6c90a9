//! One acquire's way through a slot whose master is changing: the Cluster
//! route as a lock call that takes keys sees it ([`Following`]).
//!
//! While a master fails over or a slot migrates, the cluster refuses a
//! request on the slot for a moment (`CLUSTERDOWN`, `TRYAGAIN`) or points
//! elsewhere (`MOVED`, `ASK`) after redis-rs's own retries gave up on the
//! redirect; before the cluster notices that a master died (its
//! `cluster-node-timeout`), the master's address refuses connections. Each
//! of those says the request did not run this time, so the same request
//! (the same acquisition: its owner id, which an acquire that meets it
//! answers with its token, as when redis-rs sends a request again) is sent
//! again after a short pause, until it runs or the call's wait ends: a
//! call whose wait outlasts the failover takes its keys, and one that ends
//! first fails with the last error, which for the four answers says the
//! slot's master is changing (see
//! [`LockError::Backend`](crate::LockError::Backend)); all are retryable.
//! Nothing has given the acquisition back meanwhile: the caller does that
//! only once the request failed. Any other error ends the call as before:
//! a dropped connection or a timeout (a frozen master, say) leaves the
//! request's outcome unknown, and the caller gives the acquisition back.
//!
//! Releases are sent as they are (a release that fails unanswered is sent
//! again by the failover follower), and so is everything else.
//!
//! It also remembers whose request failed: a call over keys of several
//! slots names the node of the slot that failed, not the first key's.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use redis::{Cmd, ErrorKind, FromRedisValue, RedisError, Value};
use tokio::time::Instant;

use super::ClusterBackend;
use crate::io::polled_on;
use crate::replica_sync::ReplicaSync;
use crate::route::{Lane, Notices, Route, ScriptCall};

/// The first pause before a request is sent again; each next one is twice
/// as long, up to [`LONGEST_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(50);

/// The longest pause between two sends of one request.
const LONGEST_PAUSE: Duration = Duration::from_millis(500);

/// The most sends of one request (at [`LONGEST_PAUSE`], more than a
/// minute of waiting).
const MOST_SENDS: u32 = 150;

/// The cluster route for one call that takes keys until `until` (the end
/// of its wait).
pub(crate) struct Following<'a> {
    cluster: &'a ClusterBackend,
    until: Instant,
    /// The key whose request failed last, if one did.
    failed: Mutex<Option<String>>,
}

impl<'a> Following<'a> {
    /// `cluster`, for a call whose wait ends at `until`.
    pub(crate) fn new(cluster: &'a ClusterBackend, until: Instant) -> Self {
        Following {
            cluster,
            until,
            failed: Mutex::new(None),
        }
    }

    /// The key (the one that routed it) of the request that failed last.
    pub(crate) fn failed_key(&self) -> Option<String> {
        self.failed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Sends the request that `send` makes, on `key`, again after a pause
    /// while it fails with a slot's master changing and the pause ends
    /// before `until`; remembers `key` if it fails in the end.
    async fn follow<T, F>(&self, key: &str, mut send: impl FnMut() -> F) -> Result<T, RedisError>
    where
        F: std::future::Future<Output = Result<T, RedisError>>,
    {
        let mut pause = FIRST_PAUSE;
        let mut sends = 1;
        loop {
            let answer = send().await;
            let Err(error) = &answer else {
                return answer;
            };
            let resume = Instant::now() + pause;
            if followed(error) && resume < self.until && sends < MOST_SENDS {
                // On the client's runtime's timer: the caller's may have none.
                polled_on(&self.cluster.home, tokio::time::sleep(pause)).await;
                pause = (pause * 2).min(LONGEST_PAUSE);
                sends += 1;
                continue;
            }
            *self.failed.lock().unwrap_or_else(PoisonError::into_inner) = Some(key.to_owned());
            return answer;
        }
    }
}

/// Whether `error` says the request did not run this time because the
/// master of its slot is changing (a failover, a slot migration): `MOVED`
/// or `ASK` that redis-rs did not follow to the end, `TRYAGAIN`,
/// `CLUSTERDOWN`; or a master that refuses connections, or none known for
/// the slot.
fn followed(error: &RedisError) -> bool {
    error.is_connection_refusal()
        || error.kind() == ErrorKind::ClusterConnectionNotFound
        || matches!(
            error.code(),
            Some("MOVED" | "ASK" | "TRYAGAIN" | "CLUSTERDOWN")
        )
}

impl Route for Following<'_> {
    async fn run<T: FromRedisValue + Send>(
        &self,
        lane: &Lane,
        call: &ScriptCall<'_>,
    ) -> Result<T, RedisError> {
        if call.replay.is_some() {
            return self.cluster.run(lane, call).await;
        }
        self.follow(call.key, || self.cluster.run(lane, call)).await
    }

    fn sync(&self) -> Option<ReplicaSync> {
        self.cluster.sync()
    }

    async fn run_synced(
        &self,
        call: ScriptCall<'_>,
        undo: Option<Cmd>,
    ) -> Result<(Value, usize), RedisError> {
        if call.replay.is_some() {
            return self.cluster.run_synced(call, undo).await;
        }
        let (script, key) = (call.script, call.key);
        let send = || {
            let again = ScriptCall {
                script,
                key,
                cmd: call.cmd.clone(),
                replay: None,
                coalesce: None,
            };
            self.cluster.run_synced(again, undo.clone())
        };
        self.follow(key, send).await
    }

    fn batches(&self, keys: &[&str]) -> Vec<Vec<usize>> {
        self.cluster.batches(keys)
    }

    fn script_groups(&self, keys: &[&str]) -> Vec<Vec<usize>> {
        self.cluster.script_groups(keys)
    }

    fn notices(&self) -> Notices {
        self.cluster.notices()
    }

    async fn subscribe(&self, keys: &[&str]) -> Result<(), RedisError> {
        Route::subscribe(self.cluster, keys).await
    }

    async fn unsubscribe(&self, keys: &[&str]) -> Result<(), RedisError> {
        Route::unsubscribe(self.cluster, keys).await
    }

    fn client_id(&self) -> &str {
        self.cluster.client_id()
    }
}
