//! The timeline of hand-made histories: well-formed, with the violation
//! marked, the fault shaded, a bar per hold, and bounded for long runs.

use super::*;
use crate::checker::check;
use crate::election::{EndKind, Records, TermEnded, TermStart, Why};
use crate::history::{Body, Call, Fault, Outcome};
use crate::index::Limits;

const MS: u64 = 1_000_000;

/// A body of its own acquisition and its call (entered 1 ms after the
/// call started, left 1 ms before it ended).
fn hold(h: &mut History, proc: u32, id: u64, key: &str, (enter, exit): (u64, u64), token: u64) {
    h.bodies.push(Body {
        proc,
        task: 0,
        call: id,
        acq: id,
        key: key.into(),
        client: 0,
        enter: enter * MS,
        exit: exit * MS,
        token,
        done: true,
    });
    h.calls.push(Call {
        proc,
        task: 0,
        call: id,
        acq: id,
        key: key.into(),
        client: 0,
        start: (enter - 1) * MS,
        end: (exit + 1) * MS,
        wait: 1000 * MS,
        lease: 500 * MS,
        outcome: Outcome::Ok,
        kind: LockKind::Plain,
        waiter_lease: 0,
        set: 0,
    });
}

/// Checks that `svg` is well-formed XML of one root (tags balanced and
/// named alike, attributes quoted, `&` only in entities, no `<` in text
/// or values); the number of elements.
fn well_formed(svg: &str) -> Result<usize, String> {
    let entity = |rest: &str| {
        ["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"]
            .iter()
            .any(|e| rest.starts_with(e))
    };
    let text_ok = |text: &str| {
        text.match_indices('&').all(|(i, _)| entity(&text[i..])) && !text.contains('<')
    };
    let mut stack: Vec<&str> = Vec::new();
    let (mut rest, mut elements, mut roots) = (svg, 0, 0);
    while let Some(open) = rest.find('<') {
        if !text_ok(&rest[..open]) {
            return Err(format!("bad text before {:.60}", &rest[open..]));
        }
        rest = &rest[open..];
        let close = rest.find('>').ok_or("a tag never closed")?;
        let tag = &rest[1..close];
        rest = &rest[close + 1..];
        if let Some(name) = tag.strip_prefix('/') {
            match stack.pop() {
                Some(open) if open == name => continue,
                other => return Err(format!("</{name}> closes {other:?}")),
            }
        }
        let (tag, empty) = match tag.strip_suffix('/') {
            Some(tag) => (tag, true),
            None => (tag, false),
        };
        let name_end = tag.find(char::is_whitespace).unwrap_or(tag.len());
        let name = &tag[..name_end];
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(format!("bad tag name in <{tag}>"));
        }
        let mut attrs = tag[name_end..].trim();
        while !attrs.is_empty() {
            let (key, value) = attrs.split_once("=\"").ok_or(format!("attr in <{tag}>"))?;
            let end = value.find('"').ok_or(format!("unquoted in <{tag}>"))?;
            let key_ok = !key.is_empty()
                && key
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == ':');
            if !key_ok || !text_ok(&value[..end]) {
                return Err(format!("bad attribute {key} in <{tag}>"));
            }
            attrs = value[end + 1..].trim_start();
        }
        elements += 1;
        if stack.is_empty() {
            roots += 1;
        }
        if !empty {
            stack.push(name);
        }
    }
    if !stack.is_empty() || roots != 1 || !rest.trim().is_empty() {
        return Err(format!("unclosed {stack:?}, {roots} roots"));
    }
    Ok(elements)
}

/// The elements `<tag class="CLASS...` of `svg` whose class list has
/// `class`, each with its title (those without one left out).
fn titled<'a>(svg: &'a str, tag: &str, class: &str) -> Vec<(&'a str, &'a str)> {
    let head = format!("<{tag} class=\"");
    svg.match_indices(&head)
        .filter_map(|(i, _)| {
            let el = &svg[i..];
            let classes = el[head.len()..].split('"').next()?;
            if !classes.split(' ').any(|c| c == class) {
                return None;
            }
            let (head, rest) = el.split_once('>')?;
            let title = rest.strip_prefix("<title>")?.split("</title>").next()?;
            Some((head, title))
        })
        .collect()
}

