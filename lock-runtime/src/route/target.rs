//! The check at connect that a node can hold locks: a master outside a
//! cluster. A replica would fail every call with `READONLY`, a Cluster node
//! most keys with `MOVED`, and a sentinel every script; each is refused at
//! connect instead, with the constructor to use.
//!
//! One round trip: `ROLE` (master, slave or sentinel) and `CLUSTER MYID`
//! (answers on a cluster node only) in one pipeline. A user not allowed
//! either (`NOPERM`), or a server that does not know it, skips that part;
//! `NOAUTH` (no password given to a server that needs one) fails it.

use redis::aio::ConnectionLike;
use redis::{ErrorKind, RedisError, RedisResult, Value};

/// What the node is meant to be.
#[derive(Clone, Copy)]
pub(crate) enum Expected {
    /// The one node of `LockClient::connect`.
    Single,
    /// One of the independent masters of `LockClient::redlock`.
    RedlockNode,
}

/// Checks that the node behind `con`, named `node`, is a master outside a
/// cluster.
///
/// # Errors
/// `InvalidClientConfig` naming the node, what it is and what to use
/// instead; for `NOAUTH`, `InvalidClientConfig` naming the node and where
/// the password goes (the URL lacks it); the connection's error if the
/// round trip fails.
pub(crate) async fn check(
    con: &mut (impl ConnectionLike + Send),
    node: &str,
    expected: Expected,
) -> Result<(), RedisError> {
    let mut pipe = redis::pipe();
    pipe.cmd("ROLE").cmd("CLUSTER").arg("MYID");
    let answers: Vec<RedisResult<Value>> = pipe.ignore_errors().query_async(con).await?;
    // A connection that sent no password (RESP2 sends no command first)
    // meets NOAUTH here: every call would.
    if answers
        .iter()
        .any(|a| matches!(a, Err(e) if e.code() == Some("NOAUTH")))
    {
        return Err(crate::advice::missing_password(node));
    }
    let mut answers = answers.into_iter();
    let role = answers.next().and_then(|r| r.ok());
    let in_cluster = matches!(answers.next(), Some(Ok(_)));
    let what = match role.as_ref().map(role_of) {
        Some(Role::Replica(of)) => Some(format!("a replica (of {of})")),
        Some(Role::Sentinel) => Some("a Sentinel".to_owned()),
        _ if in_cluster => Some("a Redis Cluster node".to_owned()),
        _ => None,
    };
    let Some(what) = what else {
        return Ok(());
    };
    let instead = match (expected, in_cluster, role.as_ref().map(role_of)) {
        (Expected::RedlockNode, ..) => {
            "Redlock nodes must be independent masters outside any cluster"
        }
        (_, _, Some(Role::Sentinel)) => {
            "use LockClient::sentinel(&[sentinel URLs], master name) to lock on the master it \
             names"
        }
        (_, true, _) => "use LockClient::cluster(&[node URLs]) for Redis Cluster",
        _ => {
            "connect to its master, or use LockClient::sentinel to follow the master through \
             failovers"
        }
    };
    Err(RedisError::from((
        ErrorKind::InvalidClientConfig,
        "not a node that can hold locks",
        format!("{node} is {what}: {instead}"),
    )))
}

enum Role {
    Master,
    Replica(String),
    Sentinel,
    Unknown,
}

/// The role in a `ROLE` answer.
fn role_of(answer: &Value) -> Role {
    let (Value::Array(items) | Value::Push { data: items, .. }) = answer else {
        return Role::Unknown;
    };
    let text = |i: usize| match items.get(i) {
        Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
        Some(Value::SimpleString(s)) => s.clone(),
        Some(Value::Int(n)) => n.to_string(),
        _ => String::new(),
    };
    match text(0).as_str() {
        "master" => Role::Master,
        "slave" | "replica" => Role::Replica(format!("{}:{}", text(1), text(2))),
        "sentinel" => Role::Sentinel,
        _ => Role::Unknown,
    }
}
