//! What every kind's script calls share, on any route that runs scripts:
//! the pair of release scripts (publishing by `PUBLISH` or by `SPUBLISH`),
//! the release call and how its answer reads, and an acquire call's run,
//! by itself or followed by `WAIT` (the synced path). The kinds' own files
//! build their calls; `scripted.rs` picks the kind.

use std::sync::OnceLock;
use std::time::Duration;

use redis::{Cmd, RedisError, Script};

use super::answers;
use super::{Acquire, Claim, End, Release};
use crate::route::{Coalesce, Lane, Notices, Route, ScriptCall};
use redis::Value;

/// A script that publishes a release notice, in the two forms a route may
/// ask for (see [`Route::notices`]): as written, publishing by `PUBLISH`,
/// and publishing by `SPUBLISH` (see [`sharded`]). Each is made on first
/// use.
pub(super) struct ReleaseScripts {
    source: &'static str,
    plain: OnceLock<Script>,
    sharded: OnceLock<Script>,
    /// How a plain release may go out with others (see [`Coalesce`]).
    coalesce: Option<&'static Coalesce>,
}

impl ReleaseScripts {
    /// The pair for `source`.
    pub(super) const fn new(source: &'static str) -> Self {
        ReleaseScripts {
            source,
            plain: OnceLock::new(),
            sharded: OnceLock::new(),
            coalesce: None,
        }
    }

    /// The pair for `source`, whose plain release goes out with others as
    /// `coalesce` says.
    pub(super) const fn coalesced(source: &'static str, coalesce: &'static Coalesce) -> Self {
        ReleaseScripts {
            source,
            plain: OnceLock::new(),
            sharded: OnceLock::new(),
            coalesce: Some(coalesce),
        }
    }

    /// The script for a route whose notices travel as `notices` says.
    pub(super) fn of(&'static self, notices: Notices) -> &'static Script {
        match notices {
            Notices::Plain => self.plain.get_or_init(|| Script::new(self.source)),
            Notices::Sharded => self
                .sharded
                .get_or_init(|| Script::new(&sharded(self.source))),
        }
    }
}

/// `source` publishing by `SPUBLISH` where the server has it: the channel,
/// named like the lock key, is in the lock's slot, so the script may
/// publish on it, and only the slot's shard hears it. Where `SPUBLISH` is
/// unknown (Redis 6.2), the script publishes by `PUBLISH`, which a cluster
/// sends to every node, and the client's subscriptions there use
/// `SUBSCRIBE` (see `route/cluster/pubsub.rs`): each node's script finds
/// out for itself, so a cluster of mixed families notifies too.
pub(super) fn sharded(source: &str) -> String {
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

/// A kind's release call: `scripts` for the route's notices, on `owner`'s
/// hold of `key` (of lease `lease`, for which a route that fails over keeps
/// it), with `token` in its notice; with `end`, the hold stays taken until
/// that end (kept by a route that fails over until then too).
pub(super) fn release_call<'a>(
    scripts: &'static ReleaseScripts,
    route: &impl Route,
    key: &'a str,
    (owner, token): (&str, u64),
    (lease, end): (Duration, Option<End>),
) -> ScriptCall<'a> {
    let client_id = route.client_id();
    let script = scripts.of(route.notices());
    let size = owner.len() + client_id.len() + 20;
    let mut call = match end {
        None => ScriptCall::new(script, key, (owner, client_id, token), size),
        Some(end) => {
            let args = (owner, client_id, token, end.at_ms);
            ScriptCall::new(script, key, args, size + 20)
        }
    };
    // The end is at most `at_least` from now: the acquisition was before.
    call.replay = Some(end.map_or(lease, |end| lease.max(end.at_least)));
    if route.notices() == Notices::Plain {
        call.coalesce = scripts.coalesce.copied();
    }
    call
}

/// Frees `key` if `owner` holds it (a hold of lease `lease`), or withdraws
/// its place in a line, by `scripts` over `lane`: freed when the script
/// answers 1 (with `end` still ahead, kept until then instead). `token`
/// goes out with the notice, so that a waiter told by several nodes wakes
/// once.
///
/// A release with an end, where the route syncs replicas, is followed by
/// `WAIT` as an acquire is: the end may lie past the lease the replicas
/// know, and a replica promoted without it would free the lock at that
/// lease (a release sent again after the failover finds nothing there
/// once the lease has run out).
pub(super) async fn release(
    scripts: &'static ReleaseScripts,
    route: &impl Route,
    lane: &Lane,
    key: &str,
    hold: (&str, u64),
    lease_end: (Duration, Option<End>),
) -> Result<Release, RedisError> {
    let call = release_call(scripts, route, key, hold, lease_end);
    let answer: Value = match (lease_end.1, route.sync()) {
        (Some(_), Some(sync)) => {
            let (answer, acked) = Box::pin(route.run_synced(call, None)).await?;
            if acked < sync.replicas {
                tracing::warn!(
                    key,
                    acked,
                    needed = sync.replicas,
                    "the end of a hold_at_least reached fewer replicas than sync_replicas \
                     asks: a failover before that end may free the lock at its lease"
                );
            }
            answer
        }
        _ => route.run(lane, &call).await?,
    };
    answers::released(answer, key)
}

/// Runs an acquire `call` (of any kind) of `owner` for `claim` over
/// `lane`. Where the route syncs replicas, runs it followed by `WAIT`
/// instead, with the release of `owner` by `scripts` to undo it.
pub(super) async fn acquire(
    route: &impl Route,
    lane: &Lane,
    call: ScriptCall<'_>,
    scripts: &'static ReleaseScripts,
    (owner, claim): (&str, &Claim),
) -> Result<Acquire, RedisError> {
    if route.sync().is_some() {
        // Boxed, so the default path's future does not grow by its state.
        // The undo frees at once: the caller never knew it held the lock,
        // so its body never ran, and no hold is kept after it.
        let undo = release_call(scripts, route, call.key, (owner, 0), (claim.lease, None)).cmd;
        return Box::pin(acquire_synced(route, call, undo, claim.timed)).await;
    }
    answers::acquired(route.run(lane, &call).await?, claim.timed)
}

/// An acquire `call` (of a `timed` claim or not) followed by `WAIT`; a lock
/// taken without enough replicas is `NotReplicated`. If the caller is gone
/// when a granting answer comes, the route sends `undo` (the release of the
/// same owner) on the same connection.
#[cold]
async fn acquire_synced(
    route: &impl Route,
    call: ScriptCall<'_>,
    undo: Cmd,
    timed: bool,
) -> Result<Acquire, RedisError> {
    let needed = route.sync().map_or(0, |sync| sync.replicas);
    let (answer, acked) = route.run_synced(call, Some(undo)).await?;
    let answer = answers::acquired(answer, timed)?;
    match answer.token() {
        Some(token) if acked < needed => Ok(Acquire::NotReplicated { token, acked }),
        _ => Ok(answer),
    }
}
