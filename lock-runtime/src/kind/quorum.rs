//! The quorum rules on Redlock (the exclusive lock and readers; which
//! kinds Redlock refuses): how the answers of N
//! independent masters combine (see `route/redlock.rs` for how each
//! operation reaches every node).
//!
//! A lock is taken when a majority (N/2 + 1) took it within its lease;
//! otherwise the holds that were taken are given back and the caller
//! retries. A renewal that a majority confirms keeps the lock; one that a
//! majority refuses means it is lost; anything in between (nodes that did
//! not answer) is retried until the lock's validity ends.
//!
//! The fencing token is the largest token of the nodes that granted the
//! lock, written back to the granting nodes that answered less before the
//! lock counts as taken: a quorum then keeps it, and any later quorum
//! includes one of those nodes, which answers a larger token.
//!
//! Also here: how the operator's calls (inspect, force-unlock) combine
//! over the nodes, and the kinds a quorum refuses (permits and fair locks:
//! counts and lines kept per node do not add up to one across a quorum).

use std::time::Duration;

use tokio::time::Instant;

use super::admin::{force_node, inspect_node, LockView, NodeLock};
use super::{exclusive, scripted};
use super::{Acquire, Claim, Ended, Kind, Release, RenewItem, Renewal, Tail};
use crate::route::redlock::{Answers, RedlockBackend};
use crate::route::{BackendError, Lane};

/// Takes `key` for `owner` on a majority of nodes, as `claim` asks: the
/// exclusive lock, or a reader (a reader and a writer each need a
/// majority, and any two majorities meet, so they never hold together).
/// Permits and fair locks are refused before they come here.
pub(crate) async fn acquire(
    b: &RedlockBackend,
    key: &str,
    owner: &str,
    claim: Claim,
) -> Result<Acquire, BackendError> {
    let sent = Instant::now();
    let lease = claim.lease;
    let answers = b
        .on_all(|node| scripted::acquire(node, &Lane::Home, key, owner, claim))
        .await;
    let drift = b.drift(lease);
    let mut tokens = Vec::new();
    let mut ttls = Vec::new();
    let mut queued = 0;
    for answer in &answers {
        match answer {
            Ok(
                Acquire::Acquired(token)
                | Acquire::Timed { token, .. }
                | Acquire::Shared { token, .. },
            ) => tokens.push(*token),
            Ok(Acquire::Held(ttl)) => ttls.push(*ttl),
            Ok(Acquire::Queued { ttl, .. }) => {
                queued += 1;
                ttls.push(*ttl);
            }
            // Redlock nodes are independent masters: never asked to wait
            // for replicas.
            Ok(Acquire::NotReplicated { .. }) | Err(_) => {}
        }
    }
    if tokens.len() >= b.quorum() {
        let token = tokens.iter().copied().max().unwrap_or_default();
        let given = |i: usize| granted(&answers[i]);
        let kept = write_back(b, given, (&[key], &[owner]), &[token]).await;
        if kept >= b.quorum() && sent.elapsed() + drift < lease {
            return Ok(match claim.kind {
                Kind::Exclusive if claim.timed => Acquire::Timed {
                    token,
                    since: each_since(&answers),
                },
                Kind::Exclusive => Acquire::Acquired(token),
                _ => Acquire::Shared { token, room: true },
            });
        }
    }
    let answered = tokens.len() + ttls.len();
    if answered < b.quorum() {
        // The caller follows an acquire whose outcome is unknown with a
        // release on every node.
        return Err(b.no_quorum(answered, answers));
    }
    // Another owner holds a majority: the caller waits. A writer whose
    // claim ahead of new readers a majority keeps renews it while it waits,
    // and withdraws it (a release on every node) when it gives up.
    let waits = tokens.is_empty() && ttls.len() >= b.quorum();
    let keeps_place = waits && queued >= b.quorum();
    if !tokens.is_empty() || answers.iter().any(Result::is_err) || (queued > 0 && !keeps_place) {
        // Not taken: give back what was taken, also where the acquire
        // failed (it may still land there), and places no majority keeps;
        // the places a majority keeps stay.
        let kept = |i: usize| keeps_place && matches!(answers[i], Ok(Acquire::Queued { .. }));
        release_where(b, key, (owner, 0), (claim.kind, lease), |i| !kept(i)).await;
    }
    if waits {
        // Wait for the earliest expiry, or for a release notice.
        let ttl = ttls.into_iter().flatten().min();
        if keeps_place {
            let holder_ttl = ttl;
            return Ok(Acquire::Queued { ttl, holder_ttl });
        }
        return Ok(Acquire::Held(ttl));
    }
    // Some nodes granted it but not a majority: a split vote, a release
    // that has reached only some nodes yet (its notice may have woken us
    // early), or too slow. Retry after a random short delay.
    Ok(Acquire::Held(Some(random_delay())))
}

