//! Sending one script call: `EVALSHA`, the script loaded when the server
//! does not know it, its error read by its own code.

use redis::aio::ConnectionLike;
use redis::{Cmd, ErrorKind, FromRedisValue, RedisError, Script, ServerErrorKind};

use super::script_errors::unwrapped;

/// `cmd`, an EVALSHA of `script`, on `con`; the script is loaded first if
/// the server does not know it (a restart, a `SCRIPT FLUSH`). An error the
/// script raised reads by its own code on every family (see
/// [`super::script_errors`]).
pub(crate) async fn evalsha<T: FromRedisValue>(
    script: &Script,
    cmd: &Cmd,
    con: &mut (impl ConnectionLike + Send),
) -> Result<T, RedisError> {
    let answer = match cmd.query_async(con).await {
        Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
            script.load_async(con).await?;
            cmd.query_async(con).await
        }
        answer => answer,
    };
    answer.map_err(unwrapped)
}
