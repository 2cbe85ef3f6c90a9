//! The exclusive lock (layout 1, see `docs/redis-layout.md`): its scripts,
//! its operations as script calls (its acquire and release run through
//! `calls.rs`, as every kind's do), and how their answers read, written
//! once for every route that runs scripts (one node, Sentinel, Cluster,
//! the embedded backend; a Redlock node is one node). Its renewal, fence and the operator's
//! scripts serve the shared kinds too: they read both shapes of a key.

use std::sync::LazyLock;

use futures_util::future::join_all;
use redis::{RedisError, Script};

use super::calls::ReleaseScripts;
use super::sources;
use super::{Claim, RenewItem, Renewal};
use crate::options::LockOptions;
use crate::route::{millis, Coalesce, Lane, Route, ScriptCall};

/// Takes a lock for one acquisition.
pub(crate) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(&acquire_source()));
/// Frees a lock held by one acquisition; publishes its notice.
pub(super) static RELEASE: ReleaseScripts =
    ReleaseScripts::coalesced(sources::RELEASE, &COALESCE_RELEASE);
/// Resets the leases of a batch of held locks.
pub(crate) static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(sources::RENEW));
/// Raises a held lock's fence (Redlock's write-back).
static FENCE: LazyLock<Script> = LazyLock::new(|| Script::new(sources::FENCE));

/// Runs acquires and releases queued at the same moment in one call.
static BATCH: LazyLock<Script> = LazyLock::new(|| Script::new(&token_rule(sources::BATCH)));
/// An acquire call in a batch.
static COALESCE_ACQUIRE: Coalesce = Coalesce {
    script: &BATCH,
    op: "a",
};
/// A release call in a batch.
static COALESCE_RELEASE: Coalesce = Coalesce {
    script: &BATCH,
    op: "r",
};

/// The acquire script's source.
fn acquire_source() -> String {
    token_rule(sources::ACQUIRE)
}

/// `source` (a script that takes the exclusive lock) as the library sends
/// it: as written, or, for the checker's proof, with tokens made without
/// the clock (they repeat after a restore from a snapshot).
pub(super) fn token_rule(source: &str) -> String {
    if cfg!(feature = "defect-token-without-clock") {
        let rule =
            "local token = math.max(fence + 1, tonumber(now[1]) * 1000000 + tonumber(now[2]))";
        let without = "local token = fence + 1\nif fence == 0 then token = tonumber(now[1]) * 1000000 + tonumber(now[2]) end";
        assert!(source.contains(rule));
        return source.replace(rule, without);
    }
    source.to_owned()
}

/// The acquire call that takes `key` for `owner` for the claim's lease;
/// for a timed claim, one whose grant answers the node's time too.
pub(super) fn acquire_call<'a>(key: &'a str, owner: &str, claim: Claim) -> ScriptCall<'a> {
    let mut call = acquire_call_alone(key, owner, claim);
    call.coalesce = Some(COALESCE_ACQUIRE);
    call
}

/// [`acquire_call`] as it goes out alone.
fn acquire_call_alone<'a>(key: &'a str, owner: &str, claim: Claim) -> ScriptCall<'a> {
    let lease = millis(claim.lease);
    // The waiter lease only when it is not the scripts' default, or when
    // ARGV[4] follows it.
    if claim.timed {
        let args = (owner, lease, millis(claim.waiter_lease), 1);
        ScriptCall::new(&ACQUIRE, key, args, owner.len() + 42)
    } else if claim.waiter_lease == LockOptions::DEFAULT_WAITER_LEASE {
        ScriptCall::new(&ACQUIRE, key, (owner, lease), owner.len() + 20)
    } else {
        let args = (owner, lease, millis(claim.waiter_lease));
        ScriptCall::new(&ACQUIRE, key, args, owner.len() + 40)
    }
}

/// Raises the kept fencing token of the lock `owner` holds to `token`;
/// whether `owner` holds it.
pub(crate) async fn fence(
    route: &impl Route,
    key: &str,
    owner: &str,
    token: u64,
) -> Result<bool, RedisError> {
    let call = ScriptCall::new(&FENCE, key, (owner, token), owner.len() + 20);
    let held: i64 = route.run(&Lane::Home, &call).await?;
    Ok(held == 1)
}

/// Renewed or gone, per item. The items go out in one script call per
/// batch the route allows, all at once; a batch whose call fails leaves its
/// items unknown and the others go on; when every batch fails, the first
/// error.
pub(crate) async fn renew(
    route: &impl Route,
    items: &[RenewItem<'_>],
) -> Result<Vec<Renewal>, RedisError> {
    let keys: Vec<&str> = items.iter().map(|item| item.key).collect();
    let batches = route.batches(&keys);
    let calls = batches
        .iter()
        .map(|indexes| renew_batch(route, items, indexes));
    let answers = join_all(calls).await;
    let mut found = vec![Renewal::Unknown; items.len()];
    let mut first_error = None;
    let mut answered = false;
    for (indexes, answer) in batches.iter().zip(answers) {
        match answer {
            Ok(renewed) => {
                answered = true;
                for (&i, r) in indexes.iter().zip(renewed) {
                    found[i] = r;
                }
            }
            Err(error) => {
                tracing::warn!(%error, locks = indexes.len(), "lock renewal of one batch failed; retrying");
                first_error.get_or_insert(error);
            }
        }
    }
    match first_error {
        Some(error) if !answered => Err(error),
        _ => Ok(found),
    }
}

/// One batch's renewal: the items at `indexes`, in one script call, then
/// `WAIT` when the route syncs replicas. Without enough replicas, a renewed
/// lock is `Unknown`: a failover now would promote a replica that keeps the
/// older expiry, so the lock's validity is not extended, and the watchdog
/// tries again until it runs out.
async fn renew_batch(
    route: &impl Route,
    items: &[RenewItem<'_>],
    indexes: &[usize],
) -> Result<Vec<Renewal>, RedisError> {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(RENEW.get_hash()).arg(indexes.len());
    for &i in indexes {
        cmd.arg(items[i].key);
    }
    for &i in indexes {
        cmd.arg(items[i].owner).arg(millis(items[i].lease));
    }
    let call = ScriptCall {
        script: &RENEW,
        key: items[indexes[0]].key,
        cmd,
        replay: None,
        coalesce: None,
    };
    let (renewed, synced): (Vec<i64>, bool) = match route.sync() {
        None => (route.run(&Lane::Home, &call).await?, true),
        Some(sync) => {
            let (answer, acked) = route.run_synced(call, None).await?;
            (redis::from_redis_value(answer)?, acked >= sync.replicas)
        }
    };
    if renewed.len() != indexes.len() {
        return Err(RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "renew.lua answered the wrong count",
        )));
    }
    Ok(renewed.into_iter().map(|r| renewal(r, synced)).collect())
}

/// The meaning of renew.lua's answer for one lock; a renewal the replicas
/// did not acknowledge (`synced` false) is not known to last.
fn renewal(answer: i64, synced: bool) -> Renewal {
    match (answer, synced) {
        (1, true) => Renewal::Renewed,
        (1, false) => Renewal::Unknown,
        _ => Renewal::Gone,
    }
}

#[cfg(test)]
mod tests {
    use crate::route::Notices;

    #[test]
    fn the_sharded_release_publishes_by_spublish() {
        let plain = redis::Script::new(super::sources::RELEASE);
        assert_eq!(
            super::RELEASE.of(Notices::Plain).get_hash(),
            plain.get_hash()
        );
        assert!(super::RELEASE.of(Notices::Sharded).get_hash() != plain.get_hash());
    }
}
