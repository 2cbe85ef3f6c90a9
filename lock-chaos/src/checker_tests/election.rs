//! The election rules (11 to 15) on hand-made histories: one that passes
//! with every exemption, and one that breaks each rule.

use super::*;
use crate::election::{EndKind, TermEnded, TermStart, Tick, TickList, TickResult, Why};

/// A term of `proc` (task 0) on `key` with `token`, beginning at `at` ms.
fn term(h: &mut History, proc: u32, key: &str, token: u64, at: u64) {
    h.election.terms.push(TermStart {
        proc,
        task: 0,
        key: key.into(),
        token,
        client: 0,
        at: at * MS,
    });
}

/// A tick of `token` on `key`, sent at `sent` ms and answered 1 ms later.
fn tick(h: &mut History, key: &str, token: u64, sent: u64, result: TickResult) {
    h.election.ticks.push(Tick {
        proc: 0,
        task: 0,
        key: key.into(),
        token,
        handed: false,
        sent: sent * MS,
        acked: (sent + 1) * MS,
        result,
    });
}

/// The end of the term `token` on `key` at `at` ms.
fn end(h: &mut History, key: &str, token: u64, at: u64, end: EndKind, why: Why) {
    h.election.ends.push(TermEnded {
        proc: 0,
        task: 0,
        key: key.into(),
        token,
        at: at * MS,
        end,
        why,
    });
}

fn fault(h: &mut History, kind: &str, start: u64, stop: u64) {
    h.faults.push(Fault {
        kind: kind.into(),
        target: "node0".into(),
        start: start * MS,
        end: stop * MS,
    });
}

/// Passes, and exercises every exemption: a refused stale tick, a lost
/// term that began late with a smaller token, a stale tick accepted after
/// a restore took the newer term's write back, a slow hand-over during a
/// fault. The run stops campaigning at 9 s.
fn good() -> History {
    use EndKind::*;
    use TickResult::*;
    let mut h = History::default();
    // e0: A resigns, B takes over within 11 ms, B is lost, C takes over;
    // B's handed-off ticker writes once more and is refused; D, granted
    // with a smaller token, lost before it ticked.
    term(&mut h, 0, "e0", 100, 0);
    for t in [0, 20, 40] {
        tick(&mut h, "e0", 100, t, Ok);
    }
    end(&mut h, "e0", 100, 50, Returned, Why::Resign);
    term(&mut h, 1, "e0", 110, 60);
    tick(&mut h, "e0", 110, 60, Ok);
    tick(&mut h, "e0", 110, 80, Ok);
    end(&mut h, "e0", 110, 500, LostExpired, Why::None);
    term(&mut h, 2, "e0", 120, 600);
    tick(&mut h, "e0", 120, 600, Ok);
    tick(&mut h, "e0", 120, 620, Ok);
    tick(&mut h, "e0", 110, 630, Fenced);
    term(&mut h, 0, "e0", 105, 650);
    end(&mut h, "e0", 105, 660, LostTaken, Why::None);
    end(&mut h, "e0", 120, 9000, Returned, Why::Stop);
    // e2: P resigns at 2.1 s; the next term ticks 1.4 s later, during a
    // pause of the server.
    term(&mut h, 0, "e2", 300, 2000);
    tick(&mut h, "e2", 300, 2000, Ok);
    end(&mut h, "e2", 300, 2100, Returned, Why::Resign);
    fault(&mut h, "pause700ms", 2200, 2900);
    term(&mut h, 1, "e2", 310, 3500);
    tick(&mut h, "e2", 310, 3500, Ok);
    end(&mut h, "e2", 310, 3550, Returned, Why::Resign);
    term(&mut h, 2, "e2", 320, 3600);
    tick(&mut h, "e2", 320, 3600, Ok);
    end(&mut h, "e2", 320, 9000, Returned, Why::Stop);
    // e1: a restore (snapshot at 6.05 s, back at 6.3 s) takes Y's tick and
    // fence back, so X's later tick is accepted.
    term(&mut h, 0, "e1", 200, 6000);
    tick(&mut h, "e1", 200, 6000, Ok);
    term(&mut h, 1, "e1", 210, 6100);
    tick(&mut h, "e1", 210, 6100, Ok);
    fault(&mut h, "restore", 6050, 6300);
    end(&mut h, "e1", 210, 6350, LostTaken, Why::None);
    tick(&mut h, "e1", 200, 6400, Ok);
    end(&mut h, "e1", 200, 6500, Returned, Why::Resign);
    term(&mut h, 2, "e1", 220, 6600);
    tick(&mut h, "e1", 220, 6600, Ok);
    end(&mut h, "e1", 220, 9000, Returned, Why::Stop);
    h.faults.sort_by_key(|f| f.start);
    for (key, tokens) in [
        ("e0", vec![100, 100, 100, 110, 110, 120, 120]),
        ("e1", vec![200, 200, 220]),
        ("e2", vec![300, 310, 320]),
    ] {
        h.election.lists.push(TickList {
            key: key.into(),
            tokens,
        });
    }
    h
}

