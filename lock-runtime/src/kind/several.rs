//! Several keys taken for one call, all or nothing (see
//! `lua/several/acquire_all.lua`): on one route, the keys that one script
//! call may carry together are taken in one call (every key on one node;
//! one hash slot's keys on Cluster, slot by slot in slot order). A refusal
//! anywhere gives back what the call took before it, so the caller holds
//! none of the keys while it waits. The releases are the single-key ones,
//! key by key (`scripted::release`), each idempotent, so a release replayed
//! after a failover is safe.

use std::sync::LazyLock;
use std::time::Duration;

use futures_util::future::join_all;
use redis::{RedisError, Value};

use super::calls::ReleaseScripts;
use super::{exclusive, scripted, sources, Claim, Kind, Release};
use crate::route::{millis, Lane, Route, ScriptCall};

/// Takes several keys at once; publishes where it gives back a reader's
/// hold that others waited for. Its exclusive take follows the same token
/// rule as the single-key acquire (see [`exclusive::token_rule`]).
static ACQUIRE_ALL: LazyLock<ReleaseScripts> = LazyLock::new(|| {
    let source = exclusive::token_rule(sources::ACQUIRE_ALL);
    ReleaseScripts::new(Box::leak(source.into_boxed_str()))
});

/// The answer to an acquire of several keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Several {
    /// Every key is held now: the fencing tokens, in the keys' order.
    Taken(Vec<u64>),
    /// The key at `index` may not be taken now (another owner holds it
    /// for about `ttl` more; `None`: no expiry): nothing is held.
    Refused { index: usize, ttl: Option<Duration> },
    /// Every key was taken, but fewer replicas than the client's
    /// `sync_replicas` asks for acknowledged it: the caller gives them back
    /// and fails.
    NotReplicated { tokens: Vec<u64>, acked: usize },
}

/// Takes every key of `keys` (no key twice), key `i` for `owners[i]`, as
/// `claim` asks (the exclusive lock or a reader), on `route` over `lane`:
/// the keys of each group that one script call may carry, group by group
/// in the route's order. A refusal or a failure gives back the groups
/// taken before it (and, on a failure, the failed group, which may have
/// landed) before it is answered.
pub(crate) async fn acquire(
    route: &impl Route,
    lane: &Lane,
    keys: &[&str],
    owners: &[&str],
    claim: Claim,
) -> Result<Several, RedisError> {
    let groups = route.script_groups(keys);
    let mut tokens = vec![0; keys.len()];
    let mut acked_least = usize::MAX;
    for (done, group) in groups.iter().enumerate() {
        let answer = acquire_group(route, lane, keys, owners, group, claim).await;
        let (taken, acked) = match answer {
            Ok(GroupAnswer::Taken { tokens, acked }) => (tokens, acked),
            Ok(GroupAnswer::Refused { index, ttl }) => {
                // A give-back that failed leaves the caller's error: its
                // caller gives the whole set back again, in the background.
                give_back(route, lane, keys, owners, &groups[..done], claim).await?;
                let index = group[index];
                return Ok(Several::Refused { index, ttl });
            }
            Err(error) => {
                let _ = give_back(route, lane, keys, owners, &groups[..=done], claim).await;
                return Err(error);
            }
        };
        for (&i, token) in group.iter().zip(taken) {
            tokens[i] = token;
        }
        acked_least = acked_least.min(acked);
    }
    match route.sync() {
        Some(sync) if acked_least < sync.replicas => Ok(Several::NotReplicated {
            tokens,
            acked: acked_least,
        }),
        _ => Ok(Several::Taken(tokens)),
    }
}

/// One group's answer.
enum GroupAnswer {
    /// Taken, with the tokens in the group's order, and how many replicas
    /// acknowledged it (`usize::MAX` where the route does not sync).
    Taken { tokens: Vec<u64>, acked: usize },
    /// The group's key at `index` refused.
    Refused { index: usize, ttl: Option<Duration> },
}

