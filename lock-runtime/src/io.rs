//! Where the client's background work runs: its watchdog, the drivers of
//! its connections, and the releases of dropped calls.
//!
//! By default the client owns a small thread with a single-threaded tokio
//! runtime. That makes a client independent of the runtime that created it:
//! a global client keeps renewing while application runtimes come and go.
//! (Calls from a current-thread runtime that keeps calling still skip the
//! hop to that thread: they take a connection driven by their own runtime,
//! see `route/local.rs`.) A client built with
//! [`crate::LockClientBuilder::on_current_runtime`] uses the runtime that
//! builds it instead, with no thread of its own, but it stops working when
//! that runtime shuts down.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use tokio::runtime::Handle;
use tokio::sync::{oneshot, watch};

/// The handle of the background runtime; dropping it stops the background
/// work (and the client's own thread, if it has one).
pub(crate) struct Io {
    handle: Handle,
    /// Dropped with the client: tasks spawned with `spawn_until_closed` end.
    closed: watch::Sender<()>,
    _stop_thread: Option<oneshot::Sender<()>>,
}

impl Io {
    /// Starts a thread of the client's own, with its runtime.
    pub(crate) fn start_thread() -> io::Result<Io> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("lock-runtime-io".into())
            .spawn(move || {
                // Returns when the client is dropped; dropping the runtime
                // then cancels its tasks.
                let _ = runtime.block_on(stopped);
            })?;
        Ok(Io {
            handle,
            closed: watch::Sender::new(()),
            _stop_thread: Some(stop),
        })
    }

    /// Uses the runtime this is called from, if any.
    pub(crate) fn current_runtime() -> Option<Io> {
        let handle = Handle::try_current().ok()?;
        Some(Io {
            handle,
            closed: watch::Sender::new(()),
            _stop_thread: None,
        })
    }

    /// The background runtime (the embedded backend's clock).
    #[cfg(feature = "embedded")]
    pub(crate) fn handle(&self) -> &Handle {
        &self.handle
    }

    /// Ends the tasks spawned with `spawn_until_closed` (the client was shut
    /// down).
    pub(crate) fn close(&self) {
        self.closed.send_replace(());
    }

    /// Runs `task` on the background runtime.
    pub(crate) fn spawn<F>(&self, task: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle.spawn(task)
    }

    /// A sleep on the background runtime's timer, which works also when
    /// polled on a runtime without one.
    pub(crate) fn sleep_until(&self, at: tokio::time::Instant) -> tokio::time::Sleep {
        let _entered = self.handle.enter();
        tokio::time::sleep_until(at)
    }

    /// Runs the endless `task` on the background runtime until the client
    /// is dropped.
    pub(crate) fn spawn_until_closed<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let mut closed = self.closed.subscribe();
        self.handle.spawn(async move {
            tokio::select! {
                () = task => {}
                _ = closed.changed() => {}
            }
        });
    }
}

/// `request`, polled with `runtime` as the current runtime.
///
/// A request can start tasks: a connection made on first use, or remade
/// after an error, spawns its driver on the current runtime. For the
/// client's connections that must be the client's runtime, which lives as
/// long as the client, and not the caller's, which may end first (each
/// `#[tokio::test]` has its own).
pub(crate) fn polled_on<F: Future>(runtime: &Handle, request: F) -> Entered<'_, F> {
    Entered {
        handle: runtime,
        request,
    }
}

pin_project! {
    /// See [`polled_on`].
    pub(crate) struct Entered<'a, F> {
        handle: &'a Handle,
        #[pin]
        request: F,
    }
}

impl<F: Future> Future for Entered<'_, F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let _background = this.handle.enter();
        this.request.poll(cx)
    }
}