#[test]
fn correct_election_history_passes() {
    let v = check(&good(), &Limits::default());
    assert!(v.is_empty(), "{v:#?}");
}

#[test]
fn a_token_going_down_in_the_list_fails_rule_11() {
    let mut h = good();
    h.election.lists[0].tokens.push(110);
    let v = check(&h, &Limits::default());
    assert_eq!(rules(&v), vec![11]);
    assert!(
        v[0].message.contains("token 110 follows 120"),
        "{}",
        v[0].message
    );
}

#[test]
fn a_later_term_with_a_smaller_token_not_lost_fails_rule_12() {
    let mut h = good();
    term(&mut h, 1, "e2", 315, 3700);
    end(&mut h, "e2", 315, 3750, EndKind::Returned, Why::None);
    assert_eq!(rules(&check(&h, &Limits::default())), vec![12]);
    // Lost, it passes; with no end at all (its worker killed), too.
    h.election.ends.last_mut().expect("end").end = EndKind::LostExpired;
    assert!(check(&h, &Limits::default()).is_empty());
    h.election.ends.pop();
    assert!(check(&h, &Limits::default()).is_empty());
}

#[test]
fn an_accepted_stale_tick_after_a_newer_term_ticked_fails_rule_13() {
    let mut h = good();
    // B (110) writes after C (120) ticked at 600 ms, and it is accepted,
    // with no fault that loses writes: a pause does not.
    tick(&mut h, "e0", 110, 700, TickResult::Ok);
    fault(&mut h, "pause150ms", 650, 800);
    let v = check(&h, &Limits::default());
    assert_eq!(rules(&v), vec![13]);
    assert!(v[0].message.contains("token 110"), "{}", v[0].message);
    // A restart between them excuses it (it took C's write and fence).
    h.faults.last_mut().expect("fault").kind = "restart".into();
    assert!(check(&h, &Limits::default()).is_empty());
}

#[test]
fn a_slow_hand_over_with_no_fault_fails_rule_14() {
    let mut h = good();
    // S resigns at 5 s; the next term's first tick comes 1010 ms later,
    // with no fault within a lease and a connect timeout.
    term(&mut h, 0, "e2", 330, 4950);
    tick(&mut h, "e2", 330, 4950, TickResult::Ok);
    end(&mut h, "e2", 330, 5000, EndKind::Returned, Why::Resign);
    term(&mut h, 1, "e2", 340, 6010);
    tick(&mut h, "e2", 340, 6009, TickResult::Ok);
    end(&mut h, "e2", 340, 9000, EndKind::Returned, Why::Stop);
    let v = check(&h, &Limits::default());
    assert_eq!(rules(&v), vec![14]);
    assert!(v[0].message.contains("1010 ms later"), "{}", v[0].message);
    // One tick 10 ms sooner is in time.
    h.election.ticks.last_mut().expect("tick").sent -= 10 * MS;
    h.election.ticks.last_mut().expect("tick").acked -= 10 * MS;
    assert!(check(&h, &Limits::default()).is_empty());
}

#[test]
fn a_key_with_few_terms_fails_rule_15() {
    let mut h = good();
    h.election.terms.retain(|t| t.key != "e1");
    let v = check(&h, &Limits::default());
    assert_eq!(rules(&v), vec![15]);
    assert!(
        v[0].message.contains("e1 had 0 terms in 9 s"),
        "{}",
        v[0].message
    );
}
