//! Redlock: one lock across N independent Redis masters, decided by quorum.
//!
//! Every operation goes to all nodes at once, each bounded by the node
//! timeout, so a node that is down or frozen costs only that timeout. A lock
//! is taken when a majority (N/2 + 1) took it within its lease; otherwise the
//! holds that were taken are given back and the caller retries. A renewal
//! that a majority confirms keeps the lock; one that a majority refuses means
//! it is lost; anything in between (nodes that did not answer) is retried
//! until the lock's validity ends.
//!
//! The fencing token is the largest token of the nodes that granted the
//! lock, written back to the granting nodes that answered less before the
//! lock counts as taken: a quorum then keeps it, and any later quorum
//! includes one of those nodes, which answers a larger token.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::{ErrorKind, RedisError};
use tokio::time::Instant;

use super::node::RedisBackend;
use super::target::Expected;
use super::{BackendError, Lane};
use crate::error::NodeFailure;
use crate::kind::{Acquire, Release, RenewItem, Renewal};

/// One master.
#[derive(Clone)]
pub(crate) struct Node {
    /// The URL without credentials, for error messages.
    pub name: Arc<str>,
    pub backend: RedisBackend,
}

/// The nodes and how long each may take.
#[derive(Clone)]
pub(crate) struct RedlockBackend {
    nodes: Arc<[Node]>,
    node_timeout: Duration,
    /// The margin kept off a lease for clock drift: lease x factor + 2 ms.
    drift_factor: f64,
}

/// What each node answered, in node order.
type Answers<T> = Vec<Result<T, RedisError>>;

impl RedlockBackend {
    pub(crate) fn new(nodes: Vec<Node>, node_timeout: Duration, drift_factor: f64) -> Self {
        RedlockBackend {
            nodes: nodes.into(),
            node_timeout,
            drift_factor,
        }
    }

    /// The client's runtime, where the node operations' timers run: the
    /// caller's runtime may have no timer.
    pub(crate) fn home(&self) -> &tokio::runtime::Handle {
        self.nodes[0].backend.home()
    }

    /// How many nodes make a majority.
    pub(crate) fn quorum(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    /// Runs `op` on every node at once, each within the node timeout.
    pub(crate) async fn on_all<'a, T, F, Fut>(&'a self, op: F) -> Answers<T>
    where
        F: Fn(&'a RedisBackend) -> Fut,
        Fut: Future<Output = Result<T, RedisError>> + 'a,
    {
        self.on_all_named(|node, _| op(node)).await
    }

    /// As [`on_all`](Self::on_all), with each node's name.
    async fn on_all_named<'a, T, F, Fut>(&'a self, op: F) -> Answers<T>
    where
        F: Fn(&'a RedisBackend, &'a str) -> Fut,
        Fut: Future<Output = Result<T, RedisError>> + 'a,
    {
        let timeout = self.node_timeout;
        let calls = self.nodes.iter().map(|node| {
            let call = op(&node.backend, &node.name);
            async move {
                match tokio::time::timeout(timeout, call).await {
                    Ok(answer) => answer,
                    Err(_) => Err(RedisError::from((
                        redis::ErrorKind::Io,
                        "no answer within the node timeout",
                    ))),
                }
            }
        });
        futures_util::future::join_all(calls).await
    }

    /// The failures among `answers`, named by node.
    pub(crate) fn failures<T>(&self, answers: Answers<T>) -> Vec<NodeFailure> {
        self.nodes
            .iter()
            .zip(answers)
            .filter_map(|(node, answer)| {
                answer.err().map(|error| NodeFailure {
                    node: node.name.to_string(),
                    error,
                })
            })
            .collect()
    }

    fn no_quorum<T>(&self, reached: usize, answers: Answers<T>) -> BackendError {
        BackendError::NoQuorum {
            needed: self.quorum(),
            reached,
            failures: self.failures(answers),
        }
    }

    pub(crate) async fn acquire(
        &self,
        key: &str,
        owner: &str,
        lease: Duration,
    ) -> Result<Acquire, BackendError> {
        let sent = Instant::now();
        let answers = self
            .on_all(|node| node.acquire(&Lane::Home, key, owner, lease))
            .await;
        let drift = lease.mul_f64(self.drift_factor) + Duration::from_millis(2);
        let mut tokens = Vec::new();
        let mut ttls = Vec::new();
        for answer in &answers {
            match answer {
                Ok(Acquire::Acquired(token)) => tokens.push(*token),
                Ok(Acquire::Held(ttl)) => ttls.push(*ttl),
                // Redlock nodes are independent masters: never asked to wait
                // for replicas.
                Ok(Acquire::NotReplicated { .. }) | Err(_) => {}
            }
        }
        if tokens.len() >= self.quorum() {
            let token = tokens.iter().copied().max().unwrap_or_default();
            let kept = self.write_back(&answers, key, owner, token).await;
            if kept >= self.quorum() && sent.elapsed() + drift < lease {
                return Ok(Acquire::Acquired(token));
            }
        }
        let answered = tokens.len() + ttls.len();
        if answered < self.quorum() {
            // The caller follows an acquire whose outcome is unknown with a
            // release on every node.
            return Err(self.no_quorum(answered, answers));
        }
        if !tokens.is_empty() || answers.iter().any(Result::is_err) {
            // Not taken: give back what was taken, on every node, also where
            // the acquire failed (it may still land there).
            let _ = self
                .on_all(|node| node.release(&Lane::Home, key, owner, 0))
                .await;
        }
        if tokens.is_empty() && ttls.len() >= self.quorum() {
            // Another owner holds a majority: wait for the earliest expiry,
            // or for a release notice.
            return Ok(Acquire::Held(ttls.into_iter().flatten().min()));
        }
        // Some nodes granted it but not a majority: a split vote, a release
        // that has reached only some nodes yet (its notice may have woken us
        // early), or too slow. Retry after a random short delay.
        Ok(Acquire::Held(Some(random_delay())))
    }

