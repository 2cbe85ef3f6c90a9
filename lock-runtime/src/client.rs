//! The client: one backend, its background thread, its watchdog and waiters.

use std::fmt::{self, Write as _};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::backend::Backend;
use crate::io::Io;
use crate::kind_check::KindCheck;
use crate::owner_id::ClientTag;
use crate::presence::ClientRecord;
use crate::replica_sync::ReplicaSync;
use crate::wakeup::Waiters;
use crate::watchdog::Registry;

/// A handle to one lock backend: cheap to clone, shared by all its clones.
///
/// Create one at start-up with [`LockClient::connect`] (Redis) or
/// [`LockClient::in_memory`] (this process only), or with
/// [`LockClient::builder`] to change the defaults, and install it with
/// [`crate::init`] for the attribute to use.
///
/// Each client owns a small background thread that runs its watchdog, the
/// drivers of its two Redis connections and the releases of locks whose
/// futures were dropped. It stops when the last clone is dropped.
///
/// # Lifecycle
/// A locked call borrows its client, and a release in the background keeps
/// a clone until it is done, so when the last handle is dropped no call of
/// this client holds a lock and no release is pending: the thread, the
/// watchdog and the connections simply stop. The global client
/// ([`crate::init`]) is never dropped, and a process that exits (or is
/// killed) with bodies still running does not release their locks: they stay
/// held in Redis until their leases end, and waiters elsewhere wait that
/// long. Call [`shutdown`](LockClient::shutdown) before the process exits to
/// let running bodies finish, release every lock at once and stop taking new
/// ones. [`LockClientBuilder::lazy_connect`](crate::LockClientBuilder::lazy_connect) lets a service start before
/// Redis.
///
/// # Operating
/// [`inspect`](LockClient::inspect) tells whether a lock is held, by which
/// client (name, host, pid), for how long, and its fencing token;
/// [`held`](LockClient::held) lists this client's locks;
/// [`force_unlock`](LockClient::force_unlock) frees a stuck lock and wakes
/// its waiters. Every connection is named
/// ([`LockClientBuilder::client_name`](crate::LockClientBuilder::client_name)) for `CLIENT LIST`.
#[derive(Clone)]
pub struct LockClient {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    /// Who the client is: its random id, the prefix of every owner id of
    /// this client, and where it keeps its locks.
    pub tag: Arc<ClientTag>,
    /// Numbers the client's acquisitions (and their owner ids).
    pub lock_ids: AtomicU64,
    pub prefix: Box<str>,
    pub lease: Duration,
    pub wait: Duration,
    /// See [`LockClientBuilder::clock_drift_factor`](crate::LockClientBuilder::clock_drift_factor).
    pub drift_factor: f64,
    /// See [`LockClientBuilder::sync_replicas`](crate::LockClientBuilder::sync_replicas).
    pub sync_replicas: Option<ReplicaSync>,
    /// See [`LockClientBuilder::kind_check`](crate::LockClientBuilder::kind_check):
    /// `None` when it is off.
    pub kind_check: Option<KindCheck>,
    pub backend: Backend,
    pub waiters: Arc<Waiters>,
    pub registry: Arc<Registry>,
    /// The client's name, host and pid, as its registry entry has them.
    pub record: Arc<ClientRecord>,
    pub io: Io,
}

impl fmt::Debug for LockClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let backend = self.inner.backend.name();
        f.debug_struct("LockClient")
            .field("id", &self.inner.tag.id)
            .field("backend", &backend)
            .field("prefix", &self.inner.prefix)
            .finish_non_exhaustive()
    }
}

/// The client a locked call runs on: borrowed (the caller's, or the global
/// one), or owned (a scoped one, see [`crate::with_client`]).
pub(crate) enum ClientRef<'a> {
    Borrowed(&'a LockClient),
    Owned(LockClient),
}

impl<'a> ClientRef<'a> {
    /// The same client for a step of the call that is boxed apart from it:
    /// the same borrow, or a clone of the owned client (one reference
    /// count).
    pub(crate) fn lend(&self) -> ClientRef<'a> {
        match self {
            ClientRef::Borrowed(client) => ClientRef::Borrowed(client),
            ClientRef::Owned(client) => ClientRef::Owned(client.clone()),
        }
    }
}

impl std::ops::Deref for ClientRef<'_> {
    type Target = LockClient;

    fn deref(&self) -> &LockClient {
        match self {
            ClientRef::Borrowed(client) => client,
            ClientRef::Owned(client) => client,
        }
    }
}

impl LockClient {
    /// How many locks this client's watchdog is renewing now.
    pub fn renewing(&self) -> usize {
        self.inner.registry.renewing()
    }

    /// The backend key for a rendered key: the prefix, then the key.
    pub(crate) fn full_key(&self, key: fmt::Arguments<'_>) -> String {
        let prefix = &*self.inner.prefix;
        let mut full = String::with_capacity(prefix.len() + 32);
        full.push_str(prefix);
        // Writing to a String cannot fail.
        let _ = full.write_fmt(key);
        full
    }

    /// The backend key for a rendered key given as a `String`: the prefix
    /// put in front of it, in its own buffer when that has room.
    pub(crate) fn prefixed_key(&self, mut key: String) -> String {
        key.insert_str(0, &self.inner.prefix);
        key
    }

    /// A number for a new acquisition, unique within the client: its owner
    /// id is `OwnerId::new(&inner.tag.id, n)`.
    pub(crate) fn new_lock_id(&self) -> u64 {
        self.inner.lock_ids.fetch_add(1, Ordering::Relaxed)
    }
}
