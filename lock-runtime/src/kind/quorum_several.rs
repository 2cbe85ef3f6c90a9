//! Several keys at once on Redlock: each node takes the whole set in one
//! script call (`several.rs`), and the set is taken when a majority took
//! all of it within the lease; each key's fencing token is the largest the
//! granting nodes gave it, written back where a granting node gave less
//! by the write-back one key uses (`quorum::write_back`). Otherwise every node that may have
//! taken the set gives it back, and the caller waits for the key that a
//! majority refused, or retries after a short random delay on a split vote.

use futures_util::future::join_all;
use tokio::time::Instant;

use super::quorum::write_back;
use super::several::{self, Several};
use super::Claim;
use crate::route::redlock::{Answers, RedlockBackend};
use crate::route::{BackendError, Lane};

/// Takes every key of `keys` (key `i` for `owners[i]`) on a majority of
/// nodes, as `claim` asks (the exclusive lock or a reader).
pub(crate) async fn acquire_all(
    b: &RedlockBackend,
    keys: &[&str],
    owners: &[&str],
    claim: Claim,
) -> Result<Several, BackendError> {
    let sent = Instant::now();
    let answers = b
        .on_all(|node| several::acquire(node, &Lane::Home, keys, owners, claim))
        .await;
    let taken = |i: usize| matches!(&answers[i], Ok(Several::Taken(_)));
    let granted = (0..answers.len()).filter(|&i| taken(i)).count();
    if granted >= b.quorum() {
        let tokens = largest_tokens(&answers, keys.len());
        let given = |i: usize| match &answers[i] {
            Ok(Several::Taken(given)) => Some(given.as_slice()),
            _ => None,
        };
        let kept = write_back(b, given, (keys, owners), &tokens).await;
        if kept >= b.quorum() && sent.elapsed() + b.drift(claim.lease) < claim.lease {
            return Ok(Several::Taken(tokens));
        }
    }
    // Not taken: give the set back wherever it may be held (granted, or
    // failed with the outcome unknown).
    let refusals: Vec<&Several> = answers
        .iter()
        .flatten()
        .filter(|a| matches!(a, Several::Refused { .. }))
        .collect();
    let answered = granted + refusals.len();
    let refused = refusals.len();
    let first_refusal = refusals
        .iter()
        .filter_map(|a| match a {
            Several::Refused { index, ttl } => Some((*index, *ttl)),
            _ => None,
        })
        .min_by_key(|(_, ttl)| ttl.unwrap_or(std::time::Duration::MAX));
    let give_back =
        (0..answers.len()).filter(|&i| !matches!(&answers[i], Ok(Several::Refused { .. })));
    let give_back: Vec<usize> = give_back.collect();
    release_on(b, keys, owners, claim, &give_back).await;
    if answered < b.quorum() {
        return Err(b.no_quorum(answered, answers));
    }
    match first_refusal {
        Some((index, ttl)) if refused >= b.quorum() => Ok(Several::Refused { index, ttl }),
        // A split vote, or too slow: retry after a short random delay,
        // waiting on the first key.
        refusal => Ok(Several::Refused {
            index: refusal.map_or(0, |(index, _)| index),
            ttl: Some(super::quorum::random_delay()),
        }),
    }
}

/// Each key's largest token among the nodes that took the set.
fn largest_tokens(answers: &Answers<Several>, count: usize) -> Vec<u64> {
    let mut tokens = vec![0; count];
    for answer in answers.iter().flatten() {
        if let Several::Taken(taken) = answer {
            for (kept, token) in tokens.iter_mut().zip(taken) {
                *kept = (*kept).max(*token);
            }
        }
    }
    tokens
}

/// Gives the set back, key by key, on the nodes at `nodes`, each within the
/// node timeout; the answers do not matter.
async fn release_on(
    b: &RedlockBackend,
    keys: &[&str],
    owners: &[&str],
    claim: Claim,
    nodes: &[usize],
) {
    let timeout = b.node_timeout();
    let kind_lease = (claim.kind, claim.give_back_lease(), None);
    let releases = nodes.iter().flat_map(|&n| {
        let node = &b.nodes()[n].backend;
        keys.iter().zip(owners).map(move |(key, owner)| async move {
            let release = super::scripted::release(node, &Lane::Home, key, (owner, 0), kind_lease);
            let _ = tokio::time::timeout(timeout, release).await;
        })
    });
    join_all(releases).await;
}
