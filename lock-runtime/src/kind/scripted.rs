//! A claim's acquire and release on one route that runs scripts: the
//! exclusive lock's scripts, or the shared kinds'. One place picks them,
//! for the backend's operations and for each Redlock node; `calls.rs` runs
//! them.

use std::time::Duration;

use redis::RedisError;

use super::{calls, exclusive, shared};
use super::{Acquire, Claim, Kind, Release};
use crate::route::{Lane, Route};

/// Takes `key` for `owner` as `claim` asks, on `route` over `lane`.
pub(crate) async fn acquire(
    route: &impl Route,
    lane: &Lane,
    key: &str,
    owner: &str,
    claim: Claim,
) -> Result<Acquire, RedisError> {
    let (call, release) = match claim.kind {
        Kind::Exclusive => (
            exclusive::acquire_call(key, owner, claim),
            &exclusive::RELEASE,
        ),
        _ => (shared::acquire_call(key, owner, claim), &shared::RELEASE),
    };
    calls::acquire(route, lane, call, release, (owner, claim.lease)).await
}

/// Frees `hold` (owner and token, of `kind` and lease `lease`) of `key`, or
/// withdraws its place in a line, on `route` over `lane`.
pub(crate) async fn release(
    route: &impl Route,
    lane: &Lane,
    key: &str,
    hold: (&str, u64),
    (kind, lease): (Kind, Duration),
) -> Result<Release, RedisError> {
    let scripts = match kind {
        Kind::Exclusive => &exclusive::RELEASE,
        _ => &shared::RELEASE,
    };
    calls::release(scripts, route, lane, key, hold, lease).await
}
