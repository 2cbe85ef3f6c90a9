//! `connect` and `redlock` refuse nodes that cannot hold locks, at connect,
//! saying what the node is and what to use: a replica, a sentinel, a
//! cluster-enabled node.
mod support;

use std::time::Duration;

use lock_runtime::{LockClient, LockError};
use lock_testkit::Server;

async fn refused(url: &str) -> String {
    let error = LockClient::builder()
        .connect_timeout(Duration::from_secs(5))
        .connect(url)
        .await
        .expect_err("not a node that can hold locks");
    assert!(matches!(error, LockError::Connect(_)), "{error:?}");
    error.to_string()
}

fn replica_of(master: &Server) -> Server {
    Server::tcp(&["--replicaof", "127.0.0.1", &master.port().to_string()])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_is_refused() {
    let master = Server::tcp(&[]);
    let replica = replica_of(&master);
    let shown = refused(&replica.url_as("redis", "")).await;
    assert!(shown.contains("is a replica"), "{shown}");
    assert!(
        shown.contains(&format!("127.0.0.1:{}", replica.port())),
        "{shown}"
    );
    assert!(shown.contains("LockClient::sentinel"), "{shown}");
    LockClient::connect(&master.url_as("redis", ""))
        .await
        .expect("the master is fine");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_is_refused() {
    let master = Server::tcp(&[]);
    let sentinel = Server::sentinel(master.port(), 1);
    let shown = refused(&sentinel.url_as("redis", "")).await;
    assert!(shown.contains("is a Sentinel"), "{shown}");
    assert!(shown.contains("LockClient::sentinel"), "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_node_is_refused() {
    let node = Server::tcp(&["--cluster-enabled", "yes"]);
    let shown = refused(&node.url_as("redis", "")).await;
    assert!(shown.contains("is a Redis Cluster node"), "{shown}");
    assert!(shown.contains("LockClient::cluster"), "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_nodes_must_be_masters() {
    let masters: Vec<Server> = (0..3).map(|_| Server::tcp(&[])).collect();
    let replica = replica_of(&masters[0]);
    let urls = [
        masters[1].url_as("redis", ""),
        masters[2].url_as("redis", ""),
        replica.url_as("redis", ""),
    ];
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let error = LockClient::builder()
        .node_timeout(Duration::from_millis(500))
        .redlock(&urls)
        .await
        .expect_err("a replica among the nodes");
    let shown = error.to_string();
    assert!(matches!(error, LockError::Connect(_)), "{error:?}");
    assert!(shown.contains("is a replica"), "{shown}");
    assert!(
        shown.contains("Redlock nodes must be independent masters"),
        "{shown}"
    );
}

/// A user allowed neither ROLE nor CLUSTER skips the check (and connects).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_role_skips_the_check() {
    let master = Server::tcp(&[]);
    let replica = replica_of(&master);
    let _: () = redis::cmd("ACL")
        .arg(
            &[
                "SETUSER",
                "plain",
                "on",
                ">pw",
                "allkeys",
                "allchannels",
                "+@all",
                "-role",
                "-cluster",
            ][..],
        )
        .query(&mut replica.connection_as(""))
        .expect("ACL SETUSER");
    LockClient::connect(&replica.url_as("redis", "plain:pw@"))
        .await
        .expect("the check is skipped");
}
