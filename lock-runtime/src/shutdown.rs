//! Shutting a client down: refuse new calls, let running bodies finish
//! within a deadline, stop and release the rest, stop the background work.

use std::time::Duration;

use futures_util::future::join_all;
use tokio::time::Instant;

use crate::client::LockClient;
use crate::held::Loss;
use crate::locking::release;
use crate::route::Lane;

impl LockClient {
    /// Shuts the client down: takes no new locks, lets running bodies
    /// finish within `deadline`, stops the rest, gives back what is held,
    /// and stops the client's background work.
    ///
    /// At once, every new locked call on this client (and its clones, and
    /// the attribute if this is the global client) fails with
    /// [`LockError::ShutDown`](crate::LockError::ShutDown), and so do the
    /// calls waiting for a lock. Calls already holding a lock run on, and
    /// release as usual, for up to `deadline`; nested calls that re-enter a
    /// held lock still work. A body still running at the deadline is
    /// stopped at its next await point, as on a loss: its call ends with
    /// [`LockError::Lost`](crate::LockError::Lost) and
    /// [`LossReason::ShutDown`](crate::LossReason::ShutDown), since what it did is as incomplete as after
    /// any loss, and its lock is released. Then the watchdog, the
    /// subscriptions and the registry refresh stop, and the client's
    /// registry entry is deleted.
    ///
    /// Do not call it from inside a locked body of this client: it would
    /// wait for that body, then stop it, and itself with it.
    ///
    /// The connections close when the last handle of the client is dropped;
    /// after `shutdown` nothing more is sent on them. Calling it again does
    /// no harm.
    pub async fn shutdown(&self, deadline: std::time::Duration) {
        let inner = &self.inner;
        let life = &inner.tag.life;
        life.close();
        // Waiting calls look again, and find the client shut down.
        inner.waiters.wake_all();
        let until = Instant::now() + deadline;
        if !life.idle_by(&inner.io, until).await {
            let stopped = inner.registry.snapshot();
            for held in &stopped {
                held.lose(Loss::SHUT_DOWN);
            }
            // Released here too, in case a stopped call is not polled (its
            // own release then finds the lock free, which is harmless).
            let releases = stopped.iter().map(|held| {
                inner.registry.unregister(held.id);
                release::release(self, held, &Lane::Home)
            });
            join_all(releases).await;
            drop(stopped);
            let grace = Instant::now() + Duration::from_secs(2);
            if !life.idle_by(&inner.io, grace).await {
                tracing::debug!("shutdown: some locked calls are not polled any more");
            }
        }
        // The presence task stops with the client's background work, so
        // the entry is deleted after it can be written again.
        inner.io.close();
        if let Err(error) = inner.backend.retire(&inner.record).await {
            tracing::debug!(%error, "could not delete the client's registry entry; it lapses");
        }
    }
}