/// The value of attribute `name` in an element's head.
fn attr(el: &str, name: &str) -> f64 {
    let pat = format!(" {name}=\"");
    let v = el.split(&pat).nth(1).and_then(|v| v.split('"').next());
    v.and_then(|v| v.parse().ok()).unwrap_or(f64::NAN)
}

/// Two holds of key `x` overlap (rule 1), a third and a fourth follow on
/// `x` and `y`; a pause of node0 between them. Times from the first
/// call's start, 9 ms.
fn small() -> History {
    let mut h = History::default();
    hold(&mut h, 0, 1, "x", (10, 30), 1);
    hold(&mut h, 1, 1, "x", (20, 40), 2);
    hold(&mut h, 2, 1, "x", (300, 400), 3);
    hold(&mut h, 2, 2, "y", (100, 200), 9);
    h.calls[3].outcome = Outcome::LostExpired;
    h.faults.push(Fault {
        kind: "pause700ms".into(),
        target: "node0".into(),
        start: 50 * MS,
        end: 280 * MS,
    });
    h
}

#[test]
fn small_history_marks_its_violation_and_fault() {
    let h = small();
    let violations = check(&h, &Limits::default());
    let rules: Vec<u8> = violations.iter().map(|v| v.rule).collect();
    assert_eq!(rules, vec![1], "{violations:#?}");
    let pic = render(&h, &violations, "seed=1 <test> & more");
    println!("{}", pic.svg);
    let elements = well_formed(&pic.svg).expect("well-formed SVG");
    assert!(elements > 20, "{elements} elements");
    assert_eq!((pic.holds, pic.bars, pic.left_out), (4, 4, 0));

    let marks = titled(&pic.svg, "g", "violation");
    assert_eq!(marks.len(), 1, "{marks:?}");
    assert!(
        marks[0]
            .1
            .starts_with("rule 1 on x at 0.011 s: mutual exclusion"),
        "{marks:?}"
    );
    let faults = titled(&pic.svg, "rect", "fault");
    assert_eq!(faults.len(), 1, "{faults:?}");
    assert_eq!(faults[0].1, "pause700ms on node0: 0.041–0.271 s");
    assert!(pic.svg.contains(">pause700ms node0</text>"), "fault label");
    // The shading spans the time of the fault, over every key's lanes.
    let holds = titled(&pic.svg, "rect", "hold");
    assert_eq!(holds.len(), 4, "{holds:?}");
    let place = |who: &str| {
        let (el, _) = holds.iter().find(|(_, t)| t.starts_with(who)).expect(who);
        (
            attr(el, "x"),
            attr(el, "x") + attr(el, "width"),
            attr(el, "y"),
        )
    };
    let ys: Vec<f64> = holds.iter().map(|(el, _)| attr(el, "y")).collect();
    let (top, bottom) = (
        ys.iter().copied().fold(f64::MAX, f64::min),
        ys.iter().copied().fold(0.0, f64::max) + LANE,
    );
    let (fx0, fy0) = (attr(faults[0].0, "x"), attr(faults[0].0, "y"));
    let (fx1, fy1) = (
        fx0 + attr(faults[0].0, "width"),
        fy0 + attr(faults[0].0, "height"),
    );
    assert!(fy0 < top && fy1 >= bottom, "shading over every lane");
    assert!(place("p1t0 call 1").1 < fx0 && fx1 < place("p2t0 call 1").0);
    assert!(fx0 < place("p2t0 call 2").0 && place("p2t0 call 2").1 < fx1);
    // The two holders at once: on two lanes, both outlined; the others not.
    let hit: Vec<&str> = titled(&pic.svg, "rect", "hit")
        .iter()
        .map(|(_, title)| title.split(':').next().unwrap_or(""))
        .collect();
    assert_eq!(hit, ["p0t0 call 1 on x", "p1t0 call 1 on x"]);
    let (first, second) = (place("p0t0 call 1").2, place("p1t0 call 1").2);
    assert_ne!(first, second, "overlapping holds share a lane");
    assert_eq!(
        first,
        place("p2t0 call 1").2,
        "the next hold reuses the lane"
    );
    let lost = titled(&pic.svg, "rect", "lost");
    assert_eq!(lost.len(), 1, "{lost:?}");
    assert!(lost[0].1.ends_with("lost_expired"), "{lost:?}");
    assert!(pic.svg.contains("seed=1 &lt;test&gt; &amp; more"));
}