/// Each node's time when it granted a timed claim, in node order: 0 where
/// it did not.
fn each_since(answers: &Answers<Acquire>) -> Box<[u64]> {
    let since = |answer: &Result<Acquire, _>| match answer {
        Ok(Acquire::Timed { since, .. }) => since.first().copied().unwrap_or(0),
        _ => 0,
    };
    answers.iter().map(since).collect()
}

/// The tokens a node's answer granted: one, or none.
fn granted<E>(answer: &Result<Acquire, E>) -> Option<&[u64]> {
    match answer {
        Ok(
            Acquire::Acquired(token) | Acquire::Timed { token, .. } | Acquire::Shared { token, .. },
        ) => Some(std::slice::from_ref(token)),
        _ => None,
    }
}

/// Writes each key's token (`tokens`, of `keys` held by `owners`) back to
/// the granting nodes that gave it less, one key or a set alike; `given(i)`
/// is what node `i` granted, if it did. How many granting nodes now keep
/// every key's token.
pub(super) async fn write_back<'a>(
    b: &RedlockBackend,
    given: impl Fn(usize) -> Option<&'a [u64]>,
    (keys, owners): (&[&str], &[&str]),
    tokens: &[u64],
) -> usize {
    let nodes = b.nodes().len();
    let behind =
        |i: usize| given(i).is_some_and(|given| given.iter().zip(tokens).any(|(g, t)| g < t));
    if (0..nodes).all(|i| !behind(i)) {
        return (0..nodes).filter(|&i| given(i).is_some()).count();
    }
    let timeout = b.node_timeout();
    let writes = b.nodes().iter().enumerate().map(|(i, node)| {
        let given = given(i);
        async move {
            let Some(given) = given else {
                return false;
            };
            for (k, (&given, &token)) in given.iter().zip(tokens).enumerate() {
                if given < token {
                    let write = exclusive::fence(&node.backend, keys[k], owners[k], token);
                    if !matches!(tokio::time::timeout(timeout, write).await, Ok(Ok(true))) {
                        return false;
                    }
                }
            }
            true
        }
    });
    let kept = futures_util::future::join_all(writes).await;
    kept.into_iter().filter(|kept| *kept).count()
}

/// Freed when a quorum freed the owner's hold (or, with `tail`, kept it
/// until its end on that node); not held when a quorum did not have it;
/// otherwise not known (an error).
pub(crate) async fn release(
    b: &RedlockBackend,
    key: &str,
    hold: (&str, u64),
    (kind, lease, tail): (Kind, Duration, Option<&Tail>),
) -> Result<Release, BackendError> {
    let answers = release_on_all(b, key, hold, (kind, lease, tail)).await;
    let freed = answers
        .iter()
        .filter(|a| matches!(a, Ok(Release::Freed)))
        .count();
    let ends = answers.iter().filter_map(|a| match a {
        Ok(Release::NotHeld(ended)) => Some(*ended),
        _ => None,
    });
    let not_held = ends.clone().count();
    if freed >= b.quorum() {
        return Ok(Release::Freed);
    }
    if not_held >= b.quorum() {
        let ended = ends.reduce(Ended::worst).unwrap_or(Ended::Gone);
        return Ok(Release::NotHeld(ended));
    }
    // The failed nodes may have held it: we cannot tell.
    Err(b.no_quorum(freed + not_held, answers))
}

/// The release of `hold` (of `kind`) on every node; with `tail`, each
/// node's own end (by its own clock) goes to that node.
async fn release_on_all(
    b: &RedlockBackend,
    key: &str,
    hold: (&str, u64),
    (kind, lease, tail): (Kind, Duration, Option<&Tail>),
) -> Answers<Release> {
    b.on_each(|i, node| {
        let end = tail.and_then(|tail| tail.on_node(i));
        scripted::release(node, &Lane::Home, key, hold, (kind, lease, end))
    })
    .await
}

/// The release of `hold` (of `kind`) on the nodes whose index `send`
/// picks, each within the node timeout; the answers do not matter.
async fn release_where(
    b: &RedlockBackend,
    key: &str,
    hold: (&str, u64),
    (kind, lease): (Kind, Duration),
    send: impl Fn(usize) -> bool,
) {
    let timeout = b.node_timeout();
    let releases = b.nodes().iter().enumerate().map(|(i, node)| {
        let send = send(i);
        async move {
            if !send {
                return;
            }
            let kind_lease = (kind, lease, None);
            let release = scripted::release(&node.backend, &Lane::Home, key, hold, kind_lease);
            let _ = tokio::time::timeout(timeout, release).await;
        }
    });
    futures_util::future::join_all(releases).await;
}

