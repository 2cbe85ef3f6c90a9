//! The Lua sources of the lock kinds (layout 1, see
//! `docs/redis-layout.md`): each script with the shared reading of a
//! stored lock before it (`lua/exclusive/read.lua` for the exclusive
//! string, `lua/shared/hash.lua` for the shared kinds' hash), so that every
//! script reads a value by the same rules, and the exclusive scripts see
//! the shared kinds' holders and waiters.

/// `read.lua`, `hash.lua`, then the script `lua/<dir>/<name>.lua`.
macro_rules! script {
    ($dir:literal, $name:literal) => {
        concat!(
            include_str!("lua/exclusive/read.lua"),
            include_str!("lua/shared/hash.lua"),
            include_str!(concat!("lua/", $dir, "/", $name, ".lua"))
        )
    };
}

/// An exclusive lock's script.
macro_rules! exclusive {
    ($name:literal) => {
        script!("exclusive", $name)
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
pub(crate) const SHARED_ACQUIRE: &str = script!("shared", "acquire");
/// Frees a shared kind's hold.
pub(crate) const SHARED_RELEASE: &str = script!("shared", "release");