    /// Writes `token` back to the nodes that granted the lock with a smaller
    /// one; how many granting nodes now keep `token`.
    async fn write_back(
        &self,
        answers: &Answers<Acquire>,
        key: &str,
        owner: &str,
        token: u64,
    ) -> usize {
        let granted = |i: usize| matches!(answers[i], Ok(Acquire::Acquired(_)));
        let behind = |i: usize| matches!(answers[i], Ok(Acquire::Acquired(t)) if t < token);
        let keeping = (0..self.nodes.len())
            .filter(|&i| granted(i) && !behind(i))
            .count();
        if (0..self.nodes.len()).all(|i| !behind(i)) {
            return keeping;
        }
        let timeout = self.node_timeout;
        let writes = self.nodes.iter().enumerate().map(|(i, node)| async move {
            if !behind(i) {
                return false;
            }
            let write = node.backend.fence(key, owner, token);
            matches!(tokio::time::timeout(timeout, write).await, Ok(Ok(true)))
        });
        let written = futures_util::future::join_all(writes).await;
        keeping + written.into_iter().filter(|w| *w).count()
    }

    /// Freed when a quorum freed the owner's hold; not held when a quorum
    /// did not have it; otherwise not known (an error).
    pub(crate) async fn release(
        &self,
        key: &str,
        owner: &str,
        token: u64,
    ) -> Result<Release, BackendError> {
        let answers = self
            .on_all(|node| node.release(&Lane::Home, key, owner, token))
            .await;
        let freed = answers
            .iter()
            .filter(|a| matches!(a, Ok(Release::Freed)))
            .count();
        let not_held = answers
            .iter()
            .filter(|a| matches!(a, Ok(Release::NotHeld)))
            .count();
        if freed >= self.quorum() {
            return Ok(Release::Freed);
        }
        if not_held >= self.quorum() {
            return Ok(Release::NotHeld);
        }
        // The failed nodes may have held it: we cannot tell.
        Err(self.no_quorum(freed + not_held, answers))
    }

    /// A lock is renewed when a majority reset its lease, gone when a
    /// majority said it is gone or another owner's, and not known otherwise.
    pub(crate) async fn renew(
        &self,
        items: &[RenewItem<'_>],
    ) -> Result<Vec<Renewal>, BackendError> {
        let answers = self.on_all(|node| node.renew(items)).await;
        if answers.iter().all(|a| a.is_err()) {
            return Err(self.no_quorum(0, answers));
        }
        let mut renewed = vec![0; items.len()];
        let mut gone = vec![0; items.len()];
        for found in answers.iter().flatten() {
            for (i, renewal) in found.iter().enumerate() {
                renewed[i] += usize::from(*renewal == Renewal::Renewed);
                gone[i] += usize::from(*renewal == Renewal::Gone);
            }
        }
        let quorum = self.quorum();
        let decide = |(renewed, gone): (usize, usize)| {
            if renewed >= quorum {
                Renewal::Renewed
            } else if gone >= quorum {
                Renewal::Gone
            } else {
                Renewal::Unknown
            }
        };
        Ok(renewed.into_iter().zip(gone).map(decide).collect())
    }

    /// Subscribes on every node; enough if one node will tell.
    pub(crate) async fn subscribe(&self, key: &str) -> Result<(), BackendError> {
        let answers = self.on_all(|node| node.subscribe(key)).await;
        if answers.iter().any(|a| a.is_ok()) {
            return Ok(());
        }
        Err(self.no_quorum(0, answers))
    }

    pub(crate) async fn unsubscribe(&self, key: &str) -> Result<(), BackendError> {
        let _ = self.on_all(|node| node.unsubscribe(key)).await;
        Ok(())
    }

    /// Checks every node (see [`target`](super::target)): at least a quorum
    /// must answer, and every node that answers must be a master outside a
    /// cluster.
    pub(crate) async fn check(&self) -> Result<(), BackendError> {
        let answers = self
            .on_all_named(|node, name| node.check_target(name, Expected::RedlockNode))
            .await;
        let wrong = answers.iter().find_map(|a| {
            a.as_ref()
                .err()
                .filter(|e| e.kind() == ErrorKind::InvalidClientConfig)
        });
        if let Some(wrong) = wrong {
            return Err(BackendError::Redis(wrong.clone()));
        }
        let answered = answers.iter().filter(|a| a.is_ok()).count();
        if answered >= self.quorum() {
            return Ok(());
        }
        Err(self.no_quorum(answered, answers))
    }
}

/// 5 to 50 ms, so that clients that split a vote do not collide again.
fn random_delay() -> Duration {
    let random = uuid::Uuid::new_v4().as_u128();
    Duration::from_millis(5 + (random % 46) as u64)
}
