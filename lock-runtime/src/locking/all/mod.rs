//! A call that locks several keys at once, all or nothing: the keys are
//! taken in one request (`take.rs`; on Cluster, slot by slot), the body
//! runs in a chain of frames, one per key, and every key is given back when
//! the body ends, key by key. Keys that the task's chain already holds are
//! re-entered in their turn, as a single-key call re-enters them; their
//! frames are outermost, the keys this call took inside them, and the first
//! key listed innermost, so that `fencing_token()` in the body is that
//! key's token.

mod chain;
mod take;

use std::future::Future;
use std::panic::Location;

use tracing::{Instrument, Span};

use super::outcome::Report;
use super::phase::{admit, call_span, note_kind, reenters, wait_turn};
use crate::client::{ClientRef, LockClient};
use crate::error::LockError;
use crate::held::{Frame, Grant, HeldLock, Loss};
use crate::kind::{Claim, Kind};
use crate::options::LockOptions;
use crate::ownership;
use crate::telemetry::{self, UNLABELLED};
use crate::turn::Take;
use chain::Chain;
use take::Set;

/// Runs `body` once every key of `keys` (full backend keys) is held on
/// `client`, giving back a lock failure as `O` says, as a call made `at`.
pub(crate) async fn run_all_at<O, T, E, F>(
    client: ClientRef<'_>,
    keys: Vec<String>,
    options: LockOptions,
    body: F,
    at: &'static Location<'static>,
) -> O::Output
where
    F: Future<Output = Result<T, E>>,
    O: Report<T, E>,
{
    let keys = distinct(keys);
    let span = call_span(&client, &keys.join(", "), &options).map_or_else(Span::none, |span| *span);
    let run = async {
        let mut chain = Chain::new(&client);
        match enter(&client, keys, &options, at, &mut chain).await {
            Ok(()) => chain.run::<O, T, E, F>(body).await,
            Err(error) => O::not_run(error),
        }
    };
    run.instrument(span).await
}

/// `keys` without repeats, in the order first listed.
fn distinct(keys: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::with_capacity(keys.len());
    keys.into_iter()
        .filter(|key| seen.insert(key.clone()))
        .collect()
}

/// The kind every key of a call with `options` takes, or why there is none.
fn kind_of(options: &LockOptions) -> Result<Kind, &'static str> {
    if options.held_at_least().is_some() {
        return Err(
            "hold_at_least with several keys: a job that runs once per period locks one key; \
             drop hold_at_least or lock one key",
        );
    }
    match Kind::of(options)? {
        kind @ (Kind::Exclusive | Kind::Read) => Ok(kind),
        Kind::Permits(_) | Kind::Fair => Err(
            "permits or fair with several keys: a count or an arrival order over a set of \
             keys has no meaning here; lock the keys as plain, write or read locks",
        ),
    }
}

/// Re-enters the keys held around the call, in their turn, then takes the
/// others, all or nothing, building the body's chain in `chain` (which
/// gives back what it holds if the call ends here).
async fn enter(
    client: &ClientRef<'_>,
    keys: Vec<String>,
    options: &LockOptions,
    at: &'static Location<'static>,
    chain: &mut Chain<'_>,
) -> Result<(), LockError> {
    let inner = &client.inner;
    let invalid = |key: &str, message| LockError::Invalid {
        key: key.to_owned(),
        message,
    };
    let Some(first) = keys.first() else {
        return Err(invalid("", "no keys: list at least one key to lock"));
    };
    let kind = kind_of(options).map_err(|message| invalid(first, message))?;
    let wait = options.wait_or(inner.wait).min(LockOptions::LONGEST);
    let mut grants = Vec::with_capacity(keys.len());
    let mut to_take = Vec::with_capacity(keys.len());
    for key in &keys {
        if let Some(frame) = ownership::held(&inner.tag, key) {
            reenters(&frame, kind, key)?;
            let top = chain.top().expect("a held lock is in a chain");
            chain.push(reenter(client, key, frame, top, wait).await?);
        } else {
            grants.push(admit(inner, key, options, kind)?);
            to_take.push(key.clone());
        }
    }
    if let Some(grant) = grants.first().copied() {
        let keys = to_take.iter().map(String::as_str);
        note_kind(inner, keys, options, kind, at)?;
        take_keys(client, &to_take, grant, wait, chain).await?;
    } else {
        telemetry::reentered(options.label_name().unwrap_or(UNLABELLED));
    }
    chain.first_innermost(first)
}

/// Takes `keys` (none held around the call) for new acquisitions of
/// `grant`, all or nothing, and puts their holds in `chain`: the last key
/// outermost.
async fn take_keys(
    client: &LockClient,
    keys: &[String],
    grant: Grant,
    wait: std::time::Duration,
    chain: &mut Chain<'_>,
) -> Result<(), LockError> {
    let inner = &client.inner;
    let lane = inner.backend.lane();
    let ids: Vec<u64> = keys.iter().map(|_| client.new_lock_id()).collect();
    let set = Set {
        client,
        lane: &lane,
        keys,
        ids: &ids,
        claim: Claim {
            kind: grant.kind,
            lease: grant.lease,
            waiter_lease: grant.waiter_lease,
            others_wait: false,
            // Several keys take no hold_at_least (refused before).
            timed: false,
        },
        label: grant.label,
    };
    let granted = set.take(wait).await?;
    let prefix = inner.prefix.len();
    for i in (0..keys.len()).rev() {
        let parent = (inner.tag.clone(), chain.top());
        let key = (keys[i].clone(), prefix);
        let given = (granted.tokens[i], None);
        let held = HeldLock::new(ids[i], parent, key, grant, given, granted.sent);
        chain.take(held);
    }
    if inner.tag.life.is_closed() {
        return Err(LockError::ShutDown {
            key: keys[0].clone(),
        });
    }
    Ok(())
}

/// Re-enters the hold `turn_of` around the call on `key`, on top of the
/// chain `top`: at once, or after the calls made side by side with this
/// one that have its turn, within `wait`.
async fn reenter(
    client: &LockClient,
    key: &str,
    turn_of: Frame,
    top: Frame,
    wait: std::time::Duration,
) -> Result<Frame, LockError> {
    match turn_of.turn().try_take() {
        Take::Taken => Ok(Frame::reentered(turn_of, top)),
        Take::Ended => Err(LockError::Lost {
            key: key.to_owned(),
            reason: Loss::DETACHED.reason,
            found_by: Loss::DETACHED.found_by,
        }),
        Take::Busy => wait_turn(client, key.to_owned(), turn_of, top, wait).await,
    }
}
