//! The history's lines, written and parsed back.

use super::*;

#[test]
fn lines_round_trip() {
    let b = Body {
        proc: 1,
        task: 2,
        call: 3,
        acq: 3,
        key: "k1".into(),
        client: 1,
        enter: 10,
        exit: 20,
        token: 99,
        done: false,
    };
    let c = Call {
        proc: 1,
        task: 2,
        call: 3,
        acq: 3,
        key: "k1".into(),
        client: 1,
        start: 5,
        end: 25,
        wait: 7,
        lease: 8,
        outcome: Outcome::LostTaken,
        kind: LockKind::Permits(3),
        waiter_lease: 9,
        set: 2,
    };
    let f = Fault {
        kind: "pause".into(),
        target: "node0".into(),
        start: 1,
        end: 2,
    };
    let n = Nesting {
        proc: 1,
        task: 2,
        call: 4,
        acq: 3,
        parent: 3,
        kind: NestKind::Detached,
    };
    let r = Resume {
        proc: 1,
        task: 2,
        call: 4,
        acq: 3,
        at: 30,
        token: 99,
    };
    let mut h = History::default();
    let text = [b.line(), c.line(), n.line(), r.line(), f.line()].concat();
    h.parse_into(&format!("{text}B\t1\nN\t1\t2\t4\t3\t3\tcousin\n"));
    assert_eq!(h.bodies, vec![b]);
    assert_eq!(h.calls, vec![c]);
    assert_eq!(h.nestings, vec![n]);
    assert_eq!(h.resumes, vec![r]);
    assert_eq!(h.faults, vec![f]);
    assert_eq!(h.bad_lines, 2);
    assert_eq!(h.to_text(), text);
}

#[test]
fn kinds_round_trip_and_older_call_lines_are_plain() {
    for kind in [
        LockKind::Plain,
        LockKind::Read,
        LockKind::Write,
        LockKind::Permits(2),
        LockKind::Fair,
    ] {
        assert_eq!(LockKind::parse(&kind.as_str()), Some(kind));
    }
    assert_eq!(LockKind::parse("permits:x"), None);
    assert_eq!(LockKind::parse("shared"), None);
    let mut h = History::default();
    h.parse_into("C\t1\t2\t3\t3\tk1\t0\t5\t25\t7\t8\tok\n");
    h.parse_into("C\t1\t2\t4\t4\tk1\t0\t5\t25\t7\t8\tok\tshared\t0\n");
    assert_eq!(h.calls.len(), 1);
    assert_eq!(h.calls[0].kind, LockKind::Plain);
    assert_eq!(h.calls[0].waiter_lease, 0);
    assert_eq!(h.calls[0].set, 0);
    h.parse_into("C\t1\t2\t5\t5\tk1\t0\t5\t25\t7\t8\tok\tread\t9\n");
    h.parse_into("C\t1\t2\t6\t6\tk2\t0\t5\t25\t7\t8\tok\tread\t9\t5\n");
    assert_eq!((h.calls[1].set, h.calls[2].set), (0, 5));
    assert!(!h.calls[1].in_set() && h.calls[2].in_set());
    assert_eq!(h.bad_lines, 1);
    assert!(LockKind::Read.shares_with(LockKind::Read));
    assert!(LockKind::Permits(2).shares_with(LockKind::Permits(2)));
    assert!(!LockKind::Permits(2).shares_with(LockKind::Permits(3)));
    assert!(!LockKind::Read.shares_with(LockKind::Write));
    assert!(!LockKind::Fair.shares_with(LockKind::Fair));
    assert!(LockKind::Fair.is_exclusive() && LockKind::Plain.is_exclusive());
    assert!(!LockKind::Read.is_exclusive() && !LockKind::Permits(1).is_exclusive());
}
