//! Taking several keys at once: one request for the whole set (see
//! `kind/several.rs`), and on a refusal, waiting in this client's line for
//! the key that refused (its release notice, or its holder's expiry)
//! before the next request. The call holds none of the keys while it
//! waits: a refusal leaves nothing taken.

use std::time::Duration;

use tokio::time::Instant;

use super::super::acquire::{failed, next_try, not_replicated_error, timed_out};
use super::super::give_back;
use crate::backend::FailedOn;
use crate::client::LockClient;
use crate::error::LockError;
use crate::kind::several::Several;
use crate::kind::Claim;
use crate::owner_id::OwnerId;
use crate::route::Lane;
use crate::telemetry;
use crate::wakeup::Ticket;

/// The keys one call takes, with an acquisition (owner id) each.
pub(super) struct Set<'a> {
    pub client: &'a LockClient,
    pub lane: &'a Lane,
    /// Full keys, no key twice.
    pub keys: &'a [String],
    pub ids: &'a [u64],
    pub claim: Claim,
    pub label: &'static str,
}

/// What a granted request gave: each key's fencing token, and when the
/// request was sent (each hold's validity counts from then).
pub(super) struct Granted {
    pub tokens: Vec<u64>,
    pub sent: Instant,
}

/// What one request came to.
enum Asked {
    Granted(Granted),
    /// The key at `index` refused; its holder's lease has about `ttl` left.
    Refused {
        index: usize,
        ttl: Option<Duration>,
    },
}

