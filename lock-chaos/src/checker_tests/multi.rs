//! Multi-key calls: recorded as a hold of each key of the set, they meet
//! rules 1 and 2 as holds of one key do; rules 4 and 7 read a multi-key
//! timeout over its set.

use super::*;

/// A multi-key call of process `proc` on `keys`, its call ids `first`,
/// `first + 1`, ...: for each key a body (entered 1 ms after the call
/// starts) with its token from `tokens` and a call, all in the set
/// `first`.
fn multi(
    h: &mut History,
    (proc, first): (u32, u64),
    keys: &[&str],
    (enter, exit): (u64, u64),
    tokens: &[u64],
    outcome: Outcome,
) {
    for (i, (key, token)) in keys.iter().zip(tokens).enumerate() {
        let id = first + i as u64;
        section(h, proc, id, key, enter, exit, *token, outcome);
        h.calls.last_mut().expect("call").set = first;
    }
}

/// A multi-key call of process `proc` on `keys` that waited from `start`
/// to `end` (its wait) and timed out: a call per key, no body.
fn multi_timeout(
    h: &mut History,
    (proc, first): (u32, u64),
    keys: &[&str],
    (start, end): (u64, u64),
) {
    for (i, key) in keys.iter().enumerate() {
        let id = first + i as u64;
        h.calls
            .push(call(proc, id, id, key, start, end, Outcome::Timeout));
        let c = h.calls.last_mut().expect("call");
        c.wait = (end - start) * MS;
        c.set = first;
    }
}

#[test]
fn multi_key_holds_in_turn_or_on_other_keys_pass() {
    let mut h = good();
    // x, y then y, z in turn; z, w beside the first: no key twice.
    multi(&mut h, (0, 10), &["x", "y"], (10, 30), &[1, 1], Outcome::Ok);
    multi(&mut h, (1, 10), &["y", "z"], (40, 60), &[2, 2], Outcome::Ok);
    multi(&mut h, (2, 10), &["z", "w"], (10, 30), &[1, 1], Outcome::Ok);
    let v = check(&h, &Limits::default());
    assert!(v.is_empty(), "{v:#?}");
}

#[test]
fn two_multi_key_holds_overlapping_on_one_key_fail_rule_1() {
    let mut h = good();
    multi(&mut h, (0, 10), &["x", "y"], (10, 30), &[1, 1], Outcome::Ok);
    multi(&mut h, (1, 10), &["z", "y"], (20, 40), &[1, 2], Outcome::Ok);
    let v = check(&h, &Limits::default());
    assert_eq!(rules(&v), vec![1], "{v:#?}");
    assert_eq!(v[0].key, "y");
    assert!(
        v[0].message
            .contains("p0t0 call 11 (acq 11) and p1t0 call 11 (acq 11)"),
        "{}",
        v[0].message
    );
    // Told Lost (on one of its keys, which marks the whole set): exempt.
    let mut h = good();
    multi(
        &mut h,
        (0, 10),
        &["x", "y"],
        (10, 30),
        &[1, 1],
        Outcome::LostTaken,
    );
    multi(&mut h, (1, 10), &["z", "y"], (20, 40), &[1, 2], Outcome::Ok);
    let v = check(&h, &Limits::default());
    assert!(v.is_empty(), "{v:#?}");
}

#[test]
fn a_key_token_going_back_in_a_set_fails_rule_2() {
    let mut h = good();
    multi(&mut h, (0, 10), &["x", "y"], (10, 30), &[5, 5], Outcome::Ok);
    // y's token is its own: smaller than the last on y, though x's rose.
    multi(&mut h, (1, 10), &["x", "y"], (40, 60), &[6, 4], Outcome::Ok);
    let v = check(&h, &Limits::default());
    assert_eq!(rules(&v), vec![2], "{v:#?}");
    assert_eq!(v[0].key, "y");
}

#[test]
fn multi_key_timeout_with_no_key_of_its_set_held_fails_rule_4() {
    let mut h = good();
    // Another key is held throughout; the set's keys are not.
    section(&mut h, 0, 10, "x", 100_000, 101_200, 9, Outcome::Ok);
    multi_timeout(&mut h, (1, 10), &["y", "z"], (100_100, 101_100));
    let v = check(&h, &Limits::default());
    // One violation for the set, not one per key.
    assert_eq!(rules(&v), vec![4], "{v:#?}");
    assert!(
        v[0].message.contains("call 10 on the set y, z timed out"),
        "{}",
        v[0].message
    );
    assert_eq!(v[0].shape, "multi-key");
}

#[test]
fn multi_key_timeout_with_a_key_of_its_set_held_passes_rule_4() {
    // One key of the set held throughout the wait, the other free.
    let mut h = good();
    section(&mut h, 0, 10, "y", 100_000, 101_200, 9, Outcome::Ok);
    multi_timeout(&mut h, (1, 10), &["x", "y"], (100_100, 101_100));
    let v = check(&h, &Limits::default());
    assert!(v.is_empty(), "{v:#?}");
    // Held in turn: x for the first part of the wait, y for the rest.
    // Neither key alone covers the wait; the set does.
    let mut h = good();
    section(&mut h, 0, 10, "x", 100_000, 100_600, 9, Outcome::Ok);
    section(&mut h, 0, 11, "y", 100_550, 101_200, 9, Outcome::Ok);
    multi_timeout(&mut h, (1, 10), &["y", "x"], (100_100, 101_100));
    let v = check(&h, &Limits::default());
    assert!(v.is_empty(), "{v:#?}");
    // A single-key call on x with the same wait is a violation.
    h.calls
        .push(call(2, 10, 10, "x", 100_100, 101_100, Outcome::Timeout));
    assert_eq!(rules(&check(&h, &Limits::default())), vec![4]);
}

#[test]
fn multi_key_timeout_reads_rule_7_over_its_set() {
    // A key of the set released 1 s before the wait (within the bound):
    // no rule 7 violation; with neither key released nor held: one.
    let mut h = good_replicated();
    section(&mut h, 0, 10, "y", 100_000, 100_400, 9, Outcome::Ok);
    multi_timeout(&mut h, (1, 10), &["x", "y"], (101_000, 102_000));
    assert!(rule_7(&h).is_empty(), "{:#?}", rule_7(&h));
    let mut h = good_replicated();
    section(&mut h, 0, 10, "w", 100_000, 100_400, 9, Outcome::Ok);
    multi_timeout(&mut h, (1, 10), &["x", "y"], (101_000, 102_000));
    assert_eq!(rules(&rule_7(&h)), vec![7]);
}
