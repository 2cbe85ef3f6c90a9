//! `connect` and `redlock` refuse nodes that cannot hold locks, at connect,
//! saying what the node is and what to use: a replica, a sentinel, a
//! cluster-enabled node.
mod servers;

use std::time::Duration;

use lock_runtime::{LockClient, LockError};
use servers::TcpServer;

async fn refused(url: &str) -> String {
    let error = LockClient::builder()
        .connect_timeout(Duration::from_secs(5))
        .connect(url)
        .await
        .expect_err("not a node that can hold locks");
    assert!(matches!(error, LockError::Connect(_)), "{error:?}");
    error.to_string()
}

fn replica_of(master: &TcpServer) -> TcpServer {
    TcpServer::start(&["--replicaof", "127.0.0.1", &master.port.to_string()])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_is_refused() {
    let master = TcpServer::start(&[]);
    let replica = replica_of(&master);
    let shown = refused(&replica.url("redis", "")).await;
    assert!(shown.contains("is a replica"), "{shown}");
    assert!(
        shown.contains(&format!("127.0.0.1:{}", replica.port)),
        "{shown}"
    );
    assert!(shown.contains("LockClient::sentinel"), "{shown}");
    LockClient::connect(&master.url("redis", ""))
        .await
        .expect("the master is fine");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_is_refused() {
    let master = TcpServer::start(&[]);
    let config = format!(
        "sentinel monitor mymaster 127.0.0.1 {} 1\nsentinel down-after-milliseconds mymaster 1000\n",
        master.port
    );
    let sentinel = TcpServer::start_with_config(&config, &["--sentinel"]);
    let shown = refused(&sentinel.url("redis", "")).await;
    assert!(shown.contains("is a Sentinel"), "{shown}");
    assert!(shown.contains("LockClient::sentinel"), "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_node_is_refused() {
    let node = TcpServer::start(&["--cluster-enabled", "yes"]);
    let shown = refused(&node.url("redis", "")).await;
    assert!(shown.contains("is a Redis Cluster node"), "{shown}");
    assert!(shown.contains("LockClient::cluster"), "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_nodes_must_be_masters() {
    let masters: Vec<TcpServer> = (0..3).map(|_| TcpServer::start(&[])).collect();
    let replica = replica_of(&masters[0]);
    let urls = [
        masters[1].url("redis", ""),
        masters[2].url("redis", ""),
        replica.url("redis", ""),
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
    let master = TcpServer::start(&[]);
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
        .query(&mut replica.connection(""))
        .expect("ACL SETUSER");
    LockClient::connect(&replica.url("redis", "plain:pw@"))
        .await
        .expect("the check is skipped");
}