/// The keys at `group` in one script call, then `WAIT` where the route
/// syncs replicas.
async fn acquire_group(
    route: &impl Route,
    lane: &Lane,
    keys: &[&str],
    owners: &[&str],
    group: &[usize],
    claim: Claim,
) -> Result<GroupAnswer, RedisError> {
    let script = ACQUIRE_ALL.of(route.notices());
    let mode = match claim.kind {
        Kind::Read => "r",
        _ => "x",
    };
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.get_hash()).arg(group.len());
    for &i in group {
        cmd.arg(keys[i]);
    }
    cmd.arg(mode)
        .arg(millis(claim.lease))
        .arg(millis(claim.waiter_lease));
    for &i in group {
        cmd.arg(owners[i]);
    }
    let call = ScriptCall {
        script,
        key: keys[group[0]],
        cmd,
        replay: None,
        coalesce: None,
    };
    let (answer, acked) = match route.sync() {
        None => (route.run::<Value>(lane, &call).await?, usize::MAX),
        Some(_) => route.run_synced(call, None).await?,
    };
    read_answer(answer, group.len(), acked)
}

/// The meaning of acquire_all.lua's answer for a group of `count` keys.
fn read_answer(answer: Value, count: usize, acked: usize) -> Result<GroupAnswer, RedisError> {
    let numbers: Vec<i64> = redis::from_redis_value(answer)?;
    match numbers.as_slice() {
        [1, tokens @ ..] if tokens.len() == count && tokens.iter().all(|t| *t > 0) => {
            Ok(GroupAnswer::Taken {
                tokens: tokens.iter().map(|t| t.unsigned_abs()).collect(),
                acked,
            })
        }
        [0, index, refusal] if (1..=count as i64).contains(index) && *refusal < 0 => {
            Ok(GroupAnswer::Refused {
                index: index.unsigned_abs() as usize - 1,
                ttl: (*refusal <= -2).then(|| Duration::from_millis((-2 - refusal).unsigned_abs())),
            })
        }
        _ => Err(RedisError::from((
            redis::ErrorKind::Parse,
            "acquire_all.lua answered something that is no acquire answer",
            format!("{numbers:?}"),
        ))),
    }
}

/// Gives back every key of `groups`, key by key, all at once, within the
/// route's own timeouts: the first error, if any release failed. What each
/// release found does not matter here (a key the call never took answers
/// "not held").
async fn give_back(
    route: &impl Route,
    lane: &Lane,
    keys: &[&str],
    owners: &[&str],
    groups: &[Vec<usize>],
    claim: Claim,
) -> Result<(), RedisError> {
    let releases = groups.iter().flatten().map(|&i| {
        let hold = (owners[i], 0);
        release(route, lane, keys[i], hold, claim)
    });
    join_all(releases)
        .await
        .into_iter()
        .find_map(Result::err)
        .map_or(Ok(()), Err)
}

/// The single-key release of `hold` at `key`, for a hold `claim` took.
async fn release(
    route: &impl Route,
    lane: &Lane,
    key: &str,
    hold: (&str, u64),
    claim: Claim,
) -> Result<Release, RedisError> {
    let kind_lease = (claim.kind, claim.give_back_lease(), None);
    scripted::release(route, lane, key, hold, kind_lease).await
}

#[cfg(test)]
mod tests {
    use redis::Value;

    use super::{read_answer, GroupAnswer};

    #[test]
    fn answers_read_as_taken_or_refused() {
        let ints = |v: &[i64]| Value::Array(v.iter().map(|n| Value::Int(*n)).collect());
        assert!(matches!(
            read_answer(ints(&[1, 5, 6]), 2, 0),
            Ok(GroupAnswer::Taken { tokens, .. }) if tokens == [5, 6]
        ));
        assert!(matches!(
            read_answer(ints(&[0, 2, -102]), 2, 0),
            Ok(GroupAnswer::Refused { index: 1, ttl: Some(t) }) if t.as_millis() == 100
        ));
        assert!(read_answer(ints(&[1, 5]), 2, 0).is_err());
        assert!(read_answer(ints(&[0, 3, -2]), 2, 0).is_err());
    }
}
