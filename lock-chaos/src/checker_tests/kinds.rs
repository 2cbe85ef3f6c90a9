//! The lock kinds: rules 1 and 2 across kinds, 8 (permits), 9 (fair
//! order), 10 (kinds apart), and the waiter places of rule 4.

use super::*;

use crate::history::LockKind::{Fair, Permits, Plain, Read, Write};

/// A body of `kind` and its call, entered 1 ms after the call starts.
#[allow(clippy::too_many_arguments)]
fn kind_section(
    h: &mut History,
    proc: u32,
    id: u64,
    key: &str,
    (enter, exit): (u64, u64),
    token: u64,
    outcome: Outcome,
    kind: LockKind,
) {
    section(h, proc, id, key, enter, exit, token, outcome);
    h.calls.last_mut().expect("call").kind = kind;
}

/// A fair call that started at `start` and entered at `enter`, with a
/// waiter lease of 2 s.
#[allow(clippy::too_many_arguments)]
fn fair(
    h: &mut History,
    proc: u32,
    id: u64,
    key: &str,
    start: u64,
    (enter, exit): (u64, u64),
    token: u64,
    outcome: Outcome,
) {
    kind_section(h, proc, id, key, (enter, exit), token, outcome, Fair);
    let c = h.calls.last_mut().expect("call");
    c.start = start * MS;
    c.waiter_lease = 2000 * MS;
}

/// Passes: readers overlapping each other, writers and plain calls alone,
/// permit holders up to their count (a re-entry not a second holder),
/// readers granted in one order and entered in the other, fair calls
/// entering in the order they began to wait.
fn kinds_good() -> History {
    let mut h = good();
    // rw: three readers at once, then a writer, a plain call, a reader
    // with a re-entry, and two readers whose tokens are out of entry order:
    // the second's call started before the first entered.
    kind_section(&mut h, 0, 30, "rw", (10, 50), 10, Outcome::Ok, Read);
    kind_section(&mut h, 1, 30, "rw", (20, 60), 11, Outcome::Ok, Read);
    kind_section(&mut h, 2, 30, "rw", (30, 40), 12, Outcome::BodyErr, Read);
    kind_section(&mut h, 0, 31, "rw", (70, 80), 13, Outcome::Ok, Write);
    kind_section(&mut h, 1, 31, "rw", (90, 100), 14, Outcome::Ok, Plain);
    kind_section(&mut h, 2, 31, "rw", (110, 150), 15, Outcome::Ok, Read);
    h.bodies.push(body(2, 32, 31, "rw", 120, 130, 15));
    h.calls.push(call(2, 32, 31, "rw", 119, 131, Outcome::Ok));
    h.calls.last_mut().expect("call").kind = Read;
    kind_section(&mut h, 0, 33, "rw", (160, 200), 17, Outcome::Ok, Read);
    kind_section(&mut h, 1, 33, "rw", (170, 210), 16, Outcome::Ok, Read);
    h.calls.last_mut().expect("call").start = 155 * MS;
    // p2: two holders at once, one with a re-entry; then a third after one
    // left.
    kind_section(&mut h, 0, 40, "p2", (10, 50), 20, Outcome::Ok, Permits(2));
    kind_section(&mut h, 1, 40, "p2", (20, 60), 21, Outcome::Ok, Permits(2));
    h.bodies.push(body(1, 41, 40, "p2", 30, 40, 21));
    h.calls.push(call(1, 41, 40, "p2", 29, 41, Outcome::Ok));
    h.calls.last_mut().expect("call").kind = Permits(2);
    kind_section(&mut h, 2, 40, "p2", (55, 70), 22, Outcome::Ok, Permits(2));
    // f: a holder from 0 to 1000 ms; waiters that began at 100, 400 and
    // 700 ms enter in that order; one that began at 450 ms entered before
    // the one of 400 ms (within the margin).
    fair(&mut h, 0, 50, "f", 0, (1, 1000), 30, Outcome::Ok);
    fair(&mut h, 1, 50, "f", 100, (1001, 1100), 31, Outcome::Ok);
    fair(&mut h, 2, 50, "f", 450, (1101, 1200), 32, Outcome::Ok);
    fair(&mut h, 0, 51, "f", 400, (1201, 1300), 33, Outcome::Ok);
    fair(&mut h, 1, 51, "f", 700, (1301, 1400), 34, Outcome::Ok);
    h
}

