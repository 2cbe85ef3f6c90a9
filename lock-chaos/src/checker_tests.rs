//! The checker's rules on hand-made histories: one that passes (with every
//! exemption), and one failing history per rule.

use crate::checker::check;
use crate::history::{Body, Call, Fault, History, LockKind, NestKind, Nesting, Outcome, Resume};
use crate::index::{Limits, Violation};

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
        kind: LockKind::Plain,
        waiter_lease: 0,
        set: 0,
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

/// A declared re-entry `id` of acquisition `acq` made in the body of
/// `parent` as a `kind`: its nesting and its call (no body).
#[allow(clippy::too_many_arguments)]
fn nested(
    h: &mut History,
    proc: u32,
    (id, acq, parent): (u64, u64, u64),
    kind: NestKind,
    key: &str,
    start: u64,
    end: u64,
    outcome: Outcome,
) {
    h.nestings.push(Nesting {
        proc,
        task: 0,
        call: id,
        acq,
        parent,
        kind,
    });
    h.calls.push(call(proc, id, acq, key, start, end, outcome));
}

fn resume(proc: u32, call: u64, acq: u64, at: u64, token: u64) -> Resume {
    Resume {
        proc,
        task: 0,
        call,
        acq,
        at: at * MS,
        token,
    }
}

/// Process 0's call 10 holds `x` from 10 to 100 ms (call end 101) with
/// token 5, and joins siblings 11 and 12 on `x` in its body; sibling 11 has
/// a re-entry (13) nested in it.
fn held_siblings(second: (u64, u64)) -> History {
    let mut h = good();
    section(&mut h, 0, 10, "x", 10, 100, 5, Outcome::Ok);
    let (s, e) = second;
    nested(
        &mut h,
        0,
        (11, 10, 10),
        NestKind::Sibling,
        "x",
        20,
        41,
        Outcome::Ok,
    );
    h.bodies.push(body(0, 11, 10, "x", 20, 40, 5));
    h.bodies.push(body(0, 13, 10, "x", 25, 30, 5));
    h.calls.push(call(0, 13, 10, "x", 25, 31, Outcome::Ok));
    nested(
        &mut h,
        0,
        (12, 10, 10),
        NestKind::Sibling,
        "x",
        20,
        e + 1,
        Outcome::Ok,
    );
    h.bodies.push(body(0, 12, 10, "x", s, e, 5));
    h
}

#[test]
fn held_siblings_in_turn_pass() {
    // The second sibling enters as the first leaves; a third, joined in
    // another body, timed out waiting for its turn.
    let mut h = held_siblings((40, 60));
    section(&mut h, 0, 20, "x", 200, 300, 6, Outcome::Ok);
    nested(
        &mut h,
        0,
        (21, 20, 20),
        NestKind::Sibling,
        "x",
        210,
        250,
        Outcome::Ok,
    );
    h.bodies.push(body(0, 21, 20, "x", 210, 250, 6));
    nested(
        &mut h,
        0,
        (22, 20, 20),
        NestKind::Sibling,
        "x",
        210,
        240,
        Outcome::Timeout,
    );
    let v = check(&h, &Limits::default());
    assert!(v.is_empty(), "{v:#?}");
}

#[test]
fn held_siblings_at_once_fail_rule_5() {
    let h = held_siblings((39, 60));
    let v = check(&h, &Limits::default());
    assert_eq!(rules(&v), vec![5], "{v:#?}");
    assert!(v[0].message.contains("calls 11 and 12"), "{}", v[0].message);
}

/// Process 0's call 10 holds `x` from 10 to 100 ms (call end 101) with
/// token 5; its detached call 11 entered at 20 and resumed at each of
/// `resumes`, its call ending `outcome` at `end`. Process 0's call 12 had
/// its detached call 13 end inside.
fn detached(resumes: &[u64], end: u64, outcome: Outcome) -> History {
    let mut h = good();
    section(&mut h, 0, 10, "x", 10, 100, 5, Outcome::Ok);
    nested(
        &mut h,
        0,
        (11, 10, 10),
        NestKind::Detached,
        "x",
        20,
        end,
        outcome,
    );
    let mut b = body(0, 11, 10, "x", 20, end, 5);
    b.done = outcome.is_clean();
    h.bodies.push(b);
    h.resumes
        .extend(resumes.iter().map(|&at| resume(0, 11, 10, at, 5)));
    section(&mut h, 0, 12, "x", 200, 300, 8, Outcome::Ok);
    nested(
        &mut h,
        0,
        (13, 12, 12),
        NestKind::Detached,
        "x",
        210,
        215,
        Outcome::Ok,
    );
    h.bodies.push(body(0, 13, 12, "x", 210, 214, 8));
    h.resumes.push(resume(0, 13, 12, 212, 8));
    h
}

