//! The client's kind check: a record, per client, of the kind each key was
//! last taken with, so that two calls that take one key as kinds that
//! cannot share it (see [`Kind::shares_key_with`]) fail the second one at
//! once with [`LockError::KindMismatch`], even when they never overlap.
//! Without it such calls meet only when they overlap (under load, in two
//! processes), so they pass every test that runs them one after another.
//!
//! The record is bounded: it keeps two generations of at most
//! [`GENERATION`] keys each, and drops the older one when the newer one is
//! full, so it always remembers at least the last [`GENERATION`] distinct
//! keys, and never more than twice that.

use std::collections::HashMap;
use std::mem;
use std::panic::Location;
use std::sync::{Mutex, PoisonError};

use crate::error::{KindCheckCalls, KindFoundBy, LockError};
use crate::kind::Kind;

/// How many distinct keys a generation keeps: the record remembers at
/// least this many of the last keys taken.
pub(crate) const GENERATION: usize = 1024;

/// One use of a key: its kind, and where the call was made.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Use {
    pub kind: Kind,
    pub at: &'static Location<'static>,
    pub label: Option<&'static str>,
}

/// The record of one client (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct KindCheck {
    seen: Mutex<Generations>,
}

/// The keys taken lately, each with its last use.
#[derive(Debug, Default)]
struct Generations {
    newer: HashMap<Box<str>, Use>,
    older: HashMap<Box<str>, Use>,
}

impl KindCheck {
    /// Checks a call that takes `key` (the full key) as `now`'s kind
    /// against the key's last use by this client, and records `now` as
    /// its last use unless the two kinds cannot share the key: then the
    /// call's error, naming both calls, and the record keeps the earlier
    /// use.
    ///
    /// Costs one hash lookup under a lock of the client's; a key not among
    /// the newer generation's is copied into it (one allocation, none when
    /// the older generation had it). (The calls use
    /// [`note_all`](KindCheck::note_all), a single key's call too.)
    #[cfg(test)]
    pub(crate) fn note(&self, key: &str, now: Use) -> Result<(), LockError> {
        self.note_all(std::iter::once(key), now)
    }

    /// As [`note`](KindCheck::note) for a call that takes every key of
    /// `keys` as `now`'s kind: every key is checked before any is recorded,
    /// so a call refused on one key leaves no record on the others (it took
    /// none of them).
    pub(crate) fn note_all<'k>(
        &self,
        keys: impl Iterator<Item = &'k str> + Clone,
        now: Use,
    ) -> Result<(), LockError> {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        for key in keys.clone() {
            let last = seen.newer.get(key).or_else(|| seen.older.get(key));
            if let Some(last) = last.filter(|last| !last.kind.shares_key_with(now.kind)) {
                return Err(mismatch(key, *last, now));
            }
        }
        keys.for_each(|key| seen.record(key, now));
        Ok(())
    }

    /// How many keys the record holds now.
    #[cfg(test)]
    fn len(&self) -> usize {
        let seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.newer.len() + seen.older.len()
    }
}

impl Generations {
    /// Records `now` as `key`'s last use (see [`KindCheck::note`]).
    fn record(&mut self, key: &str, now: Use) {
        if let Some(last) = self.newer.get_mut(key) {
            *last = now;
            return;
        }
        let moved = match self.older.remove_entry(key) {
            Some((owned, _)) => owned,
            None => key.into(),
        };
        if self.newer.len() >= GENERATION {
            // The older generation goes; its table's room is reused.
            mem::swap(&mut self.newer, &mut self.older);
            self.newer.clear();
        }
        self.newer.insert(moved, now);
    }
}

/// The error of a call (`now`) on `key` after an earlier call (`last`) of
/// another kind.
fn mismatch(key: &str, last: Use, now: Use) -> LockError {
    LockError::KindMismatch {
        key: key.to_owned(),
        asked: now.kind.name(),
        found: last.kind.name(),
        found_by: KindFoundBy::KindCheck(Box::new(KindCheckCalls {
            earlier: last.at,
            earlier_label: last.label,
            this_call: now.at,
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn use_of(kind: Kind) -> Use {
        Use {
            kind,
            at: Location::caller(),
            label: None,
        }
    }

    #[test]
    fn kinds_that_share_a_key_pass_and_others_fail_naming_the_earlier_call() {
        let check = KindCheck::default();
        let first = use_of(Kind::Read);
        check.note("k", first).expect("a first use");
        check
            .note("k", use_of(Kind::Exclusive))
            .expect("read, then write");
        check
            .note("k", use_of(Kind::Read))
            .expect("write, then read");
        let counted = use_of(Kind::Permits(2));
        let error = check.note("k", counted).expect_err("permits after read");
        let LockError::KindMismatch {
            found_by: KindFoundBy::KindCheck(calls),
            ..
        } = &error
        else {
            panic!("not the kind check's mismatch: {error}");
        };
        let (earlier, this_call) = (calls.earlier, calls.this_call);
        // The last use that shares the key, not the first.
        assert_ne!(earlier, first.at);
        assert_eq!(this_call, counted.at);
        // The failed call was not recorded: the key is still a read-write
        // lock.
        check
            .note("k", use_of(Kind::Exclusive))
            .expect("still read-write");
        check
            .note("j", use_of(Kind::Permits(2)))
            .expect("another key");
        check
            .note("j", use_of(Kind::Permits(2)))
            .expect("the same count");
        assert!(check.note("j", use_of(Kind::Permits(3))).is_err());
        check.note("f", use_of(Kind::Fair)).expect("fair");
        assert!(check.note("f", use_of(Kind::Exclusive)).is_err());
        assert!(check.note("k", use_of(Kind::Fair)).is_err());
    }

    #[test]
    fn the_record_keeps_the_last_generation_of_keys_and_no_more_than_two() {
        let check = KindCheck::default();
        check.note("first", use_of(Kind::Fair)).expect("first");
        // `first` stays within the last GENERATION distinct keys.
        for n in 0..GENERATION - 1 {
            check
                .note(&format!("k{n}"), use_of(Kind::Exclusive))
                .expect("a new key");
        }
        assert!(check.note("first", use_of(Kind::Exclusive)).is_err());
        for n in 0..10 * GENERATION {
            check
                .note(&format!("m{n}"), use_of(Kind::Exclusive))
                .expect("a new key");
            assert!(check.len() <= 2 * GENERATION, "{}", check.len());
        }
        // Forgotten by now: a free key takes any kind.
        check
            .note("first", use_of(Kind::Exclusive))
            .expect("forgotten");
    }

    #[test]
    fn a_key_from_the_older_generation_is_checked_and_moved_to_the_newer() {
        let check = KindCheck::default();
        check.note("old", use_of(Kind::Permits(4))).expect("first");
        for n in 0..GENERATION {
            check
                .note(&format!("k{n}"), use_of(Kind::Exclusive))
                .expect("a new key");
        }
        // `old` is in the older generation now.
        assert!(check.note("old", use_of(Kind::Read)).is_err());
        check
            .note("old", use_of(Kind::Permits(4)))
            .expect("same kind");
        // Moved to the newer one: another full generation keeps it.
        for n in 0..GENERATION - 1 {
            check
                .note(&format!("n{n}"), use_of(Kind::Exclusive))
                .expect("a new key");
        }
        assert!(check.note("old", use_of(Kind::Fair)).is_err());
    }
}
