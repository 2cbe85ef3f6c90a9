//! The exclusive lock (layout 1, see `docs/redis-layout.md`): its scripts,
//! its operations as script calls, and how their answers read, written
//! once for every route that runs scripts (one node, Sentinel, Cluster; a
//! Redlock node is one node).

use std::sync::LazyLock;
use std::time::Duration;

use futures_util::future::join_all;
use redis::{Cmd, RedisError, Script};

use super::{answers, sources};
use super::{Acquire, Claim, Release, RenewItem, Renewal};
use crate::options::LockOptions;
use crate::route::{millis, Lane, Notices, Route, ScriptCall};

/// Takes a lock for one acquisition.
pub(crate) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(&acquire_source()));
/// Frees a lock held by one acquisition; publishes its notice.
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(sources::RELEASE));
/// The same, publishing by `SPUBLISH` (see [`sharded`]).
static RELEASE_SHARDED: LazyLock<Script> =
    LazyLock::new(|| Script::new(&sharded(sources::RELEASE)));
/// Resets the leases of a batch of held locks.
pub(crate) static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(sources::RENEW));
/// Raises a held lock's fence (Redlock's write-back).
static FENCE: LazyLock<Script> = LazyLock::new(|| Script::new(sources::FENCE));

/// `source` publishing by `SPUBLISH` where the server has it: the channel,
/// named like the lock key, is in the lock's slot, so the script may
/// publish on it, and only the slot's shard hears it. Where `SPUBLISH` is
/// unknown (Redis 6.2), the script publishes by `PUBLISH`, which a cluster
/// sends to every node, and the client's subscriptions there use
/// `SUBSCRIBE` (see `route/notices.rs`): each node's script finds out for
/// itself, so a cluster of mixed families notifies too.
pub(crate) fn sharded(source: &str) -> String {
    let publish = "redis.pcall('publish', key,";
    assert!(source.contains(publish));
    let publish_sharded = "local function publish_sharded(channel, message)\n\
        \x20 local sent = redis.pcall('spublish', channel, message)\n\
        \x20 if type(sent) == 'table' and sent.err then redis.pcall('publish', channel, message) end\n\
        end\n";
    format!(
        "{publish_sharded}{}",
        source.replace(publish, "publish_sharded(key,")
    )
}

/// The acquire script's source.
fn acquire_source() -> String {
    let source = sources::ACQUIRE;
    if cfg!(feature = "defect-token-without-clock") {
        // The checker's proof: tokens without the clock repeat after a
        // restore from a snapshot.
        let rule =
            "local token = math.max(fence + 1, tonumber(now[1]) * 1000000 + tonumber(now[2]))";
        let without = "local token = fence + 1\nif fence == 0 then token = tonumber(now[1]) * 1000000 + tonumber(now[2]) end";
        assert!(source.contains(rule));
        return source.replace(rule, without);
    }
    source.to_owned()
}

/// The release script for `route`'s notices.
fn release_script(notices: Notices) -> &'static Script {
    match notices {
        Notices::Plain => &RELEASE,
        Notices::Sharded => &RELEASE_SHARDED,
    }
}

/// The release of `owner`'s hold of `key` (of lease `lease`), with
/// `token` in its notice.
fn release_call<'a>(
    route: &impl Route,
    key: &'a str,
    hold: (&str, u64),
    lease: Duration,
) -> ScriptCall<'a> {
    release_call_of(release_script, route, key, hold, lease)
}

/// A kind's release call: `script` for the route's notices, on `owner`'s
/// hold of `key` (of lease `lease`, for which a route that fails over keeps
/// it), with `token` in its notice.
pub(super) fn release_call_of<'a>(
    script: fn(Notices) -> &'static Script,
    route: &impl Route,
    key: &'a str,
    (owner, token): (&str, u64),
    lease: Duration,
) -> ScriptCall<'a> {
    let client_id = route.client_id();
    let args = (owner, client_id, token);
    let size = owner.len() + client_id.len() + 20;
    let mut call = ScriptCall::new(script(route.notices()), key, args, size);
    call.replay = Some(lease);
    call
}

/// Runs a release `call` (of any kind) over `lane`: freed when it answers 1.
pub(super) async fn run_release(
    route: &impl Route,
    lane: &Lane,
    call: &ScriptCall<'_>,
) -> Result<Release, RedisError> {
    let freed: i64 = route.run(lane, call).await?;
    Ok(if freed == 1 {
        Release::Freed
    } else {
        Release::NotHeld
    })
}

/// Takes `key` for `owner` for the claim's lease on `route`, over `lane`.
pub(crate) async fn acquire(
    route: &impl Route,
    lane: &Lane,
    key: &str,
    owner: &str,
    claim: Claim,
) -> Result<Acquire, RedisError> {
    let lease = millis(claim.lease);
    // The waiter lease only when it is not the scripts' default.
    let call = if claim.waiter_lease == LockOptions::DEFAULT_WAITER_LEASE {
        ScriptCall::new(&ACQUIRE, key, (owner, lease), owner.len() + 20)
    } else {
        let args = (owner, lease, millis(claim.waiter_lease));
        ScriptCall::new(&ACQUIRE, key, args, owner.len() + 40)
    };
    if route.sync().is_some() {
        // Boxed, so the default path's future does not grow by its state.
        let undo = release_call(route, key, (owner, 0), claim.lease).cmd;
        return Box::pin(acquire_synced(route, call, undo)).await;
    }
    answers::acquired(route.run(lane, &call).await?)
}

/// An acquire `call` (of any kind) followed by `WAIT`; a lock taken without
/// enough replicas is `NotReplicated`. If the caller is gone when a granting
/// answer comes, the route sends `undo` (the release of the same owner) on
/// the same connection.
#[cold]
pub(super) async fn acquire_synced(
    route: &impl Route,
    call: ScriptCall<'_>,
    undo: Cmd,
) -> Result<Acquire, RedisError> {
    let needed = route.sync().map_or(0, |sync| sync.replicas);
    let (answer, acked) = route.run_synced(call, Some(undo)).await?;
    let answer = answers::acquired(answer)?;
    match answer.token() {
        Some(token) if acked < needed => Ok(Acquire::NotReplicated { token, acked }),
        _ => Ok(answer),
    }
}

/// Frees `key` if `owner` holds it (a hold of lease `lease`); `token` goes
/// out with the notice, so that a waiter told by several nodes wakes once.
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
    #[test]
    fn the_sharded_release_publishes_by_spublish() {
        let plain = redis::Script::new(super::sources::RELEASE);
        assert!(super::RELEASE_SHARDED.get_hash() != plain.get_hash());
    }
}
