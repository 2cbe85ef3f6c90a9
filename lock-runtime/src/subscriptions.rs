//! The client's subscriptions to release channels, kept in line with the
//! keys that somebody in the client waits on by one background task.
//!
//! No call waits for a subscription, and nothing is locked across a round
//! trip: a waiter asks for one and goes on (the head tries the lock and
//! sleeps until the holder's expiry at most). The line is woken when the
//! server confirms the subscription (see [`push_handler`]), so a
//! release published before that is not missed. The task works through the
//! keys one at a time, so a subscribe and an unsubscribe of one key never
//! cross; a waiter cancelled meanwhile leaves no subscription behind, since
//! the task looks at who waits when it comes to the key.
//!
//! A subscription the server refuses for want of rights (`NOPERM`: an ACL
//! user without the channel, as Redis 7 creates users by default) is not
//! retried: the key's waiters wait for the holder's lease instead, still
//! within their `wait`. The task warns once.

use std::collections::HashSet;
use std::sync::{Arc, Weak};
use std::time::Duration;

use redis::PushInfo;
use tokio::sync::mpsc;

use crate::backend::Backend;
use crate::io::Io;
use crate::presence::ClientRecord;
use crate::route::node::{self as redis_backend, Notice};
use crate::route::BackendError;
use crate::wakeup::Waiters;

/// What the pushes of a client's connections do: wake its waiters on a
/// release by another client, on a (re)subscription and on a
/// disconnection, and have the connections named again after one.
pub(crate) fn push_handler(
    waiters: Arc<Waiters>,
    id: Arc<str>,
    record: Arc<ClientRecord>,
) -> impl Fn(PushInfo) + Clone + Send + Sync + 'static {
    move |info: PushInfo| {
        if info.kind == redis::PushKind::Disconnection {
            // Releases published while disconnected are lost: let every
            // waiter try again.
            waiters.wake_all();
            // The new connections need their name.
            record.again.notify_one();
        } else if let Some(channel) = redis_backend::subscribed(&info) {
            // Subscribed (again, after a reconnect), or a release of this
            // client sent again after a failover, whose notice is skipped
            // below (see `route::node::missed_release`): a release before
            // now was not heard, so the head should try.
            waiters.wake_release(channel, 0);
        } else {
            match redis_backend::notice(&info) {
                // A fair line's release names its next waiter: only that
                // waiter's client tries.
                Some(Notice::Next { key, client, n }) if client == id.as_bytes() => {
                    waiters.wake_named(key, n);
                }
                // This client's own releases woke its waiters already; one
                // sent again after a failover wakes them by its route.
                Some(Notice::Released { key, client, token }) if client != id.as_bytes() => {
                    waiters.wake_release(key, token);
                }
                _ => {}
            }
        }
    }
}

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
    let mut warned = false;
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
            Err(error) if refused(&error) => {
                // Retrying would be refused again: the waiters wait on the
                // holder's lease.
                if !std::mem::replace(&mut warned, true) {
                    tracing::warn!(
                        %error,
                        key = &*key,
                        "the Redis user may not subscribe to release channels (it needs \
                         the channel rights `&<prefix>*`): waiters wake when the holder's \
                         lease ends rather than at its release"
                    );
                }
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

/// Whether a subscribe failed for want of rights (NOPERM), on the node or
/// on every Redlock node that answered.
fn refused(error: &BackendError) -> bool {
    let noperm = |e: &redis::RedisError| e.code() == Some("NOPERM");
    match error {
        BackendError::Redis(e) => noperm(e),
        BackendError::NoQuorum { failures, .. } => {
            !failures.is_empty() && failures.iter().all(|f| noperm(&f.error))
        }
    }
}
