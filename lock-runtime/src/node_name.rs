//! How a node is named in messages: its address, never its credentials.

use std::sync::Arc;

/// A node's address and database without credentials, for error messages
/// (and to tell nodes apart).
pub(crate) fn node_name(url: &str) -> Arc<str> {
    match redis::Client::open(url) {
        Ok(client) => {
            let info = client.get_connection_info();
            match info.redis_settings().db() {
                0 => info.addr().to_string().into(),
                db => format!("{}/{db}", info.addr()).into(),
            }
        }
        Err(_) => url.split('@').next_back().unwrap_or_default().into(),
    }
}
