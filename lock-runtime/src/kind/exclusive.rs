//! The exclusive lock (layout 1, see `docs/redis-layout.md`): its scripts,
//! its operations as script calls (its acquire and release run through
//! `calls.rs`, as every kind's do), and how their answers read, written
//! once for every route that runs scripts (one node, Sentinel, Cluster,
//! the embedded backend; a Redlock node is one node). Its renewal, fence and the operator's
//! scripts serve the shared kinds too: they read both shapes of a key.

use std::fmt::Write as _;
use std::sync::LazyLock;

use futures_util::future::join_all;
use redis::{Cmd, RedisError, Script};

use super::calls::ReleaseScripts;
use super::sources;
use super::{Claim, Ended, RenewItem, Renewal};
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
/// batch the route allows and lease its items share (a call carries one
/// lease), all at once; a batch whose call fails leaves its items unknown
/// and the others go on; when every batch fails, the first error.
pub(crate) async fn renew(
    route: &impl Route,
    items: &[RenewItem<'_>],
) -> Result<Vec<Renewal>, RedisError> {
    let keys: Vec<&str> = items.iter().map(|item| item.key).collect();
    let batches: Vec<Vec<usize>> = route
        .batches(&keys)
        .into_iter()
        .flat_map(|batch| by_lease(items, batch))
        .collect();
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

/// `batch` (indexes into `items`) split by lease, in order within each
/// lease: one call carries one lease. The watchdog's locks mostly share
/// theirs, so mostly the batch itself.
fn by_lease(items: &[RenewItem<'_>], mut batch: Vec<usize>) -> Vec<Vec<usize>> {
    let lease = |i: &usize| items[*i].lease;
    let Some(first) = batch.first().map(lease) else {
        return Vec::new();
    };
    if batch.iter().all(|i| lease(i) == first) {
        return vec![batch];
    }
    batch.sort_by_key(lease);
    batch
        .chunk_by(|a, b| lease(a) == lease(b))
        .map(<[usize]>::to_vec)
        .collect()
}

/// What renew.lua expects a lock to hold while its acquisition holds it
/// and nobody has marked it waited for (`L1:<fence>:h:<owner>`), written
/// into `value`.
fn write_held_value(value: &mut String, item: &RenewItem<'_>) {
    value.clear();
    // Writing to a String cannot fail.
    let _ = write!(value, "L1:{}:h:{}", item.token, item.owner);
}

/// One batch's renewal: the items at `indexes` (of one lease), in one
/// script call, then `WAIT` when the route syncs replicas. Without enough
/// replicas, a renewed lock is `Unknown`: a failover now would promote a
/// replica that keeps the older expiry, so the lock's validity is not
/// extended, and the watchdog tries again until it runs out.
async fn renew_batch(
    route: &impl Route,
    items: &[RenewItem<'_>],
    indexes: &[usize],
) -> Result<Vec<Renewal>, RedisError> {
    // The keys and the values renew.lua expects, one buffer for the call.
    let size: usize = indexes.iter().map(|&i| renewal_bytes(&items[i])).sum();
    let mut cmd = Cmd::with_capacity(4 + 2 * indexes.len(), 96 + size);
    cmd.arg("EVALSHA").arg(RENEW.get_hash()).arg(indexes.len());
    for &i in indexes {
        cmd.arg(items[i].key);
    }
    cmd.arg(millis(items[indexes[0]].lease));
    let mut value = String::with_capacity(96);
    for &i in indexes {
        write_held_value(&mut value, &items[i]);
        cmd.arg(value.as_str());
    }
    let call = ScriptCall {
        script: &RENEW,
        key: items[indexes[0]].key,
        cmd,
        replay: None,
        coalesce: None,
    };
    let (failed, synced): (Vec<i64>, bool) = match route.sync() {
        None => (route.run(&Lane::Home, &call).await?, true),
        Some(sync) => {
            let (answer, acked) = route.run_synced(call, None).await?;
            (redis::from_redis_value(answer)?, acked >= sync.replicas)
        }
    };
    let mut renewed = vec![None; indexes.len()];
    for answer in failed {
        // 4 * index + why (see renew.lua).
        let ended = match answer.rem_euclid(4) {
            1 => Ended::Gone,
            2 => Ended::ForceUnlocked,
            _ => Ended::Taken,
        };
        let slot = usize::try_from(answer.div_euclid(4))
            .ok()
            .and_then(|index| index.checked_sub(1))
            .and_then(|i| renewed.get_mut(i))
            .ok_or_else(|| {
                RedisError::from((
                    redis::ErrorKind::UnexpectedReturnType,
                    "renew.lua answered a lock out of the batch",
                    format!("answer {answer} for {} locks", indexes.len()),
                ))
            })?;
        *slot = Some(ended);
    }
    Ok(renewed.into_iter().map(|r| renewal(r, synced)).collect())
}

/// About how many bytes `item` adds to a renewal call: its key and the
/// value renew.lua expects, with their framing.
fn renewal_bytes(item: &RenewItem<'_>) -> usize {
    item.key.len() + item.owner.len() + 48
}

/// The meaning of renew.lua's answer for one lock (`None`: not among the
/// failed); a renewal the replicas
/// did not acknowledge (`synced` false) is not known to last.
fn renewal(ended: Option<Ended>, synced: bool) -> Renewal {
    match (ended, synced) {
        (None, true) => Renewal::Renewed,
        (None, false) => Renewal::Unknown,
        (Some(ended), _) => Renewal::Gone(ended),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{by_lease, RenewItem};
    use crate::route::Notices;

    #[test]
    fn a_renewal_call_carries_one_lease() {
        let item = |key, secs| RenewItem {
            key,
            owner: "o:1",
            token: 1,
            lease: Duration::from_secs(secs),
        };
        let same = [item("a", 30), item("b", 30), item("c", 30)];
        assert_eq!(by_lease(&same, vec![2, 0, 1]), [vec![2, 0, 1]]);
        let mixed = [item("a", 30), item("b", 5), item("c", 30), item("d", 5)];
        assert_eq!(by_lease(&mixed, vec![0, 1, 2, 3]), [vec![1, 3], vec![0, 2]]);
        assert!(by_lease(&mixed, Vec::new()).is_empty());
    }

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
