//! Coalescing on one connection: script calls that may go out together
//! (see [`Coalesce`]) and come while one of them is in flight wait for it,
//! then go out as one call of their batch script. Under load the server
//! then enters one script per batch instead of one per call, and reads the
//! clock once per batch. A call that comes while none is in flight goes
//! out at once, alone: coalescing never delays a lone call.
//!
//! Order: one batch (or lone call) is in flight at a time, and the queue
//! goes out in the order the calls came, in the same batch or in batches
//! sent one after another on the same connection. So a call made after
//! another (the release of a cancelled acquire) runs after it, as it would
//! on the connection alone. A caller that is dropped while its call waits
//! leaves the call in the queue: it goes out as if it had been sent.

use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError};

use futures_util::future::join_all;
use futures_util::{stream, StreamExt};
use redis::aio::ConnectionManager;
use redis::{Arg, Cmd, ErrorKind, FromRedisValue, RedisError, Script, Value};
use tokio::runtime::Handle;
use tokio::sync::oneshot;

use super::evalsha::evalsha;
use super::{Coalesce, ScriptCall};
use crate::io::polled_on;

/// The most calls one batch script call carries: a longer queue goes out
/// as several, one after another on the connection (pipelined), so that no
/// one call holds the server for long.
const MOST_PER_CALL: usize = 128;

/// The most batch script calls of one queue in flight at once: enough to
/// keep the server busy between answers, few enough that each is answered
/// well within the command timeout however long the queue.
const CHUNKS_IN_FLIGHT: usize = 4;

/// The coalescing state of one connection (the client's own connection to
/// one node).
pub(crate) struct Batcher {
    state: Mutex<State>,
    con: ConnectionManager,
    /// The client's runtime, which sends the batches.
    home: Handle,
}

#[derive(Default)]
struct State {
    /// A call or a batch is in flight: a new call queues.
    flying: bool,
    queue: Vec<Queued>,
}

/// A call that waits for the one in flight.
struct Queued {
    /// The call's own script and command, to send it alone.
    script: &'static Script,
    cmd: Cmd,
    coalesce: Coalesce,
    answer: oneshot::Sender<Result<Value, RedisError>>,
}

impl Batcher {
    /// Coalescing for calls on `con`, whose batches `home` sends.
    pub(crate) fn new(con: ConnectionManager, home: Handle) -> Arc<Self> {
        Arc::new(Batcher {
            state: Mutex::default(),
            con,
            home,
        })
    }

    /// Runs `call`: at once when no call of this connection's coalescing
    /// is in flight, else in the batch that goes out when it is answered.
    /// With `lead` false, a call that goes at once does not make later
    /// calls wait for it (see `RedisBackend::coalesces_here`); it still
    /// waits behind calls in flight or queued, so that it runs after them.
    pub(crate) async fn run<T: FromRedisValue>(
        self: &Arc<Self>,
        call: &ScriptCall<'_>,
        coalesce: Coalesce,
        lead: bool,
    ) -> Result<T, RedisError> {
        let queued = {
            let mut state = self.state();
            if state.flying {
                let (answer, answered) = oneshot::channel();
                state.queue.push(Queued {
                    script: call.script,
                    cmd: call.cmd.clone(),
                    coalesce,
                    answer,
                });
                Some(answered)
            } else {
                state.flying = lead;
                None
            }
        };
        let Some(answered) = queued else {
            let _lead = lead.then(|| Lead(self));
            let mut con = self.con.clone();
            return polled_on(&self.home, evalsha(call.script, &call.cmd, &mut con)).await;
        };
        let answer = answered.await.map_err(|_| stopped())??;
        Ok(redis::from_redis_value(answer)?)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The queue, to send next; `None` when it is empty, and then nothing
    /// is in flight any more.
    fn next(&self) -> Option<Vec<Queued>> {
        let mut state = self.state();
        if state.queue.is_empty() {
            state.flying = false;
            None
        } else {
            Some(std::mem::take(&mut state.queue))
        }
    }
}

/// A lone call in flight: when it ends (answered or dropped), the calls
/// queued meanwhile go out, sent by a task of the client's runtime.
struct Lead<'a>(&'a Arc<Batcher>);

impl Drop for Lead<'_> {
    fn drop(&mut self) {
        if let Some(batch) = self.0.next() {
            let flight = Flight {
                batcher: self.0.clone(),
                landed: false,
            };
            self.0.home.spawn(flight.fly(batch));
        }
    }
}

/// The task that sends batches until the queue is empty.
struct Flight {
    batcher: Arc<Batcher>,
    landed: bool,
}

impl Flight {
    async fn fly(mut self, mut batch: Vec<Queued>) {
        loop {
            send(&self.batcher.con, batch).await;
            match self.batcher.next() {
                Some(next) => batch = next,
                None => {
                    self.landed = true;
                    return;
                }
            }
        }
    }
}

impl Drop for Flight {
    /// A flight dropped before it ended (its runtime shut down): nothing
    /// sends the queue any more, so its calls fail (their callers see the
    /// client stopped), and the next call goes out alone.
    fn drop(&mut self) {
        if !self.landed {
            let mut state = self.batcher.state();
            state.flying = false;
            state.queue.clear();
        }
    }
}