impl Set<'_> {
    /// The owner ids, as the scripts take them.
    fn owners(&self) -> Vec<OwnerId> {
        let id = &self.client.inner.tag.id;
        self.ids.iter().map(|n| OwnerId::new(id, *n)).collect()
    }

    /// Takes every key, waiting up to `wait` in all.
    pub(super) async fn take(&self, wait: Duration) -> Result<Granted, LockError> {
        let start = Instant::now();
        let mut attempts = 0;
        let taken = self
            .take_counting(start, start + wait, wait.is_zero(), &mut attempts)
            .await;
        match &taken {
            Ok(granted) => {
                let token = granted.tokens.first().copied().unwrap_or_default();
                telemetry::acquired(self.label, token, start, attempts);
            }
            Err(LockError::Timeout { .. }) => telemetry::timed_out(self.label, start, attempts),
            Err(error) => telemetry::acquire_failed(self.label, error, attempts),
        }
        taken
    }

    /// [`take`](Self::take)'s steps; counts the requests sent.
    async fn take_counting(
        &self,
        start: Instant,
        deadline: Instant,
        once: bool,
        attempts: &mut u32,
    ) -> Result<Granted, LockError> {
        let inner = &self.client.inner;
        let owners = self.owners();
        let owner_refs: Vec<&str> = owners.iter().map(|o| &**o).collect();
        let key_refs: Vec<&str> = self.keys.iter().map(String::as_str).collect();
        // The line of the key that refused last, and that key's index.
        let mut line: Option<(usize, Ticket)> = None;
        let mut retry_at = start;
        loop {
            // One pass: listen on the line (before asking, so a release in
            // between counts), ask when it is time, then wait for news or
            // the timer. Ends with the key whose line to join, if another.
            let join = 'pass: {
                let notified = line.as_ref().map(|(_, ticket)| ticket.notified());
                tokio::pin!(notified);
                if let Some(notified) = notified.as_mut().as_pin_mut() {
                    notified.enable();
                }
                if inner.tag.life.is_closed() {
                    return Err(LockError::ShutDown {
                        key: self.keys[0].clone(),
                    });
                }
                let sent = Instant::now();
                if sent >= retry_at {
                    *attempts += 1;
                    if let Some((_, ticket)) = &line {
                        ticket.asking();
                    }
                    let asked = self
                        .ask((&key_refs, &owner_refs), (start, sent), deadline)
                        .await?;
                    let (index, ttl) = match asked {
                        Asked::Granted(granted) => return Ok(granted),
                        Asked::Refused { index, ttl } => (index, ttl),
                    };
                    telemetry::waiting(ttl, *attempts);
                    let now = Instant::now();
                    if once || now >= deadline {
                        return Err(self.timed_out(index, now - start));
                    }
                    retry_at = next_try(now, ttl, deadline);
                    if line.as_ref().is_none_or(|(at, _)| *at != index) {
                        break 'pass Some(index);
                    }
                }
                let now = Instant::now();
                if now >= deadline {
                    let index = line.as_ref().map_or(0, |(index, _)| *index);
                    return Err(self.timed_out(index, now - start));
                }
                // On the client's runtime's timer: the caller's runtime may
                // have none.
                let sleep = inner.io.sleep_until(retry_at.min(deadline));
                let news = async {
                    match notified.as_pin_mut() {
                        Some(notified) => notified.await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    // A release that named another client's waiter holds
                    // this one back (see `Ticket::held_back`).
                    () = news => {
                        let held_back = line.as_ref().and_then(|(_, ticket)| ticket.held_back());
                        retry_at = held_back.unwrap_or_else(Instant::now);
                    }
                    () = sleep => {}
                }
                None
            };
            if let Some(index) = join {
                // Listen on the key that refused, then ask again at once: a
                // release before the line was joined counts.
                let ticket = inner
                    .waiters
                    .join(&self.keys[index], self.ids[index], false);
                line = Some((index, ticket));
                retry_at = Instant::now();
            }
        }
    }

    /// One request for the whole set, sent at `sent` by a call that began
    /// at `start` and whose wait ends at `until` (on Cluster the request follows a slot's
    /// master that is changing until then).
    async fn ask(
        &self,
        keys_owners: (&[&str], &[&str]),
        (start, sent): (Instant, Instant),
        until: Instant,
    ) -> Result<Asked, LockError> {
        let mut in_flight = give_back::OnDrop::new(true, || {
            self.give_back_later();
        });
        let answer = self
            .client
            .inner
            .backend
            .acquire_all(self.lane, keys_owners, (self.claim, until))
            .await;
        // Any error may leave keys held: on Cluster the groups taken before
        // a refusing or failing one are given back in the request, and a
        // give-back that fails (CLUSTERDOWN, TRYAGAIN, LOADING, NOPERM as
        // much as an unknown outcome) leaves them held. A give-back in the
        // background frees only this call's own holds, so it is safe when
        // nothing was taken.
        in_flight.armed = answer.is_err();
        match answer {
            Ok(Several::Taken(tokens)) => Ok(Asked::Granted(Granted { tokens, sent })),
            Ok(Several::NotReplicated { acked, .. }) => {
                Err(self.not_replicated(acked, start).await)
            }
            Ok(Several::Refused { index, ttl }) => Ok(Asked::Refused { index, ttl }),
            Err(source) => Err(self.failed(source)),
        }
    }

    /// The error of a call that waited in vain, naming the key that refused
    /// last.
    fn timed_out(&self, index: usize, waited: Duration) -> LockError {
        timed_out(self.client, self.keys[index].clone(), waited)
    }

    /// The caller's error for a failed request, on the key whose request
    /// failed where the deployment tells (on Cluster, a key of the slot
    /// that failed), else the key the server's error names (else the
    /// first).
    fn failed(&self, failure: FailedOn) -> LockError {
        let FailedOn { error: source, key } = failure;
        let text = source.to_string();
        let key = match key.and_then(|i| self.keys.get(i)) {
            Some(key) => key,
            None => self
                .keys
                .iter()
                .find(|key| text.contains(key.as_str()))
                .unwrap_or(&self.keys[0]),
        };
        failed(self.client, source, key, self.claim.kind)
    }

    /// Gives back a set taken without enough replicas acknowledging it,
    /// waiting for it, and gives the caller's error.
    async fn not_replicated(&self, acked: usize, start: Instant) -> LockError {
        let _ = self.give_back_later().await;
        not_replicated_error(self.client, self.keys[0].clone(), acked, start)
    }

    /// Gives back every key of the set in the background (see
    /// [`give_back::later`]).
    fn give_back_later(&self) -> tokio::task::JoinHandle<()> {
        let holds = self.keys.iter().cloned().zip(self.owners()).collect();
        give_back::later(self.client, self.lane, holds, self.claim)
    }
}