#[test]
fn detached_call_stopped_at_its_hold_s_end_passes() {
    // Resumed until the hold ended; the next poll, at 115 ms, stopped it
    // with Lost (its body dropped), after another process took the key.
    let mut h = detached(&[40, 60, 80, 100, 101], 115, Outcome::LostTaken);
    section(&mut h, 1, 10, "x", 105, 150, 7, Outcome::Ok);
    let v = check(&h, &Limits::default());
    assert!(v.is_empty(), "{v:#?}");
}

#[test]
fn detached_body_dropped_after_the_next_holder_entered_passes() {
    // Seen running last at 100 ms, when its hold ended; dropped at its
    // next poll, at 115 ms, after another process entered at 105 ms: it
    // ran nothing beside that holder.
    let mut h = detached(&[40, 60, 80, 100], 115, Outcome::LostDetached);
    section(&mut h, 1, 10, "x", 105, 150, 7, Outcome::Ok);
    let v = check(&h, &Limits::default());
    assert!(v.is_empty(), "{v:#?}");
    // Seen running at 110 ms, beside the next holder: rules 1 and 6.
    let mut h = detached(&[40, 60, 80, 100, 110], 115, Outcome::LostDetached);
    section(&mut h, 1, 10, "x", 105, 150, 7, Outcome::Ok);
    let v = check(&h, &Limits::default());
    assert_eq!(rules(&v), vec![1, 6], "{v:#?}");
}

#[test]
fn detached_body_running_after_its_hold_fails_rule_6() {
    let h = detached(&[40, 80, 120, 160], 170, Outcome::Ok);
    let v = check(&h, &Limits::default());
    assert_eq!(rules(&v), vec![6], "{v:#?}");
    // The two late resumes and the last statement.
    assert!(v[0].message.contains("ran 3 times"), "{}", v[0].message);
    assert_eq!(v[0].at, 120 * MS);
}

#[test]
fn detached_body_next_to_the_next_holder_fails_rules_1_and_6() {
    let mut h = detached(&[40, 80, 120, 160], 170, Outcome::Ok);
    section(&mut h, 1, 10, "x", 105, 150, 7, Outcome::Ok);
    let v = check(&h, &Limits::default());
    assert_eq!(rules(&v), vec![1, 6], "{v:#?}");
}

/// Rule 7's limits: no `WAIT` (a grant lead of 3 command timeouts, 600
/// ms), a 5 s bound.
fn replicated() -> Limits {
    Limits::replicated(0)
}

/// [`good`] without its timeout in a fault window with no holder: rule 4
/// excuses it, rule 7 does not.
fn good_replicated() -> History {
    let mut h = good();
    h.calls
        .retain(|c| !(c.key == "e" && c.outcome == Outcome::Timeout));
    h
}

/// Rule 7's rules only (rule 4 excuses what faults explain).
fn rule_7(h: &History) -> Vec<Violation> {
    check(h, &replicated())
        .into_iter()
        .filter(|v| v.rule == 7)
        .collect()
}

/// A kill-master window of 3 s at 100 s.
fn failover_window(h: &mut History) {
    h.faults.push(Fault {
        kind: "kill-master".into(),
        target: "node0".into(),
        start: 100_000 * MS,
        end: 103_000 * MS,
    });
}

#[test]
fn rule_7_is_off_by_default_and_passes_the_good_history_without_its_fault() {
    // Its timeout in a fault window with no holder (rule 4's exemption) is
    // what rule 7 forbids: without it, the history passes rule 7 too.
    assert!(check(&good_replicated(), &replicated()).is_empty());
    assert!(check(&good(), &Limits::default()).is_empty());
    assert_eq!(rules(&check(&good(), &replicated())), vec![7]);
}

#[test]
fn key_released_before_a_failover_and_still_held_fails_rule_7() {
    let mut h = good_replicated();
    failover_window(&mut h);
    // Released at 100.5 s (the release returned); a waiter from 106 s to
    // 107 s finds the key held with nobody recorded: 0.5 s past the bound.
    section(&mut h, 0, 10, "x", 100_000, 100_400, 9, Outcome::Ok);
    h.calls.last_mut().expect("call").end = 100_500 * MS;
    h.calls
        .push(call(1, 10, 10, "x", 106_000, 107_000, Outcome::Timeout));
    let v = rule_7(&h);
    assert_eq!(rules(&v), vec![7], "{v:#?}");
    assert_eq!(v[0].at, 106_000 * MS);
    assert!(v[0].message.starts_with("released key held: p1t0 call 10"));
    // Rule 4 fails too: the fault's allowance ended at 103 + 2 = 105 s.
    assert_eq!(rules(&check(&h, &replicated())), vec![4, 7]);
}

#[test]
fn waiting_within_the_bound_after_a_release_passes_rule_7() {
    let mut h = good_replicated();
    failover_window(&mut h);
    section(&mut h, 0, 10, "x", 100_000, 100_400, 9, Outcome::Ok);
    h.calls.last_mut().expect("call").end = 100_500 * MS;
    // Within 5 s of the release's return (and in the fault's allowance).
    h.calls
        .push(call(1, 10, 10, "x", 104_000, 105_000, Outcome::Timeout));
    assert!(check(&h, &replicated()).is_empty());
}

