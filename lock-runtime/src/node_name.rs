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
        Err(_) => unparsed(url).into(),
    }
}

/// What a message may show of a URL that failed to parse: its scheme and
/// address, never what may carry a secret (user info before an `@`, a
/// query string, `?pass=…` on a `unix://` URL, or a fragment).
fn unparsed(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let address = rest.rsplit('@').next().unwrap_or_default();
    if scheme.is_empty() {
        address.to_owned()
    } else {
        format!("{scheme}://{address}")
    }
}

#[cfg(test)]
mod tests {
    use super::node_name;

    #[test]
    fn a_url_that_fails_to_parse_is_named_without_its_secrets() {
        for (url, shown) in [
            ("unix:///tmp/r.sock?db=x&pass=S3cret", "unix:///tmp/r.sock"),
            ("redis://u:S3cret@[::1:1/", "redis://[::1:1/"),
            ("redis://:S3cret@host:1/x?protocol=9", "redis://host:1/x"),
            ("rediss://h:1/#S3cret", "rediss://h:1/"),
            ("S3cret@h", "h"),
        ] {
            assert_eq!(&*node_name(url), shown, "{url}");
        }
    }
}