/// The error of a call whose batch will not go out.
fn stopped() -> RedisError {
    RedisError::from((
        ErrorKind::Io,
        "the client's runtime stopped before the request went out",
    ))
}

/// Sends `batch` and hands each call its answer: a call alone as it is;
/// more, in batch script calls of at most [`MOST_PER_CALL`] calls each.
async fn send(con: &ConnectionManager, mut batch: Vec<Queued>) {
    if batch.len() == 1 {
        return send_alone(con, batch.pop().expect("one call")).await;
    }
    // Taken from the front in one pass: splitting the rest off again for
    // each chunk would copy a long queue once per chunk.
    let mut chunks = Vec::with_capacity(batch.len().div_ceil(MOST_PER_CALL));
    let mut calls = batch.into_iter();
    while calls.len() > 0 {
        chunks.push(calls.by_ref().take(MOST_PER_CALL).collect::<Vec<_>>());
    }
    // Started in order, so each is written to the connection before the
    // next; a few at a time, so that a chunk's answer is timed from when
    // the server can start on it, not from behind a long queue of others.
    stream::iter(chunks)
        .map(|chunk| send_chunk(con, chunk))
        .buffered(CHUNKS_IN_FLIGHT)
        .for_each(|()| async {})
        .await;
}

/// `call` by itself.
async fn send_alone(con: &ConnectionManager, call: Queued) {
    let answer = evalsha(call.script, &call.cmd, &mut con.clone()).await;
    let _ = call.answer.send(answer);
}

/// One batch script call for `chunk`. Should a call not fit a batch (not
/// of the first call's batch script, or not on one key), each goes alone,
/// in order.
async fn send_chunk(con: &ConnectionManager, chunk: Vec<Queued>) {
    let script = chunk[0].coalesce.script;
    let Some(cmd) = batch_cmd(script, &chunk) else {
        join_all(chunk.into_iter().map(|call| send_alone(con, call))).await;
        return;
    };
    let answers = evalsha::<Vec<Value>>(script, &cmd, &mut con.clone()).await;
    let answers = match answers {
        Ok(answers) if answers.len() == chunk.len() => answers,
        Ok(_) => {
            let error = RedisError::from((
                ErrorKind::UnexpectedReturnType,
                "the batch script answered the wrong count",
            ));
            return fail(chunk, &error);
        }
        Err(error) => return fail(chunk, &error),
    };
    for (call, answer) in chunk.into_iter().zip(answers) {
        let _ = call.answer.send(own_answer(answer));
    }
}

/// The batch script call of `chunk`; `None` when a call does not fit it
/// (of another batch script, or not on one key).
fn batch_cmd(script: &'static LazyLock<Script>, chunk: &[Queued]) -> Option<Cmd> {
    let calls = chunk
        .iter()
        .map(|call| {
            let fits = std::ptr::eq(call.coalesce.script, script);
            fits.then(|| one_key(&call.cmd)).flatten()
        })
        .collect::<Option<Vec<_>>>()?;
    let mut cmd = Cmd::with_capacity(3 + 8 * chunk.len(), 64 * (chunk.len() + 1));
    cmd.arg("EVALSHA").arg(script.get_hash()).arg(chunk.len());
    for (key, _) in &calls {
        cmd.arg(*key);
    }
    for (call, (_, args)) in chunk.iter().zip(&calls) {
        cmd.arg(call.coalesce.op).arg(args.len());
        for arg in args {
            cmd.arg(*arg);
        }
    }
    Some(cmd)
}

/// Hands every call of `chunk` `error`.
fn fail(chunk: Vec<Queued>, error: &RedisError) {
    for call in chunk {
        let _ = call.answer.send(Err(error.clone()));
    }
}

/// The key and the arguments of an `EVALSHA <sha> 1 <key> <args>...`.
fn one_key(cmd: &Cmd) -> Option<(&[u8], Vec<&[u8]>)> {
    let mut args = cmd.args_iter().map(|arg| match arg {
        Arg::Simple(bytes) => Some(bytes),
        _ => None,
    });
    let head: Vec<_> = args.by_ref().take(4).collect::<Option<_>>()?;
    if head.len() != 4 || head[2] != b"1" {
        return None;
    }
    Some((head[3], args.collect::<Option<_>>()?))
}

/// One call's answer in a batch: its script's own, or its error, which the
/// batch script answers as a string `CODE message`.
fn own_answer(answer: Value) -> Result<Value, RedisError> {
    let text = match &answer {
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::SimpleString(text) => text.clone(),
        _ => return Ok(answer),
    };
    let line = text.replace(['\r', '\n'], " ");
    let code_first = line.split(' ').next().is_some_and(|code| {
        !code.is_empty()
            && code
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
    });
    let line = if code_first {
        line
    } else {
        format!("ERR {line}")
    };
    match redis::parse_redis_value(format!("-{line}\r\n").as_bytes()) {
        Ok(Value::ServerError(error)) => Err(error.into()),
        _ => Err(RedisError::from((
            ErrorKind::UnexpectedReturnType,
            "a batched call answered an unreadable error",
            line,
        ))),
    }
}
