//! Who a client is, for humans: the name its connections carry (`CLIENT
//! SETNAME`) and a small registry entry in Redis that an owner id points to.
//!
//! A lock's value names its holder by owner id only, `<client id>:<n>`, to
//! keep every held lock small. The client id leads to one hash per client,
//! `<prefix>client:<client id>`, with its name, host, pid, start time and
//! library version (see `docs/redis-layout.md`). A background task of the
//! client (`announce.rs`) writes it at start and every [`REFRESH`] with a
//! TTL of [`TTL`], and names the client's connections again at the same time
//! (a reconnect loses the name): about three small commands per client every
//! 30 s, none per lock operation. The entry lapses [`TTL`] after the client
//! stops.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::Notify;

/// How often the client rewrites its entry and names its connections.
pub(crate) const REFRESH: Duration = Duration::from_secs(30);

/// How long an entry lives without a refresh.
pub(crate) const TTL: Duration = Duration::from_secs(90);

/// The field names of a registry entry, in this order in [`ClientRecord::fields`].
pub(crate) const FIELDS: [&str; 5] = ["name", "host", "pid", "started", "version"];

/// What a client tells about itself.
pub(crate) struct ClientRecord {
    /// The registry entry's key: the prefix, `client:`, the client id.
    pub key: String,
    /// The connections' name (`CLIENT SETNAME`).
    pub name: Arc<str>,
    pub host: String,
    pub pid: u32,
    /// When the client was made, in ms since the Unix epoch.
    pub started_ms: u64,
    /// Set once the server refused `CLIENT SETNAME` (ACL): not sent again.
    pub setname_refused: AtomicBool,
    /// Set once the server refused to write the entry (ACL): not tried again.
    pub entry_refused: AtomicBool,
    /// Woken when a connection dropped: its replacement needs the name.
    pub again: Notify,
}

impl ClientRecord {
    pub(crate) fn new(prefix: &str, client_id: &str, name: Option<&str>) -> Self {
        let host = host_name();
        let pid = std::process::id();
        let name = match name {
            Some(name) => connection_name(name),
            None => connection_name(&format!("lock-runtime:{}@{host}:{pid}", program())),
        };
        let started_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        ClientRecord {
            key: format!("{prefix}client:{client_id}"),
            name: name.into(),
            host,
            pid,
            started_ms,
            setname_refused: AtomicBool::new(false),
            entry_refused: AtomicBool::new(false),
            again: Notify::new(),
        }
    }

    /// The entry's field values, in the order of [`FIELDS`].
    pub(crate) fn fields(&self) -> [(&'static str, String); 5] {
        [
            (FIELDS[0], self.name.to_string()),
            (FIELDS[1], self.host.clone()),
            (FIELDS[2], self.pid.to_string()),
            (FIELDS[3], self.started_ms.to_string()),
            (FIELDS[4], env!("CARGO_PKG_VERSION").to_owned()),
        ]
    }

    /// Whether `CLIENT SETNAME` is still worth sending.
    pub(crate) fn names_connections(&self) -> bool {
        !self.setname_refused.load(Ordering::Relaxed)
    }

    /// Whether the registry entry is still worth writing.
    pub(crate) fn writes_entry(&self) -> bool {
        !self.entry_refused.load(Ordering::Relaxed)
    }

    /// After `error` writing the entry: a refusal by ACL stops further
    /// tries; whether it was that refusal.
    pub(crate) fn entry_failed(&self, error: &redis::RedisError) -> bool {
        let refused = is_refusal(error);
        if refused {
            tracing::debug!("the registry entry's write refused by ACL; inspect shows no client details for this client");
            self.entry_refused.store(true, Ordering::Relaxed);
        }
        refused
    }

    /// After `error` from `CLIENT SETNAME`: a refusal by ACL stops further
    /// tries (each would be logged in the server's `ACL LOG`); whether it
    /// was that refusal.
    pub(crate) fn setname_failed(&self, error: &redis::RedisError) -> bool {
        let refused = is_refusal(error);
        if refused {
            tracing::debug!("CLIENT SETNAME refused by ACL; connections stay unnamed");
            self.setname_refused.store(true, Ordering::Relaxed);
        }
        refused
    }
}

/// Whether `error` is an ACL refusal (`NOPERM`), also inside a transaction.
fn is_refusal(error: &redis::RedisError) -> bool {
    error.code() == Some("NOPERM")
        || error
            .clone()
            .into_server_errors()
            .is_some_and(|errors| errors.iter().any(|(_, e)| e.code() == "NOPERM"))
}

/// `name` as Redis accepts a connection name: printable ASCII without
/// spaces; anything else becomes `_`.
fn connection_name(name: &str) -> String {
    let name: String = name
        .chars()
        .map(|c| if c.is_ascii_graphic() { c } else { '_' })
        .collect();
    if name.is_empty() {
        "lock-runtime".to_owned()
    } else {
        name
    }
}

/// This machine's host name, or `unknown`.
fn host_name() -> String {
    let from_kernel = std::fs::read_to_string("/proc/sys/kernel/hostname").ok();
    let from_env = || {
        std::env::var("HOSTNAME")
            .or_else(|_| std::env::var("COMPUTERNAME"))
            .ok()
    };
    from_kernel
        .or_else(from_env)
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}

/// The running program's file name, or `unknown`.
fn program() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|path| path.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "unknown".to_owned())
}

#[cfg(test)]
mod tests {
    use super::{connection_name, ClientRecord};

    #[test]
    fn names_are_made_acceptable_to_redis() {
        assert_eq!(connection_name("a b\nc"), "a_b_c");
        assert_eq!(connection_name("é"), "_");
        assert_eq!(connection_name(""), "lock-runtime");
    }

    #[test]
    fn the_default_name_tells_the_program_host_and_pid() {
        let record = ClientRecord::new("lock:", "abc", None);
        assert_eq!(record.key, "lock:client:abc");
        assert!(record.name.starts_with("lock-runtime:"), "{}", record.name);
        assert!(
            record.name.ends_with(&format!(":{}", std::process::id())),
            "{}",
            record.name
        );
    }
}