/// A lock is renewed when a majority reset its lease, gone when a
/// majority said it is gone or another owner's, and not known otherwise.
pub(crate) async fn renew(
    b: &RedlockBackend,
    items: &[RenewItem<'_>],
) -> Result<Vec<Renewal>, BackendError> {
    let answers = b.on_all(|node| exclusive::renew(node, items)).await;
    if answers.iter().all(|a| a.is_err()) {
        return Err(b.no_quorum(0, answers));
    }
    let mut renewed = vec![0; items.len()];
    let mut gone: Vec<(usize, Option<Ended>)> = vec![(0, None); items.len()];
    for found in answers.iter().flatten() {
        for (i, renewal) in found.iter().enumerate() {
            renewed[i] += usize::from(*renewal == Renewal::Renewed);
            if let Renewal::Gone(ended) = *renewal {
                let (count, worst) = &mut gone[i];
                *count += 1;
                *worst = Some(worst.map_or(ended, |w| w.worst(ended)));
            }
        }
    }
    let quorum = b.quorum();
    let decide = |(renewed, (gone, ended)): (usize, (usize, Option<Ended>))| {
        if renewed >= quorum {
            Renewal::Renewed
        } else if gone >= quorum {
            Renewal::Gone(ended.unwrap_or(Ended::Gone))
        } else {
            Renewal::Unknown
        }
    };
    Ok(renewed.into_iter().zip(gone).map(decide).collect())
}

/// A Redlock lock is held by the owner that a quorum names, for as long as
/// a quorum keeps it (the quorum-th longest TTL among them); otherwise free.
/// The fence is the largest any node keeps.
pub(crate) async fn inspect(b: &RedlockBackend, key: &str) -> Result<LockView, BackendError> {
    let answers = b.on_all(|node| inspect_node(node, key)).await;
    let views: Vec<&LockView> = answers.iter().flatten().collect();
    if views.len() < b.quorum() {
        return Err(BackendError::NoQuorum {
            needed: b.quorum(),
            reached: views.len(),
            failures: b.failures(answers),
        });
    }
    let kept: Vec<&NodeLock> = views.iter().filter_map(|v| v.as_ref()).collect();
    let Some(fence) = kept.iter().map(|l| l.fence).max() else {
        return Ok(None);
    };
    for candidate in kept.iter().filter_map(|l| l.owner.as_deref()) {
        let mut ttls: Vec<Option<Duration>> = kept
            .iter()
            .filter(|l| l.owner.as_deref() == Some(candidate))
            .map(|l| l.ttl)
            .collect();
        if ttls.len() >= b.quorum() {
            // Longest first, no expiry longest of all.
            ttls.sort_by(|x, y| y.unwrap_or(Duration::MAX).cmp(&x.unwrap_or(Duration::MAX)));
            return Ok(Some(NodeLock {
                fence,
                owner: Some(candidate.to_owned()),
                ttl: ttls[b.quorum() - 1],
            }));
        }
    }
    Ok(Some(NodeLock {
        fence,
        owner: None,
        ttl: None,
    }))
}

/// Frees the lock on every node that answers; a quorum must answer.
pub(crate) async fn force_unlock(
    b: &RedlockBackend,
    key: &str,
    client_id: &str,
) -> Result<Option<u64>, BackendError> {
    let answers = b.on_all(|node| force_node(node, key, client_id)).await;
    let answered = answers.iter().filter(|a| a.is_ok()).count();
    if answered < b.quorum() {
        return Err(BackendError::NoQuorum {
            needed: b.quorum(),
            reached: answered,
            failures: b.failures(answers),
        });
    }
    Ok(answers.into_iter().flatten().flatten().max())
}

/// Why a Redlock quorum refuses locks of `kind`, if it does: permits and
/// fair locks are not safe there.
pub(crate) fn refuses(kind: Kind) -> Option<&'static str> {
    matches!(kind, Kind::Permits(_) | Kind::Fair).then_some(
        "permits and fair locks are not safe on Redlock (counts and lines kept \
         per node do not add up to one across a quorum); use one node, Sentinel \
         or Cluster for them, or a read-write lock",
    )
}

/// 5 to 50 ms, so that clients that split a vote do not collide again.
pub(super) fn random_delay() -> Duration {
    let random = uuid::Uuid::new_v4().as_u128();
    Duration::from_millis(5 + (random % 46) as u64)
}
