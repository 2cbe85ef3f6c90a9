//! The client's subscriptions to release channels, kept in line with the
//! keys that somebody in the client waits on by one background task.
//!
//! No call waits for a subscription, and nothing is locked across a round
//! trip: a waiter asks for one and goes on (the head tries the lock and
//! sleeps until the holder's expiry at most). The line is woken when the
//! server confirms the subscription (see [`push_handler`]), so a
//! release published before that is not missed. The task takes every key
//! that changed since its last round at once, and subscribes (or
//! unsubscribes) them in commands of many channels each: a burst of
//! waiters on many keys costs a round trip per thousand keys, not one per
//! key. It sends one command at a time, so a subscribe and an unsubscribe
//! of one key never cross; a waiter cancelled meanwhile leaves no
//! subscription behind, since the task looks at who waits when it comes to
//! the key.
//!
//! A subscription the server refuses for want of rights (`NOPERM`: an ACL
//! user without the channel, as Redis 7 creates users by default) is not
//! retried: the key's waiters wait for the holder's lease instead, still
//! within their `wait`. The task warns once.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use redis::PushInfo;
use tokio::sync::Notify;

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
                // A contended release named the earliest waiting client:
                // that client tries; the others hold back a moment.
                Some(Notice::Named { key, client, token }) => {
                    if client == id.as_bytes() {
                        waiters.wake_release(key, token);
                    } else {
                        waiters.hold_back(key);
                    }
                }
                _ => {}
            }
        }
    }
}

/// How long after a failed subscribe the task tries again, while somebody
/// still waits on the key.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// The most channels one subscribe or unsubscribe names: a longer list
/// goes out as several commands, one after another, so that no one command
/// holds the server for long.
const MOST_PER_COMMAND: usize = 1024;

/// Asks the client's subscription task to look at a key again.
#[derive(Clone)]
pub(crate) struct Subscriptions {
    pending: Arc<Pending>,
}

/// The keys the task has yet to look at: each once, however often it
/// changed meanwhile, so the set is never larger than the keys waited on
/// or just left.
#[derive(Default)]
struct Pending {
    keys: Mutex<HashSet<Box<str>>>,
    wake: Notify,
}

impl Subscriptions {
    /// Starts the task on the client's background runtime; it ends with
    /// the client.
    pub(crate) fn start(io: &Io, backend: Backend, waiters: &Arc<Waiters>) -> Subscriptions {
        let this = Subscriptions {
            pending: Arc::default(),
        };
        let task = run(this.clone(), backend, Arc::downgrade(waiters));
        io.spawn_until_closed(task);
        this
    }

    /// Somebody started or stopped waiting on `key`.
    pub(crate) fn changed(&self, key: &str) {
        self.again(std::iter::once(key.into()));
    }

    fn again(&self, keys: impl IntoIterator<Item = Box<str>>) {
        let mut pending = self
            .pending
            .keys
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        pending.extend(keys);
        drop(pending);
        self.pending.wake.notify_one();
    }

    fn take(&self) -> HashSet<Box<str>> {
        std::mem::take(
            &mut self
                .pending
                .keys
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }
}

/// What the task knows of the server's side.
#[derive(Default)]
struct Channels {
    /// Subscribed, or asked for by a subscribe that failed (then also in
    /// `failed`): an unsubscribe is owed when nobody waits any more.
    subscribed: HashSet<Box<str>>,
    /// Whose last subscribe failed: subscribed again while waited on.
    failed: HashSet<Box<str>>,
    /// Whether the task warned that the user may not subscribe.
    warned: bool,
}

async fn run(this: Subscriptions, backend: Backend, waiters: Weak<Waiters>) {
    let mut channels = Channels::default();
    loop {
        this.pending.wake.notified().await;
        let keys = this.take();
        let (subscribe, unsubscribe) = {
            let Some(waiters) = waiters.upgrade() else {
                return;
            };
            channels.sort(keys, |key| waiters.is_waited(key))
        };
        for chunk in unsubscribe.chunks(MOST_PER_COMMAND) {
            let chunk: Vec<&str> = chunk.iter().map(|k| &**k).collect();
            if let Err(error) = backend.unwatch_releases(&chunk).await {
                tracing::debug!(%error, channels = chunk.len(), "unsubscribe failed");
            }
        }
        for chunk in subscribe.chunks(MOST_PER_COMMAND) {
            let names: Vec<&str> = chunk.iter().map(|k| &**k).collect();
            let answer = backend.watch_releases(&names).await;
            channels.subscribed(chunk, answer, &this);
        }
    }
}

impl Channels {
    /// Splits `keys` into those to subscribe and those to unsubscribe, by
    /// whether somebody `waits` on them now.
    fn sort(
        &mut self,
        keys: HashSet<Box<str>>,
        waits: impl Fn(&str) -> bool,
    ) -> (Vec<Box<str>>, Vec<Box<str>>) {
        let (mut subscribe, mut unsubscribe) = (Vec::new(), Vec::new());
        for key in keys {
            let waited = waits(&key);
            if waited && (!self.subscribed.contains(&key) || self.failed.contains(&key)) {
                subscribe.push(key);
            } else if !waited && self.subscribed.remove(&key) {
                self.failed.remove(&key);
                unsubscribe.push(key);
            }
        }
        (subscribe, unsubscribe)
    }

    /// Records the `answer` to a subscribe of `keys`; asks `again` for
    /// them after a pause if it failed for a cause that may pass.
    fn subscribed(
        &mut self,
        keys: &[Box<str>],
        answer: Result<(), BackendError>,
        again: &Subscriptions,
    ) {
        match answer {
            Ok(()) => {
                for key in keys {
                    self.failed.remove(key);
                    self.subscribed.insert(key.clone());
                }
            }
            Err(error) if refused(&error) => {
                // Retrying would be refused again: the waiters wait on the
                // holder's lease.
                for key in keys {
                    self.failed.remove(key);
                    self.subscribed.remove(key);
                }
                if !std::mem::replace(&mut self.warned, true) {
                    tracing::warn!(
                        %error,
                        key = &*keys[0],
                        "the Redis user may not subscribe to release channels (it needs \
                         the channel rights `&<prefix>*`): waiters wake when the holder's \
                         lease ends rather than at its release"
                    );
                }
            }
            Err(error) => {
                // The waiters fall back to the holder's expiry meanwhile.
                // Some channels may be subscribed: each counts as owing an
                // unsubscribe, and is subscribed again while waited on.
                tracing::debug!(%error, channels = keys.len(), "subscribe failed; retrying");
                for key in keys {
                    self.failed.insert(key.clone());
                    self.subscribed.insert(key.clone());
                }
                let (again, keys) = (again.clone(), keys.to_vec());
                tokio::spawn(async move {
                    tokio::time::sleep(RETRY_AFTER).await;
                    again.again(keys);
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