#[test]
fn correct_kinds_history_passes() {
    let v = check(&kinds_good(), &Limits::default());
    assert!(v.is_empty(), "{v:#?}");
    let h = kinds_good();
    let ix = crate::index::Index::new(&h);
    let most = crate::kinds::most_inside(&ix);
    assert_eq!(most["rw"], (3, Read));
    assert_eq!(most["p2"], (2, Permits(2)));
    let pairs = crate::kinds::fair_pairs(&ix, &Limits::default());
    // 100-400, 100-450, 100-700, 400-700 and 450-700; not 400-450, within
    // the margin (where the later one entered first).
    assert_eq!((pairs.checked, pairs.excused), (5, 0), "{pairs:?}");
}

#[test]
fn writer_inside_with_a_reader_fails_rule_1() {
    let mut h = kinds_good();
    kind_section(&mut h, 0, 60, "rw", (300, 400), 40, Outcome::Ok, Read);
    kind_section(&mut h, 1, 60, "rw", (350, 450), 41, Outcome::Ok, Write);
    let v = check(&h, &Limits::default());
    assert_eq!(rules(&v), vec![1], "{v:#?}");
    assert!(
        v[0].message.contains("(read then write)"),
        "{}",
        v[0].message
    );
    // A plain call inside with a reader, a writer with a writer, two fair
    // holders: each fails it too.
    for (first, second) in [(Read, Plain), (Write, Write), (Fair, Fair), (Plain, Read)] {
        let mut h = kinds_good();
        kind_section(&mut h, 0, 60, "x", (300, 400), 40, Outcome::Ok, first);
        kind_section(&mut h, 1, 60, "x", (350, 450), 41, Outcome::Ok, second);
        assert_eq!(
            rules(&check(&h, &Limits::default())),
            vec![1],
            "{first} {second}"
        );
    }
}

#[test]
fn readers_together_and_a_lost_reader_under_a_writer_pass_rule_1() {
    let mut h = kinds_good();
    kind_section(&mut h, 0, 60, "rw", (300, 400), 40, Outcome::Ok, Read);
    kind_section(&mut h, 1, 60, "rw", (310, 450), 41, Outcome::Ok, Read);
    // Told Lost: its lease ran out while it was paused.
    kind_section(
        &mut h,
        2,
        60,
        "rw",
        (500, 700),
        42,
        Outcome::LostExpired,
        Read,
    );
    kind_section(&mut h, 0, 61, "rw", (600, 650), 43, Outcome::Ok, Write);
    let v = check(&h, &Limits::default());
    assert!(v.is_empty(), "{v:#?}");
}

#[test]
fn more_permit_holders_than_the_count_fail_rule_8() {
    let mut h = kinds_good();
    kind_section(&mut h, 0, 60, "p2", (300, 400), 40, Outcome::Ok, Permits(2));
    kind_section(&mut h, 1, 60, "p2", (310, 400), 41, Outcome::Ok, Permits(2));
    kind_section(&mut h, 2, 60, "p2", (320, 330), 42, Outcome::Ok, Permits(2));
    let v = check(&h, &Limits::default());
    assert_eq!(rules(&v), vec![8], "{v:#?}");
    assert_eq!(v[0].at, 320 * MS);
    assert!(
        v[0].message.starts_with("permits: 3 holders"),
        "{}",
        v[0].message
    );
    // One of them told Lost: two inside.
    h.calls.last_mut().expect("call").outcome = Outcome::LostTaken;
    let v = check(&h, &Limits::default());
    assert!(v.is_empty(), "{v:#?}");
    // Three on a key of 3 pass.
    let mut h = kinds_good();
    for (proc, enter) in [(0, 300), (1, 310), (2, 320)] {
        kind_section(
            &mut h,
            proc,
            60,
            "p3",
            (enter, 400),
            40 + u64::from(proc),
            Outcome::Ok,
            Permits(3),
        );
    }
    let v = check(&h, &Limits::default());
    assert!(v.is_empty(), "{v:#?}");
}

/// [`kinds_good`] with, on `g`, a holder from 0 to 1000 ms and two fair
/// waiters: p1 began at 100 ms, p2 at 500 ms; p2 entered first.
fn fair_disorder() -> History {
    let mut h = kinds_good();
    fair(&mut h, 0, 70, "g", 0, (1, 1000), 50, Outcome::Ok);
    fair(&mut h, 2, 70, "g", 500, (1001, 1100), 51, Outcome::Ok);
    fair(&mut h, 1, 70, "g", 100, (1101, 1200), 52, Outcome::Ok);
    h
}

#[test]
fn later_fair_waiter_entering_first_fails_rule_9() {
    let h = fair_disorder();
    let v = check(&h, &Limits::default());
    assert_eq!(rules(&v), vec![9], "{v:#?}");
    assert_eq!(v[0].at, 1001 * MS);
    assert!(
        v[0].message
            .contains("p1t0 call 70 began waiting 400.0 ms before p2t0 call 70"),
        "{}",
        v[0].message
    );
    // A proxy fault on another worker's link does not excuse it.
    let mut h = fair_disorder();
    h.faults.push(Fault {
        kind: "blackhole".into(),
        target: "node0/w2".into(),
        start: 300 * MS,
        end: 900 * MS,
    });
    assert_eq!(rules(&check(&h, &Limits::default())), vec![9]);
}

