//! The shared kinds (readers, permits, fair; see `lua/shared/hash.lua` and
//! `docs/redis-layout.md`): their acquire and release as script calls,
//! written once for every route that runs scripts. Their renewals, fences
//! and the operator's scripts are the exclusive lock's, which read both
//! shapes of a key.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{RedisError, Script};

use super::exclusive::{acquire_synced, release_call_of, run_release, sharded};
use super::{answers, sources};
use super::{Acquire, Claim, Kind, Release};
use crate::route::{millis, Lane, Notices, Route, ScriptCall};

/// Takes a shared kind's hold for one acquisition.
static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(sources::SHARED_ACQUIRE));
/// Frees a shared kind's hold, or withdraws a waiter's place.
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(sources::SHARED_RELEASE));
/// The same, publishing by `SPUBLISH` (see [`sharded`]).
static RELEASE_SHARDED: LazyLock<Script> =
    LazyLock::new(|| Script::new(&sharded(sources::SHARED_RELEASE)));

/// The kind as acquire.lua reads it (ARGV[3], and the count in ARGV[5]).
fn kind_arg(kind: Kind) -> (&'static str, u32) {
    match kind {
        Kind::Read => ("r", 0),
        Kind::Permits(n) => ("p", n),
        Kind::Fair => ("q", 0),
        Kind::Exclusive => unreachable!("the exclusive lock has its own scripts"),
    }
}

/// The release script for `notices`.
fn release_script(notices: Notices) -> &'static Script {
    match notices {
        Notices::Plain => &RELEASE,
        Notices::Sharded => &RELEASE_SHARDED,
    }
}

/// The release of `owner`'s hold (of lease `lease`) or place, with `token`
/// in its notice.
fn release_call<'a>(
    route: &impl Route,
    key: &'a str,
    hold: (&str, u64),
    lease: Duration,
) -> ScriptCall<'a> {
    release_call_of(release_script, route, key, hold, lease)
}

/// Takes `key` for `owner` as the claim's kind, on `route` over `lane`.
pub(crate) async fn acquire(
    route: &impl Route,
    lane: &Lane,
    key: &str,
    owner: &str,
    claim: Claim,
) -> Result<Acquire, RedisError> {
    let (kind, count) = kind_arg(claim.kind);
    let args = (
        owner,
        millis(claim.lease),
        kind,
        millis(claim.waiter_lease),
        count,
        u8::from(claim.others_wait),
    );
    let call = ScriptCall::new(&ACQUIRE, key, args, owner.len() + 40);
    if route.sync().is_some() {
        let undo = release_call(route, key, (owner, 0), claim.lease).cmd;
        return Box::pin(acquire_synced(route, call, undo)).await;
    }
    answers::acquired(route.run(lane, &call).await?)
}

/// Frees `owner`'s hold of `key` (of lease `lease`), or its place in line.
pub(crate) async fn release(
    route: &impl Route,
    lane: &Lane,
    key: &str,
    (owner, token): (&str, u64),
    lease: Duration,
) -> Result<Release, RedisError> {
    run_release(
        route,
        lane,
        &release_call(route, key, (owner, token), lease),
    )
    .await
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_sharded_release_publishes_by_spublish() {
        assert!(super::RELEASE_SHARDED.get_hash() != super::RELEASE.get_hash());
    }
}
