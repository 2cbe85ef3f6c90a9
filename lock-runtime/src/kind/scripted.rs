//! A claim's acquire and release on one route that runs scripts: the
//! exclusive lock's scripts, or the shared kinds'. One place picks them,
//! for the backend's operations and for each Redlock node; `calls.rs` runs
//! them.

use std::time::Duration;

use redis::RedisError;

use super::{calls, exclusive, shared};
use super::{Acquire, Claim, End, Kind, Release};
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
    calls::acquire(route, lane, call, release, (owner, &claim)).await
}

/// Frees `hold` (owner and token, of `kind` and lease `lease`) of `key`, or
/// withdraws its place in a line, on `route` over `lane`; with `end` (the
/// exclusive lock's `hold_at_least`), keeps it until that end instead.
pub(crate) async fn release(
    route: &impl Route,
    lane: &Lane,
    key: &str,
    hold: (&str, u64),
    (kind, lease, end): (Kind, Duration, Option<End>),
) -> Result<Release, RedisError> {
    let (scripts, end) = match kind {
        Kind::Exclusive => (&exclusive::RELEASE, end),
        // Refused before any acquire (see `locking/phase.rs`).
        _ => (&shared::RELEASE, None),
    };
    calls::release(scripts, route, lane, key, hold, (lease, end)).await
}