#[test]
fn fair_disorder_excused_or_unknown_passes_rule_9() {
    // A fault on p1's link while it waited: its place may have lapsed.
    let mut h = fair_disorder();
    h.faults.push(Fault {
        kind: "delay300ms".into(),
        target: "node0/w1".into(),
        start: 300 * MS,
        end: 900 * MS,
    });
    let v = check(&h, &Limits::default());
    assert!(v.is_empty(), "{v:#?}");
    let ix = crate::index::Index::new(&h);
    assert_eq!(crate::kinds::fair_pairs(&ix, &Limits::default()).excused, 1);
    // A server fault that ended before p1 began, a waiter lease and a
    // connect timeout earlier: no excuse. Within them: excused.
    for (end, excused) in [(97_000, false), (98_000, true)] {
        let mut h = fair_disorder();
        for c in h.calls.iter_mut().filter(|c| c.key == "g") {
            c.start += 100_000 * MS;
            c.end += 100_000 * MS;
        }
        for b in h.bodies.iter_mut().filter(|b| b.key == "g") {
            b.enter += 100_000 * MS;
            b.exit += 100_000 * MS;
        }
        h.faults.push(Fault {
            kind: "restart".into(),
            target: "node0".into(),
            start: (end - 10) * MS,
            end: end * MS,
        });
        let found = rules(&check(&h, &Limits::default()));
        assert_eq!(
            found.is_empty(),
            excused,
            "fault ending at {end}: {found:?}"
        );
    }
    // Within the margin: p2 began 150 ms after p1.
    let mut h = fair_disorder();
    let late = h
        .calls
        .iter_mut()
        .find(|c| c.key == "g" && c.proc == 2)
        .expect("p2");
    late.start = 250 * MS;
    assert!(check(&h, &Limits::default()).is_empty());
    // p1 did not have to wait, as far as the history knows: nobody was
    // inside when it began (the holder entered at 150 ms).
    let mut h = fair_disorder();
    let holder = h
        .bodies
        .iter_mut()
        .find(|b| b.key == "g" && b.proc == 0)
        .expect("holder");
    holder.enter = 150 * MS;
    assert!(check(&h, &Limits::default()).is_empty());
    // p1 was told Lost: its grant may have been erased, and its entry says
    // nothing of its place.
    let mut h = fair_disorder();
    let first = h
        .calls
        .iter_mut()
        .find(|c| c.key == "g" && c.proc == 1)
        .expect("p1");
    first.outcome = Outcome::LostExpired;
    assert!(check(&h, &Limits::default()).is_empty());
    // p1 gave up (no body): nothing to order.
    let mut h = fair_disorder();
    h.bodies.retain(|b| !(b.key == "g" && b.proc == 1));
    h.calls
        .iter_mut()
        .filter(|c| c.key == "g" && c.proc == 1)
        .for_each(|c| c.outcome = Outcome::Timeout);
    let v = check(&h, &Limits::default());
    assert!(v.iter().all(|v| v.rule != 9), "{v:#?}");
}

#[test]
fn tokens_out_of_order_across_kinds_fail_rule_2() {
    // A writer after readers, with a token below a reader's.
    let mut h = kinds_good();
    kind_section(&mut h, 0, 60, "rw", (300, 400), 40, Outcome::Ok, Read);
    kind_section(&mut h, 1, 60, "rw", (310, 400), 41, Outcome::Ok, Read);
    kind_section(&mut h, 2, 60, "rw", (410, 420), 40, Outcome::Ok, Write);
    let v = check(&h, &Limits::default());
    assert_eq!(rules(&v), vec![2], "{v:#?}");
    assert!(
        v[0].message.contains("(read then write)"),
        "{}",
        v[0].message
    );
    // A reader whose call started after another reader entered, with a
    // smaller token.
    let mut h = kinds_good();
    kind_section(&mut h, 0, 60, "rw", (300, 400), 41, Outcome::Ok, Read);
    kind_section(&mut h, 1, 60, "rw", (320, 400), 40, Outcome::Ok, Read);
    h.calls.last_mut().expect("call").start = 305 * MS;
    assert_eq!(rules(&check(&h, &Limits::default())), vec![2]);
    // Permit holders likewise; but told Lost, the late one passes.
    let mut h = kinds_good();
    kind_section(&mut h, 0, 60, "p3", (300, 400), 41, Outcome::Ok, Permits(3));
    kind_section(&mut h, 1, 60, "p3", (320, 400), 40, Outcome::Ok, Permits(3));
    assert_eq!(rules(&check(&h, &Limits::default())), vec![2]);
    h.calls.last_mut().expect("call").outcome = Outcome::LostTaken;
    assert!(check(&h, &Limits::default()).is_empty());
    // A fair holder after another with a smaller token.
    let mut h = kinds_good();
    fair(&mut h, 0, 60, "g", 300, (301, 400), 41, Outcome::Ok);
    fair(&mut h, 1, 60, "g", 350, (401, 500), 40, Outcome::Ok);
    assert_eq!(rules(&check(&h, &Limits::default())), vec![2]);
}

