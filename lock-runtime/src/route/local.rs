//! Connections driven by the callers' own current-thread runtimes.
//!
//! A client's connections run on its background thread, so a call made on a
//! current-thread runtime crosses to that thread and back on every round
//! trip. For each such runtime that keeps calling (a few calls: a runtime
//! made for one call is not worth a connection), the backend makes, in the
//! background and on that runtime, a connection of its own; calls from the
//! runtime take it once it is ready, and the client's connection until then.
//! It is forgotten when its runtime ends (runtime ids are reused after that)
//! and after an error on it, and made again later.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, RedisError};
use tokio::runtime::{self, Handle, RuntimeFlavor};
use tokio::time::Instant;

/// How long after a failed connect (or an error on the connection) a runtime
/// goes on using the client's connection before another try.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// The calls a runtime makes on the client's connection before it gets a
/// connection of its own.
const CALLS_BEFORE_CONNECT: u32 = 16;

/// The callers' runtimes' connections to one Redis node.
pub(crate) struct LocalConnections {
    client: Client,
    config: AsyncConnectionConfig,
    /// The client's own runtime, which needs no connection of its own.
    home: runtime::Id,
    /// The name each connection is given (`CLIENT SETNAME`), if any.
    name: Option<Arc<str>>,
    runtimes: Mutex<Vec<Local>>,
}

/// One caller runtime's connection.
struct Local {
    runtime: runtime::Id,
    /// Cleared when the runtime drops the task that keeps watch over it.
    alive: Arc<AtomicBool>,
    state: State,
}

enum State {
    /// Calls made so far on the client's connection.
    Counting(u32),
    Connecting,
    Ready(MultiplexedConnection),
    /// Not before this instant.
    Failed(Instant),
}

/// Clears its flag when dropped: when its runtime shuts down.
struct AliveGuard(Arc<AtomicBool>);

impl Drop for AliveGuard {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl LocalConnections {
    /// For calls made on current-thread runtimes other than `home`.
    pub(crate) fn new(
        client: Client,
        config: AsyncConnectionConfig,
        home: runtime::Id,
        name: Option<Arc<str>>,
    ) -> Self {
        LocalConnections {
            client,
            config,
            home,
            name,
            runtimes: Mutex::new(Vec::new()),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut Vec<Local>) -> R) -> R {
        f(&mut self.runtimes.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// The connection of the caller's runtime (and the runtime's id), if it
    /// is a current-thread runtime and its connection is ready. Otherwise
    /// `None`, after starting to make one if the runtime has called enough.
    pub(crate) fn get(self: &Arc<Self>) -> Option<(runtime::Id, MultiplexedConnection)> {
        enum Next {
            Use(MultiplexedConnection),
            Wait,
            Watch(Arc<AtomicBool>),
            Connect,
        }
        let handle = Handle::try_current().ok()?;
        if handle.runtime_flavor() != RuntimeFlavor::CurrentThread {
            return None;
        }
        let runtime = handle.id();
        if runtime == self.home {
            return None;
        }
        let now = Instant::now();
        let next = self.with(|locals| {
            locals.retain(|local| local.alive.load(Ordering::Acquire));
            let Some(local) = locals.iter_mut().find(|local| local.runtime == runtime) else {
                let alive = Arc::new(AtomicBool::new(true));
                locals.push(Local {
                    runtime,
                    alive: alive.clone(),
                    state: State::Counting(1),
                });
                return Next::Watch(alive);
            };
            match &mut local.state {
                State::Ready(connection) => Next::Use(connection.clone()),
                State::Counting(calls) if *calls + 1 < CALLS_BEFORE_CONNECT => {
                    *calls += 1;
                    Next::Wait
                }
                State::Failed(at) if *at > now => Next::Wait,
                State::Counting(_) | State::Failed(_) => {
                    local.state = State::Connecting;
                    Next::Connect
                }
                State::Connecting => Next::Wait,
            }
        });
        match next {
            Next::Use(connection) => return Some((runtime, connection)),
            Next::Wait => {}
            // A task that lives as long as the runtime: its end marks the
            // runtime's end.
            Next::Watch(alive) => drop(handle.spawn(async move {
                let _alive = AliveGuard(alive);
                std::future::pending::<()>().await
            })),
            Next::Connect => {
                let this: Weak<Self> = Arc::downgrade(self);
                let (client, config) = (self.client.clone(), self.config.clone());
                let name = self.name.clone();
                drop(handle.spawn(async move {
                    let mut made = client
                        .get_multiplexed_async_connection_with_config(&config)
                        .await;
                    if let (Ok(connection), Some(name)) = (&mut made, name) {
                        // A refusal (ACL) leaves the connection unnamed.
                        let mut setname = redis::cmd("CLIENT");
                        setname.arg("SETNAME").arg(&*name);
                        let _ = setname.query_async::<()>(connection).await;
                    }
                    if let Some(this) = this.upgrade() {
                        this.settle(runtime, made);
                    }
                }));
            }
        }
        None
    }

    fn settle(&self, runtime: runtime::Id, made: Result<MultiplexedConnection, RedisError>) {
        let state = match made {
            Ok(connection) => State::Ready(connection),
            Err(error) => {
                tracing::debug!(%error, "no connection of the caller's runtime; using the client's");
                State::Failed(Instant::now() + RETRY_AFTER)
            }
        };
        self.with(|locals| {
            if let Some(local) = locals.iter_mut().find(|l| l.runtime == runtime) {
                local.state = state;
            }
        });
    }

    /// After `error` on the connection of `runtime`: if the connection is
    /// broken, the runtime uses the client's connection for a while.
    pub(crate) fn failed(&self, runtime: runtime::Id, error: &RedisError) {
        let broken =
            error.is_io_error() || error.is_connection_dropped() || error.is_unrecoverable_error();
        if !broken {
            return;
        }
        self.with(|locals| {
            if let Some(local) = locals.iter_mut().find(|l| l.runtime == runtime) {
                local.state = State::Failed(Instant::now() + RETRY_AFTER);
            }
        });
    }
}
