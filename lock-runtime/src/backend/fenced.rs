//! A fenced write on whatever the client has: the resource's route on one
//! node, the Sentinel master, the Cluster master of its slot, the embedded
//! backend (a stated list of commands); not on Redlock (a fenced write is
//! not a quorum operation).

use super::Backend;
use crate::kind::fenced::{self, Command, Written};
use crate::route::BackendError;

/// The commands a fenced write may carry on the embedded backend (its
/// keyspace answers these; a real Redis answers any).
#[cfg_attr(not(feature = "embedded"), allow(dead_code))]
pub(crate) const EMBEDDED_COMMANDS: [&str; 8] = [
    "SET", "DEL", "INCRBY", "HSET", "HDEL", "HINCRBY", "RPUSH", "PEXPIRE",
];

/// What a fenced write came to on the backend.
#[derive(Debug)]
pub(crate) enum Fenced {
    /// As the route answered.
    Done(Written),
    /// The client is a Redlock client: no one node to write.
    Redlock,
    /// A command the embedded backend does not carry in a fenced write.
    #[cfg_attr(not(feature = "embedded"), allow(dead_code))]
    NotEmbedded(String),
}

impl Backend {
    /// Runs `commands` on `resource` with `token`.
    pub(crate) async fn fenced_write(
        &self,
        resource: &str,
        token: u64,
        commands: &[Command],
    ) -> Result<Fenced, BackendError> {
        #[cfg(feature = "embedded")]
        if let Backend::Embedded(_) = self {
            let outside = commands.iter().find(|c| {
                !EMBEDDED_COMMANDS
                    .iter()
                    .any(|name| name.eq_ignore_ascii_case(&c.name))
            });
            if let Some(c) = outside {
                return Ok(Fenced::NotEmbedded(c.name.clone()));
            }
        }
        on_route!(self,
            route => Ok(Fenced::Done(fenced::write(route, resource, token, commands).await?)),
            _nodes => Ok(Fenced::Redlock))
    }
}