#[test]
fn election_terms_are_holds() {
    let mut h = History::default();
    let term = |proc, token, at| TermStart {
        proc,
        task: 1,
        key: "e0".into(),
        token,
        client: 0,
        at: at * MS,
    };
    h.election = Records {
        terms: vec![term(0, 5, 10), term(1, 6, 500), term(2, 7, 1000)],
        ends: vec![TermEnded {
            proc: 0,
            task: 1,
            key: "e0".into(),
            token: 5,
            at: 400 * MS,
            end: EndKind::Returned,
            why: Why::Resign,
        }],
        ..Records::default()
    };
    h.faults.push(Fault {
        kind: "wkill".into(),
        target: "worker1".into(),
        start: 900 * MS,
        end: 1200 * MS,
    });
    let pic = render(&h, &[], "election");
    well_formed(&pic.svg).expect("well-formed SVG");
    let holds = titled(&pic.svg, "rect", "hold");
    let titles: Vec<&str> = holds.iter().map(|(_, t)| *t).collect();
    assert_eq!(
        titles,
        [
            "p0t1 term on e0, token 5: 0.000–0.390 s, returned (resign)",
            "p1t1 term on e0, token 6: 0.490–0.890 s, no end recorded: its worker was killed",
            "p2t1 term on e0, token 7: 0.990–1.190 s, no end recorded"
        ]
    );
    assert_eq!(titled(&pic.svg, "rect", "lost").len(), 2);
}

/// A small seeded generator (an LCG), for the long history.
struct Lcg(u64);

impl Lcg {
    /// A number in `lo..hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        lo + (self.0 >> 33) % (hi - lo)
    }
}

#[test]
fn long_history_stays_bounded() {
    // An hour on more keys than are drawn: holds of 5 ms to 3 s, 5 ms to
    // 8 s apart (some overlapping), a fault every second or so, 5,000
    // violations with long messages.
    let mut h = History::default();
    let mut rng = Lcg(7);
    let mut id = 0;
    for k in 0..30 {
        let mut at = rng.range(10, 1000);
        while at < 3_600_000 {
            id += 1;
            let len = rng.range(5, 3000);
            hold(
                &mut h,
                (id % 5) as u32,
                id,
                &format!("k{k}"),
                (at, at + len),
                id,
            );
            at += if rng.range(0, 10) == 0 {
                len / 2
            } else {
                len + rng.range(5, 8000)
            };
        }
    }
    for i in 0..3_600u64 {
        let start = i * 1000 + rng.range(0, 500);
        h.faults.push(Fault {
            kind: "delay100ms".into(),
            target: format!("node0/w{}", i % 3),
            start: start * MS,
            end: (start + rng.range(1, 2000)) * MS,
        });
    }
    let violations: Vec<Violation> = (0..5_000u64)
        .map(|i| Violation {
            rule: 1 + (i % 10) as u8,
            key: format!("k{}", rng.range(0, 30)),
            at: rng.range(0, 3_600_000) * MS,
            message: "made up: ".repeat(25),
            shape: String::new(),
        })
        .collect();
    let pic = render(&h, &violations, "long");
    println!(
        "{} holds, {} bars, merged under {} px, {} left out, {} bytes",
        pic.holds,
        pic.bars,
        pic.merged_under_px,
        pic.left_out,
        pic.svg.len()
    );
    well_formed(&pic.svg).expect("well-formed SVG");
    assert!(pic.holds > 10_000, "{} holds", pic.holds);
    assert!(pic.bars <= MAX_BARS && pic.bars >= 100, "{} bars", pic.bars);
    assert!(pic.merged_under_px >= 1.0);
    assert!(pic.left_out > 0, "keys past the 24th are left out");
    assert!(titled(&pic.svg, "rect", "fault").len() <= MAX_MARKS);
    assert!(titled(&pic.svg, "g", "violation").len() <= MAX_MARKS);
    assert!(pic.svg.len() < 1_000_000, "{} bytes", pic.svg.len());
    assert!(pic.svg.contains("bars closer than"), "says it merged");
    assert!(
        pic.svg.contains("6 more keys not drawn"),
        "says what it left out"
    );
}
