//! What an operator asks a client: is this lock held, by whom, for how
//! long ([`LockClient::inspect`]); which locks does this client hold
//! ([`LockClient::held`]).

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::client::LockClient;
use crate::error::LockError;

/// A lock as its backend keeps it now: see [`LockClient::inspect`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The lock's full key (the client's prefix, then the key).
    pub key: String,
    /// Who holds it; `None` when it is free. A freed lock whose lease has
    /// not ended yet (`L1:<fence>:f:` in Redis) is free.
    pub holder: Option<LockHolder>,
    /// How long the holder's lease lasts from now unless renewed; `None`
    /// when the lock is free (or, if someone set it by hand, has no expiry).
    pub ttl: Option<Duration>,
    /// The last fencing token given for this key: the holder's when held.
    /// Kept after a release until the freed lock's lease ends; `None` when
    /// the key is gone.
    pub fencing_token: Option<u64>,
}

impl LockInfo {
    /// Whether somebody holds the lock.
    pub fn is_held(&self) -> bool {
        self.holder.is_some()
    }
}

/// Who holds a lock.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockHolder {
    /// The acquisition's owner id, `<client id>:<n>`, as the lock keeps it.
    pub owner: String,
    /// The holding client's id: the owner id before its last `:`.
    pub client_id: String,
    /// What the holding client wrote about itself (its registry entry);
    /// `None` if it wrote nothing the reader could see (its entry lapsed, or
    /// the client's user may not write it).
    pub client: Option<ClientInfo>,
}

/// What a client tells about itself in its registry entry.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientInfo {
    /// Its connections' name
    /// ([`client_name`](crate::LockClientBuilder::client_name)), as
    /// `CLIENT LIST` shows it.
    pub name: String,
    /// The host it runs on.
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// When the client was made.
    pub started: SystemTime,
    /// The lock-runtime version it runs.
    pub version: String,
}

/// A lock this client holds: see [`LockClient::held`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HeldInfo {
    /// The lock's full key.
    pub key: String,
    /// The fencing token of this hold.
    pub fencing_token: u64,
    /// How long ago the winning acquire was sent.
    pub held_for: Duration,
    /// The lock's lease.
    pub lease: Duration,
    /// Whether the watchdog renews it (`renew = false` locks end with their
    /// lease).
    pub renewing: bool,
}

impl LockClient {
    /// The lock `key` (without the client's prefix, as in
    /// [`run_locked`](LockClient::run_locked)) as the backend keeps it now:
    /// free or held, by whom, for how long, and its last fencing token.
    ///
    /// The prefix is added to `key` as it is given: `inspect("order:7")`
    /// reads `lock:order:7`, and `inspect("lock:order:7")` reads
    /// `lock:lock:order:7` (a key may begin with the prefix's text). The
    /// answer's [`LockInfo::key`] is the full key read, and a key given
    /// with the prefix is logged as a `warn` event. The full keys that
    /// [`LockInfo::key`], [`HeldInfo::key`] and [`LockError::key`] give
    /// are not what this takes.
    ///
    /// The holder's owner id leads to the holding client's registry entry
    /// (its name, host, pid and start time; see `docs/redis-layout.md`),
    /// read in a second round trip. On Redlock every node is asked, and the
    /// answer is what a quorum says: held when a quorum names the same
    /// owner, for as long as a quorum keeps it. A read only: it changes
    /// nothing and takes no lock, so the answer may be stale as soon as it
    /// arrives.
    ///
    /// # Errors
    /// [`LockError::Backend`] when Redis fails or the key holds something
    /// that is not a lock of this version; [`LockError::NoQuorum`] when too
    /// few Redlock nodes answer; [`LockError::Invalid`] for an empty key.
    pub async fn inspect(&self, key: &str) -> Result<LockInfo, LockError> {
        let inner = &self.inner;
        let full = self.admin_key(key, "inspect")?;
        let view = inner
            .backend
            .inspect(&full)
            .await
            .map_err(|e| inner.backend.error_on_key(e, &full, &inner.tag.place))?;
        let Some(lock) = view else {
            return Ok(LockInfo {
                key: full,
                holder: None,
                ttl: None,
                fencing_token: None,
            });
        };
        let holder = match lock.owner {
            Some(owner) => Some(self.holder(owner).await),
            None => None,
        };
        Ok(LockInfo {
            key: full,
            ttl: holder.as_ref().and(lock.ttl),
            holder,
            fencing_token: Some(lock.fence),
        })
    }

