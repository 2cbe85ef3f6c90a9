//! Saying why a Cluster connect failed, when the nodes given are not a
//! Redis Cluster.

use redis::{Client, RedisError};

/// The error to report for `error`, a failed cluster connect through
/// `urls`: if a node answers that cluster support is off, an error that
/// says so and names the constructor to use; otherwise `error`.
pub(crate) async fn explain(urls: &[String], error: RedisError) -> RedisError {
    for url in urls {
        let Ok(client) = Client::open(url.as_str()) else {
            continue;
        };
        let node = client.get_connection_info().addr().to_string();
        let Ok(mut con) = client.get_multiplexed_async_connection().await else {
            continue;
        };
        let info: Result<String, _> = redis::cmd("INFO")
            .arg("cluster")
            .query_async(&mut con)
            .await;
        if info.is_ok_and(|info| info.contains("cluster_enabled:0")) {
            return RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "not a Redis Cluster node (cluster_enabled:0): use LockClient::connect for one \
                 Redis node (or LockClient::sentinel for a master watched by sentinels)",
                node,
            ));
        }
    }
    error
}