#[test]
fn kind_mismatch_fails_rule_10() {
    let mut h = kinds_good();
    h.calls
        .push(call(0, 60, 60, "p2", 300, 301, Outcome::KindMismatch));
    h.calls.last_mut().expect("call").kind = Permits(2);
    let v = check(&h, &Limits::default());
    assert_eq!(rules(&v), vec![10], "{v:#?}");
    assert!(
        v[0].message.contains("asked for permits:2"),
        "{}",
        v[0].message
    );
}

#[test]
fn a_place_left_in_a_line_by_a_fault_explains_a_timeout() {
    // A fair waiter that failed in a fault at 100 s may leave its place
    // for its waiter lease (2 s): another waiter times out on the free key
    // from 102.5 s to 103.5 s, past the fault's own allowance (2 s).
    let mut h = kinds_good();
    h.faults.push(Fault {
        kind: "kill-normal".into(),
        target: "node0".into(),
        start: 100_000 * MS,
        end: 100_500 * MS,
    });
    h.calls
        .push(call(0, 60, 60, "g", 99_000, 100_600, Outcome::Backend));
    let c = h.calls.last_mut().expect("call");
    (c.kind, c.waiter_lease, c.lease) = (Fair, 3000 * MS, 10 * MS);
    h.calls
        .push(call(1, 60, 60, "g", 102_500, 103_500, Outcome::Timeout));
    h.calls.last_mut().expect("call").kind = Fair;
    let v = check(&h, &Limits::default());
    assert!(v.is_empty(), "{v:#?}");
    // Without the fault, it explains nothing (its withdrawal arrived).
    h.faults.pop();
    let v = check(&h, &Limits::default());
    assert_eq!(rules(&v), vec![4], "{v:#?}");
    // Nor does a reader's: readers keep no place.
    let mut h = kinds_good();
    h.faults.push(Fault {
        kind: "kill-normal".into(),
        target: "node0".into(),
        start: 100_000 * MS,
        end: 100_500 * MS,
    });
    h.calls
        .push(call(0, 60, 60, "rw", 99_000, 100_600, Outcome::Backend));
    let c = h.calls.last_mut().expect("call");
    (c.kind, c.waiter_lease, c.lease) = (Read, 3000 * MS, 10 * MS);
    h.calls
        .push(call(1, 60, 60, "rw", 102_500, 103_500, Outcome::Timeout));
    assert_eq!(rules(&check(&h, &Limits::default())), vec![4]);
}

#[test]
fn a_place_brought_back_by_a_restore_explains_a_timeout() {
    // A writer waited on `rw` behind a reader from 100 s and entered at
    // 100.7 s; a restore took its snapshot at 100.5 s (the writer's claim
    // in it) and brought it back at 100.8 s, alive until 5 s after the
    // snapshot. Readers time out from 103 s to 104 s with nobody inside,
    // past the fault's own allowance (102.8 s).
    let with = |writer_kind: LockKind| {
        let mut h = kinds_good();
        h.faults.push(Fault {
            kind: "restore".into(),
            target: "node0".into(),
            start: 100_500 * MS,
            end: 100_800 * MS,
        });
        kind_section(
            &mut h,
            0,
            60,
            "rw",
            (99_900, 100_600),
            40,
            Outcome::Ok,
            Read,
        );
        kind_section(
            &mut h,
            1,
            60,
            "rw",
            (100_700, 100_750),
            41,
            Outcome::Ok,
            writer_kind,
        );
        let c = h.calls.last_mut().expect("call");
        (c.start, c.waiter_lease) = (100_000 * MS, 5000 * MS);
        h.calls
            .push(call(2, 60, 60, "rw", 103_000, 104_000, Outcome::Timeout));
        h.calls.last_mut().expect("call").kind = Read;
        h
    };
    let v = check(&with(Write), &Limits::default());
    assert!(v.is_empty(), "{v:#?}");
    // A reader in the writer's place keeps none: nothing explains it.
    let v = check(&with(Read), &Limits::default());
    assert_eq!(rules(&v), vec![4], "{v:#?}");
}
