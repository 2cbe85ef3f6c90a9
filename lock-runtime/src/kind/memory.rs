//! The embedded backend: the same lock semantics inside this process.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::{Acquire, Claim, Release, RenewItem, Renewal};
use crate::clock::Clock;

struct Entry {
    owner: Box<str>,
    expires: Instant,
    token: u64,
}

/// Locks in a map; an entry past its expiry counts as absent. Fencing tokens
/// come from one counter for all keys, so they increase per key too. Time
/// is the client's runtime's (see [`Clock`]).
#[derive(Clone)]
pub(crate) struct MemoryBackend {
    locks: Arc<Mutex<HashMap<Box<str>, Entry>>>,
    tokens: Arc<AtomicU64>,
    clock: Clock,
}

impl MemoryBackend {
    pub(crate) fn new(clock: Clock) -> Self {
        MemoryBackend {
            locks: Arc::default(),
            tokens: Arc::default(),
            clock,
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut HashMap<Box<str>, Entry>) -> R) -> R {
        f(&mut self.locks.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Takes `key` for the acquisition `owner`; the same acquisition asking
    /// again gets its token back.
    pub(crate) fn acquire(&self, key: &str, owner: &str, claim: Claim) -> Acquire {
        let lease = claim.lease;
        let now = self.clock.now();
        self.with(|locks| match locks.get(key) {
            Some(e) if e.expires > now && &*e.owner != owner => {
                Acquire::Held(Some(e.expires - now))
            }
            Some(e) if e.expires > now => Acquire::Acquired(e.token),
            _ => {
                let token = self.tokens.fetch_add(1, Ordering::Relaxed) + 1;
                let entry = Entry {
                    owner: owner.into(),
                    expires: now + lease,
                    token,
                };
                locks.insert(key.into(), entry);
                Acquire::Acquired(token)
            }
        })
    }

    pub(crate) fn release(&self, key: &str, owner: &str) -> Release {
        let now = self.clock.now();
        self.with(|locks| match locks.get(key) {
            Some(e) if e.expires > now && &*e.owner == owner => {
                locks.remove(key);
                Release::Freed
            }
            Some(e) if e.expires <= now => {
                locks.remove(key);
                Release::NotHeld
            }
            _ => Release::NotHeld,
        })
    }

    pub(crate) fn renew(&self, items: &[RenewItem<'_>]) -> Vec<Renewal> {
        let now = self.clock.now();
        self.with(|locks| {
            items
                .iter()
                .map(|item| match locks.get_mut(item.key) {
                    Some(e) if e.expires > now && &*e.owner == item.owner => {
                        e.expires = now + item.lease;
                        Renewal::Renewed
                    }
                    _ => Renewal::Gone,
                })
                .collect()
        })
    }

    /// The holder of `key` now: its owner id, remaining lease and token.
    pub(crate) fn peek(&self, key: &str) -> Option<(String, Duration, u64)> {
        let now = self.clock.now();
        self.with(|locks| match locks.get(key) {
            Some(e) if e.expires > now => Some((e.owner.to_string(), e.expires - now, e.token)),
            _ => None,
        })
    }

    /// Frees `key` whoever holds it; the freed hold's token, if it was held.
    pub(crate) fn force_free(&self, key: &str) -> Option<u64> {
        let now = self.clock.now();
        self.with(|locks| match locks.remove(key) {
            Some(e) if e.expires > now => Some(e.token),
            _ => None,
        })
    }
}
