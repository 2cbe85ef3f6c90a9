//! The Lua sources of the exclusive lock (layout 1, see
//! `docs/redis-layout.md`): each script with the shared reading of a
//! stored lock (`lua/exclusive/read.lua`) before it, so that every script
//! reads a value by the same rule.

/// `read.lua`, then the script `lua/exclusive/<name>.lua`.
macro_rules! exclusive {
    ($name:literal) => {
        concat!(
            include_str!("lua/exclusive/read.lua"),
            include_str!(concat!("lua/exclusive/", $name, ".lua"))
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
