//! The shared kinds (readers, permits, fair; see `lua/shared/hash.lua` and
//! `docs/redis-layout.md`): their acquire and release scripts, and their
//! acquire as a script call, written once for every route that runs
//! scripts (the calls run through `calls.rs`, as every kind's do). Their
//! renewals, fences and the operator's scripts are the exclusive lock's,
//! which read both shapes of a key.

use std::sync::LazyLock;

use redis::Script;

use super::calls::ReleaseScripts;
use super::sources;
use super::{Claim, Kind};
use crate::route::{millis, ScriptCall};

/// Takes a shared kind's hold for one acquisition.
static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(sources::SHARED_ACQUIRE));
/// Frees a shared kind's hold, or withdraws a waiter's place.
pub(super) static RELEASE: ReleaseScripts = ReleaseScripts::new(sources::SHARED_RELEASE);

/// The kind as acquire.lua reads it (ARGV[3], and the count in ARGV[5]).
fn kind_arg(kind: Kind) -> (&'static str, u32) {
    match kind {
        Kind::Read => ("r", 0),
        Kind::Permits(n) => ("p", n),
        Kind::Fair => ("q", 0),
        Kind::Exclusive => unreachable!("the exclusive lock has its own scripts"),
    }
}

/// The acquire call that takes `key` for `owner` as the claim's kind.
pub(super) fn acquire_call<'a>(key: &'a str, owner: &str, claim: Claim) -> ScriptCall<'a> {
    let (kind, count) = kind_arg(claim.kind);
    let args = (
        owner,
        millis(claim.lease),
        kind,
        millis(claim.waiter_lease),
        count,
        u8::from(claim.others_wait),
    );
    ScriptCall::new(&ACQUIRE, key, args, owner.len() + 40)
}

#[cfg(test)]
mod tests {
    use crate::route::Notices;

    #[test]
    fn the_sharded_release_publishes_by_spublish() {
        let (plain, sharded) = (Notices::Plain, Notices::Sharded);
        assert!(super::RELEASE.of(sharded).get_hash() != super::RELEASE.of(plain).get_hash());
    }
}
