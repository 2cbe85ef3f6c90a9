//! The multi-key move: a task calls `run_locked_all` on 2 or 3 of the
//! run's keys, listed in a random order (sometimes one of them twice), so
//! that callers list overlapping sets in different orders. Its options,
//! body (sleeps, body error, panic, a re-entry of one of its keys) and the
//! wrapper's timeout are drawn as for a call on one key.

use crate::history::LockKind;
use crate::plan::{self, How, Inner, Op, Space, KEYS, RW_KEYS};
use crate::rng::Rng;

/// The share of top-level operations that are multi-key calls by default
/// (%): `--multi`.
pub const DEFAULT_PERCENT: u64 = 10;

/// Where the multi-key calls of a run take their keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    /// The kinds workload: the sets are the read-write keys (`rw0`,
    /// `rw1`), taken as readers (3 in 4), writers or plain calls.
    pub kinds: bool,
    /// On Cluster: half the sets are keys of one hash tag (`{t}k0`..,
    /// one slot), the others keys without a tag (several slots).
    pub cluster: bool,
}

/// `n` keys of `0..of`, in a random order.
fn some_keys(rng: &mut Rng, n: u64, of: u64) -> Vec<u64> {
    let mut all: Vec<u64> = (0..of).collect();
    for i in (1..all.len()).rev() {
        let j = rng.range(0, i as u64) as usize;
        all.swap(i, j);
    }
    all.truncate(n as usize);
    all
}

/// A random multi-key call at the top of a task: 2 or 3 keys (the two
/// read-write keys in the kinds workload), in a random order, one of them
/// listed twice one time in five. A re-entry of one of its keys (15 %),
/// through the same client, runs under that key's hold.
pub fn op(rng: &mut Rng, setting: Setting) -> Op {
    let mut top = plan::step(rng, None, None);
    // The attribute's lease and wait, when `step` drew them, are kept.
    top.how = How::RunLocked;
    let (space, of) = if setting.kinds {
        (Space::ReadWrite, RW_KEYS)
    } else if setting.cluster && rng.chance(50) {
        (Space::Tagged, KEYS)
    } else {
        (Space::Plain, KEYS)
    };
    let size = rng.range(2, 3).min(of);
    let mut set = some_keys(rng, size, of);
    if rng.chance(20) {
        let again = *rng.pick(&set);
        let at = rng.range(0, set.len() as u64) as usize;
        set.insert(at, again);
    }
    top.space = space;
    top.key = set[0];
    if setting.kinds {
        let kind = if rng.chance(75) {
            LockKind::Read
        } else if rng.chance(50) {
            LockKind::Write
        } else {
            LockKind::Plain
        };
        plan::set_kind(rng, &mut top, kind);
    }
    if rng.chance(15) {
        let key = *rng.pick(&set);
        let mut inner = plan::step(rng, Some(key), Some(top.client));
        inner.how = How::RunLocked;
        inner.space = space;
        inner.kind = match top.kind {
            LockKind::Read => LockKind::Read,
            _ if setting.kinds => *rng.pick(&[LockKind::Read, LockKind::Write, LockKind::Plain]),
            _ => LockKind::Plain,
        };
        top.inner = Inner::Reenter(Box::new(inner));
    }
    top.set = set;
    plan::finish(rng, top)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::plan::Step;

    /// The distinct keys of a multi-key step, by name.
    fn names(s: &Step) -> BTreeSet<String> {
        s.set.iter().map(|&k| s.name_of(k)).collect()
    }

    #[test]
    fn sets_of_two_or_three_keys_in_every_order() {
        let mut rng = Rng::new(11);
        let plain = Setting {
            kinds: false,
            cluster: false,
        };
        let (mut sizes, mut orders) = (BTreeSet::new(), BTreeSet::new());
        let (mut twice, mut reentries, mut spawned) = (0, 0, 0);
        for _ in 0..2000 {
            let op = op(&mut rng, plain);
            let s = &op.step;
            let distinct = names(s);
            assert!((2..=3).contains(&distinct.len()), "{s:?}");
            assert!(s.set.iter().all(|&k| k < KEYS));
            assert_eq!(
                (s.key, s.how, s.kind),
                (s.set[0], How::RunLocked, LockKind::Plain)
            );
            assert_eq!(s.space, Space::Plain);
            sizes.insert(distinct.len());
            orders.insert(s.set.clone());
            twice += usize::from(s.set.len() > distinct.len());
            if let Inner::Reenter(inner) = &s.inner {
                reentries += 1;
                assert!(s.set.contains(&inner.key), "{s:?}");
                assert_eq!((inner.client, inner.how), (s.client, How::RunLocked));
            } else {
                assert!(matches!(s.inner, Inner::Nothing), "{s:?}");
            }
            spawned += usize::from(op.spawn);
        }
        assert_eq!(sizes, BTreeSet::from([2, 3]));
        // Every ordered pair of 4 keys (12) and many triples come up.
        assert!(orders.len() > 40, "{}", orders.len());
        assert!((250..550).contains(&twice), "{twice}");
        assert!((200..420).contains(&reentries), "{reentries}");
        assert!(spawned > 150, "{spawned}");
    }

    #[test]
    fn kinds_sets_are_the_read_write_keys_and_cluster_sets_sometimes_one_tag() {
        let mut rng = Rng::new(12);
        let kinds = Setting {
            kinds: true,
            cluster: false,
        };
        let mut readers = 0;
        for _ in 0..1000 {
            let s = op(&mut rng, kinds).step;
            assert_eq!(names(&s), BTreeSet::from(["rw0".into(), "rw1".into()]));
            assert!(matches!(
                s.kind,
                LockKind::Read | LockKind::Write | LockKind::Plain
            ));
            readers += usize::from(s.kind == LockKind::Read);
            if let Inner::Reenter(inner) = &s.inner {
                assert_eq!(inner.space, Space::ReadWrite);
                if s.kind == LockKind::Read {
                    assert_eq!(inner.kind, LockKind::Read);
                }
            }
        }
        assert!((650..850).contains(&readers), "{readers}");
        let cluster = Setting {
            kinds: false,
            cluster: true,
        };
        let mut tagged = 0;
        for _ in 0..1000 {
            let s = op(&mut rng, cluster).step;
            if s.space == Space::Tagged {
                tagged += 1;
                assert!(names(&s).iter().all(|n| n.starts_with("{t}k")), "{s:?}");
            } else {
                assert!(names(&s).iter().all(|n| !n.contains('{')), "{s:?}");
            }
        }
        assert!((400..600).contains(&tagged), "{tagged}");
    }
}
