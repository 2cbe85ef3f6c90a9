//! The checker's rules on hand-made histories: one that passes (with every
//! exemption), and one failing history per rule.

use crate::checker::{check, Limits, Violation};
use crate::history::{Body, Call, Fault, History, Outcome};

const MS: u64 = 1_000_000;

fn body(proc: u32, call: u64, acq: u64, key: &str, enter: u64, exit: u64, token: u64) -> Body {
    Body {
        proc,
        task: 0,
        call,
        acq,
        key: key.into(),
        client: 0,
        enter: enter * MS,
        exit: exit * MS,
        token,
        done: true,
    }
}

fn call(proc: u32, call: u64, acq: u64, key: &str, start: u64, end: u64, outcome: Outcome) -> Call {
    Call {
        proc,
        task: 0,
        call,
        acq,
        key: key.into(),
        client: 0,
        start: start * MS,
        end: end * MS,
        wait: 1000 * MS,
        lease: 500 * MS,
        outcome,
    }
}

/// A body and its call, entered 1 ms after the call starts.
#[allow(clippy::too_many_arguments)]
fn section(
    h: &mut History,
    proc: u32,
    id: u64,
    key: &str,
    enter: u64,
    exit: u64,
    token: u64,
    outcome: Outcome,
) {
    h.bodies.push(body(proc, id, id, key, enter, exit, token));
    h.calls
        .push(call(proc, id, id, key, enter - 1, exit + 1, outcome));
}

/// Passes, and exercises every exemption.
fn good() -> History {
    let mut h = History::default();
    // Plain sections, one after the other, tokens up.
    section(&mut h, 0, 1, "a", 10, 20, 100, Outcome::Ok);
    section(&mut h, 1, 1, "a", 25, 40, 101, Outcome::Ok);
    // A re-entry inside call 2 of process 0: same token, nested, not a
    // second holder.
    section(&mut h, 0, 2, "a", 50, 90, 102, Outcome::Ok);
    h.bodies.push(body(0, 3, 2, "a", 60, 70, 102));
    h.calls.push(call(0, 3, 2, "a", 60, 71, Outcome::Ok));
    // Siblings on two different keys inside call 2.
    section(&mut h, 0, 4, "b", 61, 65, 200, Outcome::Ok);
    section(&mut h, 0, 5, "c", 61, 66, 300, Outcome::Ok);
    // A holder that lost its lock overlaps the next one, which has a
    // greater token; then a late holder with a smaller token, told Lost.
    section(&mut h, 1, 2, "a", 100, 300, 103, Outcome::LostExpired);
    section(&mut h, 2, 1, "a", 200, 250, 104, Outcome::Ok);
    section(&mut h, 2, 2, "a", 260, 280, 99, Outcome::LostTaken);
    // A call that waited its whole wait while a body held the key, then a
    // lease after a cancelled body.
    section(&mut h, 1, 3, "d", 1000, 1500, 400, Outcome::Cancelled);
    h.calls
        .push(call(2, 3, 3, "d", 1000, 2000, Outcome::Timeout));
    // A call that waited through a fault window, then took long.
    h.faults.push(Fault {
        kind: "pause1500ms".into(),
        target: "node0".into(),
        start: 3000 * MS,
        end: 4500 * MS,
    });
    h.calls
        .push(call(0, 6, 6, "e", 3000, 4000, Outcome::Timeout));
    section(&mut h, 1, 4, "e", 4000 + 2500, 6600, 500, Outcome::Ok);
    h.calls
        .push(call(1, 5, 5, "e", 4000, 4000, Outcome::Timeout));
    h.calls.last_mut().expect("call").wait = 0;
    // Cancelled by the wrapper after a long acquire: exempt from rule 3.
    h.calls
        .push(call(2, 4, 4, "f", 10_000, 20_000, Outcome::Cancelled));
    h
}

fn rules(v: &[Violation]) -> Vec<u8> {
    v.iter().map(|v| v.rule).collect()
}

#[test]
fn correct_history_passes() {
    let v = check(&good(), &Limits::default());
    assert!(v.is_empty(), "{v:#?}");
}

#[test]
fn overlap_fails_rule_1() {
    let mut h = good();
    section(&mut h, 0, 10, "x", 10, 30, 1, Outcome::Ok);
    section(&mut h, 1, 10, "x", 20, 40, 2, Outcome::Ok);
    assert_eq!(rules(&check(&h, &Limits::default())), vec![1]);
}

#[test]
fn siblings_with_one_token_fail_rules_1_and_2() {
    let mut h = good();
    // Two siblings of one task on one key, not declared re-entries.
    section(&mut h, 0, 10, "x", 10, 30, 7, Outcome::Ok);
    section(&mut h, 0, 11, "x", 11, 30, 7, Outcome::Ok);
    assert_eq!(rules(&check(&h, &Limits::default())), vec![1, 2]);
}

#[test]
fn token_going_back_fails_rule_2() {
    let mut h = good();
    section(&mut h, 0, 10, "x", 10, 20, 50, Outcome::Ok);
    section(&mut h, 1, 10, "x", 30, 40, 49, Outcome::Ok);
    assert_eq!(rules(&check(&h, &Limits::default())), vec![2]);
}

#[test]
fn reentry_with_another_token_fails_rule_2() {
    let mut h = good();
    section(&mut h, 0, 10, "x", 10, 40, 50, Outcome::Ok);
    h.bodies.push(body(0, 11, 10, "x", 20, 30, 51));
    h.calls.push(call(0, 11, 10, "x", 20, 31, Outcome::Ok));
    assert_eq!(rules(&check(&h, &Limits::default())), vec![2]);
}

#[test]
fn slow_acquire_fails_rule_3() {
    let mut h = good();
    // wait 1 s, bound 1 + 0.8 + 1 s: entered after 3 s, no fault.
    h.calls
        .push(call(0, 10, 10, "x", 100_000, 103_100, Outcome::Ok));
    h.bodies.push(body(0, 10, 10, "x", 103_000, 103_100, 9));
    assert_eq!(rules(&check(&h, &Limits::default())), vec![3]);
}

#[test]
fn timeout_with_no_holder_fails_rule_4() {
    let mut h = good();
    section(&mut h, 0, 10, "x", 100_000, 100_300, 9, Outcome::Ok);
    h.calls
        .push(call(1, 10, 10, "x", 100_100, 101_100, Outcome::Timeout));
    assert_eq!(rules(&check(&h, &Limits::default())), vec![4]);
}

#[test]
fn reentry_under_a_lost_acquisition_is_exempt_from_rule_1() {
    let mut h = good();
    // The outer call lost its lock; its re-entry overlaps the next holder.
    section(&mut h, 0, 10, "x", 10, 100, 5, Outcome::LostTaken);
    h.bodies.push(body(0, 11, 10, "x", 20, 90, 5));
    h.calls.push(call(0, 11, 10, "x", 20, 91, Outcome::Dropped));
    section(&mut h, 1, 10, "x", 50, 60, 6, Outcome::Ok);
    let v = check(&h, &Limits::default());
    assert!(v.is_empty(), "{v:#?}");
}

#[test]
fn lease_after_a_cut_call_without_body_explains_a_timeout() {
    let mut h = good();
    // A call cancelled while acquiring may hold the key unseen for a lease.
    h.calls
        .push(call(0, 10, 10, "x", 100_000, 100_050, Outcome::Cancelled));
    h.calls
        .push(call(1, 10, 10, "x", 100_060, 100_500, Outcome::Timeout));
    let v = check(&h, &Limits::default());
    assert!(v.is_empty(), "{v:#?}");
}
