//! What an operator asks a client: is this lock held, by whom, for how
//! long ([`LockClient::inspect`]); which locks does this client hold
//! ([`LockClient::held`]).

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::client::LockClient;
use crate::error::LockError;

/// What release.lua appends to the owner id of a hold it keeps until the
/// end of its `hold_at_least` (see `docs/redis-layout.md`).
const KEPT: &str = "/kept";

/// A lock as its backend keeps it now: see [`LockClient::inspect`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The lock's full key (the client's prefix, then the key).
    pub key: String,
    /// Who holds it; `None` when it is free. A freed lock whose lease has
    /// not ended yet (`L1:<fence>:f:<owner>` in Redis) is free.
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
    /// The acquisition's owner id, `<client id>:<n>`. (A hold kept after
    /// its body by `hold_at_least` keeps it as `<client id>:<n>/kept` in
    /// Redis: see [`kept`](LockHolder::kept).)
    pub owner: String,
    /// The holding client's id: the owner id before its last `:`.
    pub client_id: String,
    /// Whether the holder's body has ended and the lock is kept until the
    /// end of its [`hold_at_least`](crate::LockOptions::hold_at_least):
    /// nobody renews it, and it frees itself at [`LockInfo::ttl`].
    pub kept: bool,
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
    /// reads `lock:order:7`. The full keys that [`LockInfo::key`],
    /// [`HeldInfo::key`] and [`LockError::key`] give are not what this
    /// takes: `inspect("lock:order:7")` answers [`LockError::Invalid`] when
    /// `lock:lock:order:7` holds no lock and `lock:order:7` holds one (found
    /// by one more read, made only for a key that starts with the prefix
    /// and whose lock is free). Otherwise a key that starts with the prefix
    /// is read as given (an attribute's key may itself start with `lock:`),
    /// and the answer's [`LockInfo::key`] is the full key read.
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
    /// few Redlock nodes answer; [`LockError::Invalid`] for an empty key,
    /// or a held lock's full key given for a key that holds none.
    pub async fn inspect(&self, key: &str) -> Result<LockInfo, LockError> {
        let inner = &self.inner;
        let full = self.admin_key(key)?;
        let view = inner
            .backend
            .inspect(&full)
            .await
            .map_err(|e| inner.backend.error_on_key(e, &full, &inner.tag.place))?;
        if view.as_ref().is_none_or(|lock| lock.owner.is_none()) {
            self.refuse_a_held_full_key(key).await?;
        }
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
    async fn holder(&self, mut owner: String) -> LockHolder {
        let inner = &self.inner;
        let kept = owner.ends_with(KEPT);
        owner.truncate(owner.len() - if kept { KEPT.len() } else { 0 });
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
            kept,
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

    /// The full key for an operator's call on `key`, refusing an empty one.
    pub(crate) fn admin_key(&self, key: &str) -> Result<String, LockError> {
        let full = self.full_key(format_args!("{key}"));
        if key.is_empty() {
            return Err(LockError::Invalid {
                key: full,
                message: "the key is empty",
            });
        }
        Ok(full)
    }

    /// For an operator's call on `key` whose full key (the prefix, then
    /// `key`) holds no lock: [`LockError::Invalid`] when `key` starts with
    /// the prefix and is itself a held lock's full key, given where the key
    /// without the prefix belongs. One read, for such a key only; any other
    /// key is taken as given (an attribute's key may start with the
    /// prefix's text).
    pub(crate) async fn refuse_a_held_full_key(&self, key: &str) -> Result<(), LockError> {
        let inner = &self.inner;
        if inner.prefix.is_empty() || !key.starts_with(&*inner.prefix) {
            return Ok(());
        }
        let view = inner
            .backend
            .inspect(key)
            .await
            .map_err(|e| inner.backend.error_on_key(e, key, &inner.tag.place))?;
        if view.is_some_and(|lock| lock.owner.is_some()) {
            return Err(LockError::Invalid {
                key: key.to_owned(),
                message: "this is a held lock's full key, and the call takes the key without \
                          the client's prefix, as the attribute names it (`order:7` for the \
                          lock `lock:order:7`): with the prefix added again it names no held \
                          lock; pass the key without the prefix",
            });
        }
        Ok(())
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