#[test]
fn timeout_in_a_fault_with_no_holder_and_no_release_fails_rule_7_only() {
    let mut h = good_replicated();
    failover_window(&mut h);
    h.calls
        .push(call(1, 10, 10, "x", 101_000, 102_000, Outcome::Timeout));
    assert_eq!(rules(&check(&h, &replicated())), vec![7]);
}

#[test]
fn unclean_holders_and_refused_grants_explain_rule_7() {
    let mut h = good_replicated();
    failover_window(&mut h);
    // A holder told Lost: a lease after its body; a call refused with
    // NotReplicated: its grant from `grant_lead` before its end, a lease
    // after.
    section(
        &mut h,
        0,
        10,
        "x",
        100_000,
        101_000,
        9,
        Outcome::LostExpired,
    );
    h.calls.push(call(
        0,
        11,
        11,
        "x",
        101_000,
        101_700,
        Outcome::NotReplicated,
    ));
    h.calls.last_mut().expect("call").lease = 1000 * MS;
    h.calls
        .push(call(1, 10, 10, "x", 101_000, 102_000, Outcome::Timeout));
    assert!(rule_7(&h).is_empty(), "{:#?}", rule_7(&h));
    // A re-entry's clean end explains nothing: only acquisitions release.
    let mut h = good_replicated();
    section(&mut h, 0, 20, "y", 200_000, 200_500, 9, Outcome::Ok);
    h.bodies.push(body(0, 21, 20, "y", 200_100, 200_200, 9));
    h.calls
        .push(call(0, 21, 20, "y", 200_100, 200_200, Outcome::Ok));
    h.calls
        .push(call(1, 20, 20, "y", 206_000, 207_000, Outcome::Timeout));
    assert_eq!(rules(&rule_7(&h)), vec![7]);
}

mod election;
mod kinds;
mod multi;

/// A stall of `kind` on `target` from 50 s, for 2 s (four leases).
fn stall(h: &mut History, kind: &str, target: &str) {
    h.faults.push(Fault {
        kind: kind.into(),
        target: target.into(),
        start: 50_000 * MS,
        end: 52_000 * MS,
    });
}

#[test]
fn a_body_stopped_at_its_trusted_end_passes_rule_16() {
    for (kind, target) in [("blackhole", "node0"), ("pause2500ms", "node0/w1")] {
        let mut h = good();
        stall(&mut h, kind, target);
        // Inside at the stall, dropped within the lease (500 ms) and the
        // slack after it: told Lost.
        section(&mut h, 1, 20, "s", 49_900, 50_550, 9, Outcome::LostExpired);
        // Entered after the stall began: its hold is not the stall's.
        section(&mut h, 1, 21, "t", 50_100, 50_900, 9, Outcome::LostExpired);
        // Another worker's link stalled alone does not stall this one's.
        if target != "node0" {
            section(&mut h, 2, 22, "u", 49_900, 51_000, 9, Outcome::Ok);
        }
        let v = check(&h, &Limits::default());
        assert!(v.is_empty(), "{kind} on {target}: {v:#?}");
    }
}

#[test]
fn a_body_past_its_trusted_end_fails_rule_16() {
    let mut h = good();
    stall(&mut h, "blackhole", "node0");
    // Inside at the stall, still running 700 ms after it: 200 ms past the
    // lease, beyond the slack.
    section(&mut h, 1, 20, "s", 49_900, 50_700, 9, Outcome::LostExpired);
    let v = check(&h, &Limits::default());
    assert_eq!(rules(&v), vec![16], "{v:#?}");
    assert!(v[0].message.contains("past its hold"), "{}", v[0].message);
    // A re-entered body runs under its acquisition's lease.
    let mut h = good();
    stall(&mut h, "pause2500ms", "node0/w1");
    section(&mut h, 1, 20, "s", 49_800, 51_900, 9, Outcome::LostExpired);
    h.bodies.push(body(1, 23, 20, "s", 49_900, 50_800, 9));
    h.calls
        .push(call(1, 23, 20, "s", 49_899, 50_801, Outcome::LostExpired));
    let v = check(&h, &Limits::default());
    assert_eq!(rules(&v), vec![16, 16], "{v:#?}");
    // A stall shorter than the lease proves nothing; Redlock turns it off.
    let mut h = good();
    h.faults.push(Fault {
        kind: "pause400ms".into(),
        target: "node0".into(),
        start: 50_000 * MS,
        end: 50_400 * MS,
    });
    section(&mut h, 1, 20, "s", 49_900, 50_700, 9, Outcome::Ok);
    assert!(check(&h, &Limits::default()).is_empty());
    let mut h = good();
    stall(&mut h, "blackhole", "node0");
    section(&mut h, 1, 20, "s", 49_900, 50_700, 9, Outcome::LostExpired);
    let redlock = Limits {
        stall_slack: None,
        ..Limits::default()
    };
    assert!(check(&h, &redlock).is_empty());
}
