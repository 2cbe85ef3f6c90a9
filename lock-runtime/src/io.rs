//! The client's own background thread: a single-threaded tokio runtime that
//! runs the watchdog, the connections' drivers and releases of dropped locks.
//!
//! Owning it makes a client independent of the runtime that created it: a
//! global client keeps renewing while application runtimes come and go.

use std::future::Future;
use std::io;

use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// The handle of the background runtime; dropping the last one stops it.
pub(crate) struct Io {
    handle: Handle,
    _stop: oneshot::Sender<()>,
}

impl Io {
    /// Starts the thread and its runtime.
    pub(crate) fn start() -> io::Result<Io> {
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
            _stop: stop,
        })
    }

    /// Runs `task` on the background runtime.
    pub(crate) fn spawn<F>(&self, task: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle.spawn(task)
    }
}
