//! The Lua sources of the lock kinds (layout 1, see
//! `docs/redis-layout.md`): each script with the shared reading of a
//! stored lock before it (`lua/exclusive/read.lua` for the exclusive
//! string, `lua/shared/hash.lua` for the shared kinds' hash), so that every
//! script reads a value by the same rules, and the exclusive scripts see
//! the shared kinds' holders and waiters.

/// `read.lua`, `hash.lua`, then the script `lua/shared/<name>.lua`.
macro_rules! shared {
    ($name:literal) => {
        concat!(
            include_str!("lua/exclusive/read.lua"),
            include_str!("lua/shared/hash.lua"),
            include_str!(concat!("lua/shared/", $name, ".lua"))
        )
    };
}

/// `read.lua`, `hash.lua` inside `hash_lib()` (made only when a script
/// meets a hash, so that the plain lock's hot path does not pay for it),
/// then the script `lua/exclusive/<name>.lua`.
macro_rules! exclusive {
    ($name:literal) => {
        concat!(
            include_str!("lua/exclusive/read.lua"),
            "local function hash_lib()\n",
            include_str!("lua/shared/hash.lua"),
            include_str!("lua/shared/exports.lua"),
            "end\n",
            include_str!(concat!("lua/exclusive/", $name, ".lua"))
        )
    };
}

/// `read.lua` and `hash.lua` at the top level, the server's TIME read once
/// per call, `hash_lib()` over them for the exclusive scripts, the
/// single-key acquire scripts and the exclusive release as functions of
/// `(KEYS, ARGV)`, then `lua/several/<name>.lua`, which calls them key by
/// key: the rules of each key are the single-key scripts' own.
macro_rules! several {
    ($name:literal) => {
        concat!(
            include_str!("lua/exclusive/read.lua"),
            include_str!("lua/shared/hash.lua"),
            "local time_once\n",
            "local function server_time()\n",
            "  time_once = time_once or redis.call('time')\n",
            "  return time_once\n",
            "end\n",
            "local function hash_lib()\n",
            include_str!("lua/shared/exports.lua"),
            "end\n",
            "local function take_exclusive(KEYS, ARGV)\n",
            include_str!("lua/exclusive/acquire.lua"),
            "end\n",
            "local function take_shared(KEYS, ARGV)\n",
            include_str!("lua/shared/acquire.lua"),
            "end\n",
            "local function give_back(KEYS, ARGV)\n",
            include_str!("lua/exclusive/release.lua"),
            "end\n",
            include_str!(concat!("lua/several/", $name, ".lua"))
        )
    };
}

/// Takes a lock for one acquisition.
pub(crate) const ACQUIRE: &str = exclusive!("acquire");
/// Frees a lock held by one acquisition.
pub(crate) const RELEASE: &str = exclusive!("release");
/// Resets the leases of a batch of held locks.
pub(crate) const RENEW: &str = exclusive!("renew");
/// Raises a held lock's fence (Redlock's write-back).
pub(crate) const FENCE: &str = exclusive!("fence");
/// Frees a lock whoever holds it.
pub(crate) const FORCE_UNLOCK: &str = exclusive!("force_unlock");
/// Reads a lock as it is.
pub(crate) const INSPECT: &str = exclusive!("inspect");
/// Takes a shared kind's lock (reader, permit, fair).
pub(crate) const SHARED_ACQUIRE: &str = shared!("acquire");
/// Frees a shared kind's hold.
pub(crate) const SHARED_RELEASE: &str = shared!("release");

/// Takes several locks for one call, all or nothing.
pub(crate) const ACQUIRE_ALL: &str = several!("acquire_all");
/// Runs several unrelated acquires and releases of the exclusive lock,
/// queued at the same moment, in one call.
pub(crate) const BATCH: &str = several!("batch");

/// A write to a resource made only for a token at least the highest that
/// wrote it (no lock is read: it stands on its own).
pub(crate) const FENCED_WRITE: &str = include_str!("lua/fenced/write.lua");

/// Every script's source by name, as the library sends it (the scripts'
/// tests and the benchmark call them directly).
pub(crate) const ALL: [(&str, &str); 11] = [
    ("acquire", ACQUIRE),
    ("release", RELEASE),
    ("renew", RENEW),
    ("fence", FENCE),
    ("force_unlock", FORCE_UNLOCK),
    ("inspect", INSPECT),
    ("shared_acquire", SHARED_ACQUIRE),
    ("shared_release", SHARED_RELEASE),
    ("acquire_all", ACQUIRE_ALL),
    ("batch", BATCH),
    ("fenced_write", FENCED_WRITE),
];
