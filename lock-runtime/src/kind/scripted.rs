//! A claim's acquire and release on one route that runs scripts: the
//! exclusive lock's scripts, or the shared kinds'. One place picks them,
//! for the call layer's operations and for each Redlock node.

use std::time::Duration;

use redis::RedisError;

use super::{exclusive, shared};
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
    match claim.kind {
        Kind::Exclusive => exclusive::acquire(route, lane, key, owner, claim).await,
        _ => shared::acquire(route, lane, key, owner, claim).await,
    }
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
    match kind {
        Kind::Exclusive => exclusive::release(route, lane, key, hold, lease).await,
        _ => shared::release(route, lane, key, hold, lease).await,
    }
}
