//! Connecting a client's backend: one node, Redlock nodes, a master found
//! through Sentinel, or a Redis Cluster. The handler of the pushes its
//! connections get comes from the builder (see `subscriptions.rs`).

use std::sync::Arc;
use std::time::Duration;

use redis::PushInfo;

use super::Backend;
use crate::node_name::node_name;
use crate::route::cluster::ClusterBackend;
use crate::route::node::{RedisBackend, RedisConfig};
use crate::route::redlock::{Node, RedlockBackend};
use crate::route::sentinel::{MasterAuth, SentinelBackend};
use crate::route::target::Expected;
use crate::route::BackendError;

/// Everything a connect needs, built by the client's builder.
pub(crate) struct Connecting<F> {
    pub target: Target,
    /// For one node, the Sentinel master and the Cluster.
    pub config: RedisConfig,
    /// For each Redlock node.
    pub node_config: RedisConfig,
    pub client_id: Arc<str>,
    pub on_push: F,
    /// Connect on first use (one node and Redlock only).
    pub lazy: bool,
    /// Calls from other current-thread runtimes take connections of their
    /// own (one node only).
    pub local: bool,
    pub node_timeout: Duration,
    pub drift_factor: f64,
    pub master_auth: MasterAuth,
}

impl<F: Fn(PushInfo) + Clone + Send + Sync + 'static> Connecting<F> {
    /// Connects to the target, and checks (unless lazy) that it is what
    /// the constructor expects.
    pub(crate) async fn backend(self) -> Result<Backend, BackendError> {
        let Connecting {
            target,
            config,
            node_config,
            client_id,
            on_push,
            lazy,
            local,
            node_timeout,
            drift_factor,
            master_auth,
        } = self;
        match target {
            Target::One(url) => {
                let modes = (lazy, local);
                let backend = RedisBackend::connect(&url, &config, client_id, on_push, modes)
                    .await
                    .map_err(|e| at_node(&url, e))?;
                if !lazy {
                    let node = node_name(&url);
                    backend.check_target(&node, Expected::Single).await?;
                }
                Ok(Backend::Redis(backend))
            }
            Target::Quorum(urls) => {
                let mut nodes = Vec::with_capacity(urls.len());
                for url in urls {
                    let (id, on_push) = (client_id.clone(), on_push.clone());
                    // Always lazy: a node that is down now joins later.
                    let backend =
                        RedisBackend::connect(&url, &node_config, id, on_push, (true, false))
                            .await
                            .map_err(|e| at_node(&url, e))?;
                    let name = node_name(&url);
                    nodes.push(Node { name, backend });
                }
                let redlock = RedlockBackend::new(nodes, node_timeout, drift_factor);
                if !lazy {
                    redlock.check().await?;
                }
                Ok(Backend::Redlock(redlock))
            }
            Target::Sentinel(urls, master) => {
                let push = (client_id, Arc::new(on_push) as _);
                let backend =
                    SentinelBackend::connect(urls, master, master_auth, config, push).await?;
                Ok(Backend::Sentinel(backend))
            }
            Target::Cluster(urls) => {
                let sync = config.sync_replicas;
                let backend =
                    ClusterBackend::connect(&urls, &config, client_id, on_push, sync).await?;
                Ok(Backend::Cluster(backend))
            }
        }
    }
}

/// What a client connects to.
pub(crate) enum Target {
    One(String),
    Quorum(Vec<String>),
    /// The sentinels' URLs and the master's name.
    Sentinel(Vec<String>, String),
    Cluster(Vec<String>),
}

impl Target {
    /// Where the locks live: the node, or the Redlock nodes in order.
    pub(crate) fn place(&self) -> Box<str> {
        match self {
            Target::One(url) => node_name(url).as_ref().into(),
            Target::Quorum(urls) | Target::Cluster(urls) => {
                let mut nodes: Vec<Arc<str>> = urls.iter().map(|u| node_name(u)).collect();
                nodes.sort();
                nodes.join(",").into()
            }
            Target::Sentinel(urls, master) => {
                let mut nodes: Vec<Arc<str>> = urls.iter().map(|u| node_name(u)).collect();
                nodes.sort();
                format!("sentinel:{master}@{}", nodes.join(",")).into()
            }
        }
    }
}

/// `error`, met connecting to `url`, with the node named (without
/// credentials), the cause said once, what to do when the cause says (see
/// [`crate::advice`]), and its kind kept.
pub(crate) fn at_node(url: &str, error: redis::RedisError) -> redis::RedisError {
    crate::advice::at_connect(&node_name(url), url.starts_with("redis://"), &error)
}