    /// The holder `owner`, with its client's registry entry if it can be read.
    async fn holder(&self, owner: String) -> LockHolder {
        let inner = &self.inner;
        let client_id = owner
            .rsplit_once(':')
            .map_or(owner.as_str(), |(id, _)| id)
            .to_owned();
        let client = if client_id == *inner.tag.id {
            Some(own_info(&inner.record))
        } else {
            let key = format!("{}client:{client_id}", inner.prefix);
            match inner.backend.client_entry(&key).await {
                Ok(entry) => entry.and_then(|entry| client_info(&entry)),
                Err(error) => {
                    tracing::debug!(%error, "could not read the holder's registry entry");
                    None
                }
            }
        };
        LockHolder {
            owner,
            client_id,
            client,
        }
    }

    /// The locks this client holds now (taken by its calls whose bodies
    /// run), in no particular order. Re-entered calls are not listed apart:
    /// they share the lock of the call that took it.
    pub fn held(&self) -> Vec<HeldInfo> {
        let now = tokio::time::Instant::now();
        self.inner
            .registry
            .snapshot()
            .iter()
            .filter(|held| !held.is_lost())
            .map(|held| HeldInfo {
                key: held.key.clone(),
                fencing_token: held.token,
                held_for: now.saturating_duration_since(held.held_since()),
                lease: held.lease(),
                renewing: held.renew,
            })
            .collect()
    }

    /// The full key for an operator's call (`call`) on `key`, refusing an
    /// empty one. A key that starts with the prefix already is taken as
    /// given (a key template may render the prefix's text itself), with a
    /// warning: it is more often a full key (from [`LockInfo::key`],
    /// [`HeldInfo::key`], [`LockError::key`] or `redis-cli`) given where the
    /// key without the prefix belongs.
    pub(crate) fn admin_key(&self, key: &str, call: &'static str) -> Result<String, LockError> {
        let full = self.full_key(format_args!("{key}"));
        if key.is_empty() {
            return Err(LockError::Invalid {
                key: full,
                message: "the key is empty",
            });
        }
        let prefix = &*self.inner.prefix;
        if !prefix.is_empty() && key.starts_with(prefix) {
            tracing::warn!(
                call,
                prefix,
                key,
                full_key = &*full,
                "key starts with the client's prefix, added again: this call takes the key \
                 without the client's prefix"
            );
        }
        Ok(full)
    }
}

fn own_info(record: &crate::presence::ClientRecord) -> ClientInfo {
    ClientInfo {
        name: record.name.to_string(),
        host: record.host.clone(),
        pid: record.pid,
        started: UNIX_EPOCH + Duration::from_millis(record.started_ms),
        version: env!("CARGO_PKG_VERSION").to_owned(),
    }
}

/// A registry entry's fields as [`ClientInfo`]; `None` if one is missing.
fn client_info(entry: &HashMap<String, String>) -> Option<ClientInfo> {
    let [name, host, pid, started, version] = crate::presence::FIELDS.map(|f| entry.get(f));
    Some(ClientInfo {
        name: name?.clone(),
        host: host?.clone(),
        pid: pid?.parse().ok()?,
        started: UNIX_EPOCH + Duration::from_millis(started?.parse().ok()?),
        version: version?.clone(),
    })
}
