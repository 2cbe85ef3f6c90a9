//! The client's subscriptions to release channels, kept in line with the
//! keys that somebody in the client waits on by one background task.
//!
//! No call waits for a subscription, and nothing is locked across a round
//! trip: a waiter asks for one and goes on (the head tries the lock and
//! sleeps until the holder's expiry at most). The line is woken when the
//! server confirms the subscription (see the client's push handler), so a
//! release published before that is not missed. The task works through the
//! keys one at a time, so a subscribe and an unsubscribe of one key never
//! cross; a waiter cancelled meanwhile leaves no subscription behind, since
//! the task looks at who waits when it comes to the key.

use std::collections::HashSet;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::mpsc;

use crate::backend::Backend;
use crate::io::Io;
use crate::wakeup::Waiters;

/// How long after a failed subscribe the task tries again, while somebody
/// still waits on the key.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// Asks the client's subscription task to look at a key again.
#[derive(Clone)]
pub(crate) struct Subscriptions {
    keys: mpsc::UnboundedSender<Box<str>>,
}

impl Subscriptions {
    /// Starts the task on the client's background runtime; it ends with
    /// the client.
    pub(crate) fn start(io: &Io, backend: Backend, waiters: &Arc<Waiters>) -> Subscriptions {
        let (keys, queue) = mpsc::unbounded_channel();
        let this = Subscriptions { keys };
        let task = run(queue, this.clone(), backend, Arc::downgrade(waiters));
        io.spawn_until_closed(task);
        this
    }

    /// Somebody started or stopped waiting on `key`.
    pub(crate) fn changed(&self, key: &str) {
        let _ = self.keys.send(key.into());
    }
}

async fn run(
    mut queue: mpsc::UnboundedReceiver<Box<str>>,
    again: Subscriptions,
    backend: Backend,
    waiters: Weak<Waiters>,
) {
    let mut subscribed = HashSet::new();
    while let Some(key) = queue.recv().await {
        let Some(waited) = waiters.upgrade().map(|w| w.is_waited(&key)) else {
            return;
        };
        if waited == subscribed.contains(&key) {
            continue;
        }
        if !waited {
            subscribed.remove(&key);
            if let Err(error) = backend.unwatch_releases(&key).await {
                tracing::debug!(%error, key = &*key, "unsubscribe failed");
            }
            continue;
        }
        match backend.watch_releases(&key).await {
            Ok(()) => {
                subscribed.insert(key);
            }
            Err(error) => {
                // The waiters fall back to the holder's expiry meanwhile.
                tracing::debug!(%error, key = &*key, "subscribe failed; retrying");
                let again = again.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(RETRY_AFTER).await;
                    again.changed(&key);
                });
            }
        }
    }
}
