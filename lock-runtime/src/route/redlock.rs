//! Redlock: one lock across N independent Redis masters, decided by quorum.
//!
//! Every operation goes to all nodes at once, each bounded by the node
//! timeout, so a node that is down or frozen costs only that timeout. How
//! the answers combine is the lock kind's rule (`kind/quorum.rs`).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::{ErrorKind, RedisError};

use super::node::RedisBackend;
use super::target::Expected;
use super::BackendError;
use crate::error::NodeFailure;

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
pub(crate) type Answers<T> = Vec<Result<T, RedisError>>;

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

    /// The nodes, in the order given.
    pub(crate) fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// How long each node may take to answer.
    pub(crate) fn node_timeout(&self) -> Duration {
        self.node_timeout
    }

    /// The margin kept off `lease` for clock drift: lease x factor + 2 ms.
    pub(crate) fn drift(&self, lease: Duration) -> Duration {
        lease.mul_f64(self.drift_factor) + Duration::from_millis(2)
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
        self.on_all_named(|_, node, _| op(node)).await
    }

    /// As [`on_all`](Self::on_all), with each node's index (for calls
    /// whose arguments differ per node).
    pub(crate) async fn on_each<'a, T, F, Fut>(&'a self, op: F) -> Answers<T>
    where
        F: Fn(usize, &'a RedisBackend) -> Fut,
        Fut: Future<Output = Result<T, RedisError>> + 'a,
    {
        self.on_all_named(|i, node, _| op(i, node)).await
    }

    /// As [`on_all`](Self::on_all), with each node's index and name.
    async fn on_all_named<'a, T, F, Fut>(&'a self, op: F) -> Answers<T>
    where
        F: Fn(usize, &'a RedisBackend, &'a str) -> Fut,
        Fut: Future<Output = Result<T, RedisError>> + 'a,
    {
        let timeout = self.node_timeout;
        let calls = self.nodes.iter().enumerate().map(|(i, node)| {
            let call = op(i, &node.backend, &node.name);
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

    pub(crate) fn no_quorum<T>(&self, reached: usize, answers: Answers<T>) -> BackendError {
        BackendError::NoQuorum {
            needed: self.quorum(),
            reached,
            failures: self.failures(answers),
        }
    }

    /// Subscribes on every node; enough if one node will tell.
    pub(crate) async fn subscribe(&self, keys: &[&str]) -> Result<(), BackendError> {
        let answers = self.on_all(|node| node.subscribe(keys)).await;
        if answers.iter().any(|a| a.is_ok()) {
            return Ok(());
        }
        Err(self.no_quorum(0, answers))
    }

    pub(crate) async fn unsubscribe(&self, keys: &[&str]) -> Result<(), BackendError> {
        let _ = self.on_all(|node| node.unsubscribe(keys)).await;
        Ok(())
    }

    /// Checks every node (see [`target`](super::target)): at least a quorum
    /// must answer, and every node that answers must be a master outside a
    /// cluster.
    pub(crate) async fn check(&self) -> Result<(), BackendError> {
        let answers = self
            .on_all_named(|_, node, name| node.check_target(name, Expected::RedlockNode))
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
