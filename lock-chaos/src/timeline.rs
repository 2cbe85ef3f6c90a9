//! A run's history as a picture, as Jepsen's timelines draw one: a
//! self-contained SVG, written by hand (no fonts, no scripts).
//!
//! - One block per key, and within it one lane per hold that overlaps
//!   another (lanes filled first-fit, in the order holds began): on a key
//!   of exclusive holds every hold shares one lane unless two overlapped
//!   (a loss, or a violation); readers and permit holders inside at once
//!   stack.
//! - A *hold* is a body of an acquisition (not a declared re-entry, which
//!   runs under its outer call's hold), drawn from its first statement to
//!   its last (or its drop): the span rule 1 compares. The history records
//!   neither the grant itself nor the release, only the call's start and
//!   end around them; each bar's tooltip gives both. In the election mode
//!   a hold is a term, from its leader's first statement to the end of
//!   `Term::ended`, or when no end was recorded, to the kill of its
//!   worker (or the end of the run).
//! - Colour is the worker process; exclusive kinds (plain, write, fair,
//!   election terms) are solid, shared kinds (read, permits) light; a wide
//!   enough bar carries its kind's letter (R, W, P, F); a hold whose call
//!   was told `Lost` (or never reported) has a dashed outline.
//! - Fault windows are shaded across every key, and labelled (kind and
//!   target) in a strip of two rows above them where there is room.
//! - Each violation is a red line across its key's block at its time, with
//!   a red mark above it whose tooltip names the rule and gives its
//!   message; the holds of that key that span that moment are outlined in
//!   red.
//!
//! The size stays bounded however long the run: the time axis is at most
//! [`MAX_PLOT`] pixels wide (100 px a second below that), at most
//! [`MAX_KEYS`] keys are drawn (those with violations first, then the
//! busiest) and [`MAX_LANES`] lanes per key (holds past that are counted,
//! not drawn). When a run has more than [`MAX_BARS`] holds, bars of a lane
//! closer than a pixel are merged into one (its tooltip counts them), and
//! that distance doubles until at most [`MAX_BARS`] bars remain; fault
//! windows and violation marks likewise past [`MAX_MARKS`] each. Every
//! hold is drawn as a bar of its own otherwise. So a picture stays under
//! about 1 MB (each bar's tooltip is most of it); a 15 s run's is about
//! 40 KB.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write;

use crate::election::TermEnded;
use crate::history::{History, LockKind};
use crate::index::{Index, Violation};

/// The widest time axis (px).
pub const MAX_PLOT: f64 = 1600.0;
/// Pixels per second of the run, up to [`MAX_PLOT`].
pub const PX_PER_S: f64 = 100.0;
/// The most keys drawn.
pub const MAX_KEYS: usize = 24;
/// The most lanes per key.
pub const MAX_LANES: usize = 12;
/// The most bars drawn before close ones are merged.
pub const MAX_BARS: usize = 2000;
/// The most fault windows, and violation marks (over all keys), drawn
/// before close ones are merged.
pub const MAX_MARKS: usize = 300;

const LEFT: f64 = 150.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 62.0;
const STRIP: f64 = 22.0;
const LANE: f64 = 10.0;
const LANE_GAP: f64 = 2.0;
const KEY_GAP: f64 = 8.0;
const AXIS: f64 = 28.0;
/// Worker colours (no red: red marks violations).
const COLOURS: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#9c755f", "#17becf",
    "#ff9da7", "#bab0ac",
];

/// The picture of a run, and what it shows.
#[derive(Debug, Clone)]
pub struct Picture {
    /// The SVG document.
    pub svg: String,
    /// How many holds the history has.
    pub holds: usize,
    /// How many bars were drawn (fewer than `holds` when close ones were
    /// merged, or some were left out).
    pub bars: usize,
    /// Holds not drawn: on keys past [`MAX_KEYS`], or past [`MAX_LANES`]
    /// holds at once on a key.
    pub left_out: usize,
    /// Bars of a lane closer than this many pixels were merged (0: none).
    pub merged_under_px: f64,
}

/// One hold: a body of an acquisition, or an election term.
#[derive(Debug, Clone)]
struct Hold {
    key: String,
    proc: u32,
    start: u64,
    end: u64,
    /// Read or permits: shares its key.
    shared: bool,
    /// Told `Lost`, or never reported how it ended.
    lost: bool,
    /// The letter drawn in a wide bar.
    letter: &'static str,
    /// The kind's word (`plain`, `read`, `permits:2`, `term`...).
    kind: String,
    /// The tooltip: who, which kind, when, how it ended.
    title: String,
}

/// Seconds from `origin`, for tooltips.
fn secs(t: u64, origin: u64) -> String {
    format!("{:.3}", t.saturating_sub(origin) as f64 / 1e9)
}

fn letter(kind: LockKind) -> &'static str {
    match kind {
        LockKind::Plain => "",
        LockKind::Read => "R",
        LockKind::Write => "W",
        LockKind::Permits(_) => "P",
        LockKind::Fair => "F",
    }
}

/// The holds of the lock modes: bodies of acquisitions.
fn lock_holds(h: &History, origin: u64) -> Vec<Hold> {
    let ix = Index::new(h);
    let mut out = Vec::new();
    for b in h.bodies.iter().filter(|b| b.call == b.acq) {
        let call = ix.call(b.proc, b.call);
        let kind = call.map_or(LockKind::Plain, |c| c.kind);
        let outcome = call.map_or("no call recorded".to_owned(), |c| c.outcome.to_string());
        let set = match call.filter(|c| c.in_set()) {
            Some(c) => format!(", multi-key set {}", c.set),
            None => String::new(),
        };
        let called = match call {
            Some(c) => format!(
                " (call {}–{} s)",
                secs(c.start, origin),
                secs(c.end, origin)
            ),
            None => String::new(),
        };
        out.push(Hold {
            key: b.key.clone(),
            proc: b.proc,
            start: b.enter,
            end: b.exit.max(b.enter),
            shared: !kind.is_exclusive(),
            lost: call.is_none_or(|c| c.outcome.is_lost()),
            letter: letter(kind),
            kind: kind.to_string(),
            title: format!(
                "p{}t{} call {} on {}: {kind}{set}, token {}, inside {}–{} s{called}, {outcome}",
                b.proc,
                b.task,
                b.call,
                b.key,
                b.token,
                secs(b.enter, origin),
                secs(b.exit, origin)
            ),
        });
    }
    out
}

/// The holds of the election mode: terms, to their recorded end, or
/// without one to the kill of their worker (or to `last`, the end of the
/// run).
fn term_holds(h: &History, origin: u64, last: u64) -> Vec<Hold> {
    let r = &h.election;
    let ends: HashMap<(&str, u64), &TermEnded> = r
        .ends
        .iter()
        .map(|e| ((e.key.as_str(), e.token), e))
        .collect();
    let mut out = Vec::new();
    for t in &r.terms {
        let end = ends.get(&(t.key.as_str(), t.token));
        let worker = format!("worker{}", t.proc);
        let killed = h
            .faults
            .iter()
            .filter(|f| f.kind == "wkill" && f.target == worker && f.start >= t.at)
            .map(|f| f.start)
            .min();
        let (until, how) = match (end, killed) {
            (Some(e), _) => (e.at, format!("{} ({})", e.end, e.why.as_str())),
            (None, Some(kill)) => (kill, "no end recorded: its worker was killed".to_owned()),
            (None, None) => (last, "no end recorded".to_owned()),
        };
        out.push(Hold {
            key: t.key.clone(),
            proc: t.proc,
            start: t.at,
            end: until.max(t.at),
            shared: false,
            lost: end.is_none_or(|e| e.end.is_lost()),
            letter: "",
            kind: "term".to_owned(),
            title: format!(
                "p{}t{} term on {}, token {}: {}–{} s, {how}",
                t.proc,
                t.task,
                t.key,
                t.token,
                secs(t.at, origin),
                secs(until, origin)
            ),
        });
    }
    out
}

/// The last time the history records.
fn last_time(h: &History) -> u64 {
    let r = &h.election;
    let times = h.bodies.iter().map(|b| b.exit);
    times
        .chain(h.calls.iter().map(|c| c.end))
        .chain(h.faults.iter().map(|f| f.end))
        .chain(r.terms.iter().map(|t| t.at))
        .chain(r.ends.iter().map(|e| e.at))
        .chain(r.ticks.iter().map(|t| t.acked))
        .max()
        .unwrap_or(0)
}

/// Maps times to pixels.
#[derive(Debug, Clone, Copy)]
struct Scale {
    origin: u64,
    span: u64,
    width: f64,
}

impl Scale {
    fn x(&self, t: u64) -> f64 {
        let t = t.clamp(self.origin, self.origin + self.span);
        LEFT + (t - self.origin) as f64 / self.span as f64 * self.width
    }
}

/// A bar: one hold, or several close ones of a lane merged.
#[derive(Debug, Clone)]
struct Bar {
    x0: f64,
    x1: f64,
    /// The first hold's index.
    first: usize,
    n: usize,
    /// The process, if all its holds are one process's.
    proc: Option<u32>,
    shared: bool,
    lost: bool,
    /// It spans a violation of its key.
    hit: bool,
}

/// One key's block: its lanes (hold indices, by start).
#[derive(Debug, Clone, Default)]
struct Block {
    key: String,
    lanes: Vec<Vec<usize>>,
    kinds: BTreeSet<String>,
}

/// Fills the lanes of each key first-fit; the number of holds left out.
fn blocks(holds: &[Hold], keys: &[String]) -> (Vec<Block>, usize) {
    let at: HashMap<&str, usize> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| (k.as_str(), i))
        .collect();
    let mut out: Vec<Block> = keys
        .iter()
        .map(|k| Block {
            key: k.clone(),
            ..Block::default()
        })
        .collect();
    let mut order: Vec<usize> = (0..holds.len()).collect();
    order.sort_by_key(|&i| (holds[i].start, holds[i].end));
    let mut ends: Vec<Vec<u64>> = vec![Vec::new(); keys.len()];
    let mut left_out = 0;
    for i in order {
        let hold = &holds[i];
        let Some(&k) = at.get(hold.key.as_str()) else {
            left_out += 1;
            continue;
        };
        let lane = match ends[k].iter().position(|&end| end <= hold.start) {
            Some(lane) => lane,
            None if ends[k].len() < MAX_LANES => {
                ends[k].push(0);
                out[k].lanes.push(Vec::new());
                ends[k].len() - 1
            }
            None => {
                left_out += 1;
                continue;
            }
        };
        ends[k][lane] = hold.end;
        out[k].lanes[lane].push(i);
        if !out[k].kinds.contains(&hold.kind) {
            out[k].kinds.insert(hold.kind.clone());
        }
    }
    (out, left_out)
}

/// The keys drawn: every key with holds or violations, those with
/// violations first and then the busiest, at most [`MAX_KEYS`], by name.
fn keys_drawn(holds: &[Hold], violations: &[Violation]) -> (Vec<String>, usize) {
    let mut count: BTreeMap<&str, (bool, usize)> = BTreeMap::new();
    for h in holds {
        count.entry(h.key.as_str()).or_default().1 += 1;
    }
    for v in violations {
        count.entry(v.key.as_str()).or_default().0 = true;
    }
    let mut ranked: Vec<(&str, (bool, usize))> = count.into_iter().collect();
    ranked.sort_by_key(|&(key, (bad, n))| (std::cmp::Reverse((bad, n)), key));
    let left = ranked.len().saturating_sub(MAX_KEYS);
    let mut keys: Vec<String> = ranked
        .into_iter()
        .take(MAX_KEYS)
        .map(|(k, _)| k.to_owned())
        .collect();
    keys.sort();
    (keys, left)
}

/// Sorted spans merged where the next begins less than `gap` px after the
/// current one ends (`None`: never): (first index, count, x0, x1).
fn merge(spans: &[(f64, f64)], gap: Option<f64>) -> Vec<(usize, usize, f64, f64)> {
    let mut out: Vec<(usize, usize, f64, f64)> = Vec::new();
    for (i, &(x0, x1)) in spans.iter().enumerate() {
        match out.last_mut() {
            Some(last) if gap.is_some_and(|g| x0 - last.3 < g) => {
                last.1 += 1;
                last.3 = last.3.max(x1);
            }
            _ => out.push((i, 1, x0, x1)),
        }
    }
    out
}

/// The smallest merge distance (none, then 1 px doubling) that leaves at
/// most `max` groups, given a count of groups for each.
fn merge_gap(max: usize, groups: impl Fn(Option<f64>) -> usize) -> Option<f64> {
    let mut gap = None;
    // 2^20 px is wider than any picture: one group per lane by then.
    for step in 0..=20 {
        if groups(gap) <= max {
            break;
        }
        gap = Some(f64::from(1u32 << step));
    }
    gap
}

/// The bars of a lane, merged at `gap`.
fn lane_bars(lane: &[usize], holds: &[Hold], sc: &Scale, gap: Option<f64>) -> Vec<Bar> {
    let spans: Vec<(f64, f64)> = lane
        .iter()
        .map(|&i| (sc.x(holds[i].start), sc.x(holds[i].end)))
        .collect();
    merge(&spans, gap)
        .into_iter()
        .map(|(first, n, x0, x1)| {
            let group = &lane[first..first + n];
            let procs: BTreeSet<u32> = group.iter().map(|&i| holds[i].proc).collect();
            Bar {
                x0,
                x1,
                first: lane[first],
                n,
                proc: procs.first().copied().filter(|_| procs.len() == 1),
                shared: group.iter().all(|&i| holds[i].shared),
                lost: group.iter().any(|&i| holds[i].lost),
                hit: false,
            }
        })
        .collect()
}

/// Marks the bars of `key` that span one of its violations.
fn mark_hits(bars: &mut [Bar], key: &str, violations: &[Violation], sc: &Scale) {
    let mut xs: Vec<f64> = violations
        .iter()
        .filter(|v| v.key == key)
        .map(|v| sc.x(v.at))
        .collect();
    xs.sort_by(f64::total_cmp);
    for bar in bars {
        let from = xs.partition_point(|&x| x < bar.x0);
        bar.hit = xs.get(from).is_some_and(|&x| x <= bar.x1);
    }
}

/// Escapes text for XML.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
    out
}

/// Draws a bar.
fn bar_svg(out: &mut String, bar: &Bar, holds: &[Hold], y: f64, origin: u64) {
    let hold = &holds[bar.first];
    let mut class = String::from("hold");
    match bar.proc {
        Some(p) => {
            let _ = write!(class, " c{}", p as usize % COLOURS.len());
        }
        None => class.push_str(" mix"),
    }
    for (on, name) in [(bar.shared, " sh"), (bar.lost, " lost"), (bar.hit, " hit")] {
        if on {
            class.push_str(name);
        }
    }
    // At least a pixel; 3 when outlined, so that the outline shows.
    let width = (bar.x1 - bar.x0).max(if bar.hit { 3.0 } else { 1.0 });
    let title = if bar.n == 1 {
        esc(&hold.title)
    } else {
        let procs = bar
            .proc
            .map_or("several workers".to_owned(), |p| format!("p{p}"));
        format!(
            "{} holds of {procs} merged, from {} s",
            bar.n,
            secs(hold.start, origin)
        )
    };
    let _ = writeln!(
        out,
        r#"<rect class="{class}" x="{:.1}" y="{y:.0}" width="{width:.1}" height="{LANE}"><title>{title}</title></rect>"#,
        bar.x0
    );
    if bar.n == 1 && !hold.letter.is_empty() && width >= 9.0 {
        let _ = writeln!(
            out,
            r#"<text class="k" x="{:.1}" y="{:.0}">{}</text>"#,
            bar.x0 + 2.0,
            y + LANE - 2.0,
            hold.letter
        );
    }
}

/// The fault windows: shading over the keys, and a labelled strip.
fn faults_svg(out: &mut String, h: &History, sc: &Scale, bottom: f64) -> usize {
    let mut faults: Vec<_> = h.faults.iter().collect();
    faults.sort_by_key(|f| (f.start, f.end));
    let spans: Vec<(f64, f64)> = faults
        .iter()
        .map(|f| (sc.x(f.start), sc.x(f.end).max(sc.x(f.start) + 2.0)))
        .collect();
    let gap = merge_gap(MAX_MARKS, |g| merge(&spans, g).len());
    let groups = merge(&spans, gap);
    let mut label_end = [0.0; 2];
    for &(first, n, x0, x1) in &groups {
        let f = faults[first];
        let (label, title) = if n == 1 {
            let label = format!("{} {}", f.kind, f.target);
            let title = format!(
                "{} on {}: {}–{} s",
                f.kind,
                f.target,
                secs(f.start, sc.origin),
                secs(f.end, sc.origin)
            );
            (label, title)
        } else {
            let kinds: BTreeSet<&str> = faults[first..first + n]
                .iter()
                .map(|f| f.kind.as_str())
                .collect();
            let kinds: Vec<&str> = kinds.into_iter().collect();
            let title = format!(
                "{n} faults from {} s: {}",
                secs(f.start, sc.origin),
                kinds.join(", ")
            );
            (format!("{n} faults"), title)
        };
        let _ = writeln!(
            out,
            r#"<rect class="fault" x="{x0:.1}" y="{:.0}" width="{:.1}" height="{:.0}"><title>{}</title></rect>"#,
            TOP,
            x1 - x0,
            bottom - TOP,
            esc(&title)
        );
        // On the first of the strip's two rows with room.
        if let Some(row) = label_end.iter().position(|&end| x0 >= end) {
            let _ = writeln!(
                out,
                r#"<text class="fl" x="{:.1}" y="{:.0}">{}</text>"#,
                x0 + 1.0,
                TOP + 9.0 + 10.0 * row as f64,
                esc(&label)
            );
            label_end[row] = x0 + 5.5 * label.chars().count() as f64 + 6.0;
        }
    }
    groups.len()
}

/// Where violations `vs` (by time) are drawn, as spans for [`merge`].
fn marks_at(vs: &[&Violation], sc: &Scale) -> Vec<(f64, f64)> {
    vs.iter().map(|v| (sc.x(v.at), sc.x(v.at))).collect()
}

/// The violations of a key (by time): a red line over its block, a mark
/// above; those closer than `gap` px merged into one.
fn violations_svg(
    out: &mut String,
    vs: &[&Violation],
    (sc, gap): (&Scale, Option<f64>),
    (y0, y1): (f64, f64),
) {
    for (first, n, x, _) in merge(&marks_at(vs, sc), gap) {
        let v = vs[first];
        let mut rules: BTreeMap<u8, usize> = BTreeMap::new();
        for v in &vs[first..first + n] {
            *rules.entry(v.rule).or_default() += 1;
        }
        let rules: Vec<String> = rules
            .iter()
            .map(|(r, k)| format!("rule {r} ×{k}"))
            .collect();
        let head = if n == 1 {
            format!("rule {}", v.rule)
        } else {
            format!("{n} violations ({})", rules.join(", "))
        };
        let title = format!(
            "{head} on {} at {} s: {}",
            v.key,
            secs(v.at, sc.origin),
            v.message
        );
        let _ = writeln!(
            out,
            r#"<g class="violation"><title>{}</title><line x1="{x:.1}" y1="{:.0}" x2="{x:.1}" y2="{y1:.0}"/><path d="M{:.1} {:.0}h8l-4 6z"/></g>"#,
            esc(&title),
            y0 - 2.0,
            x - 4.0,
            y0 - 7.0
        );
    }
}

/// Every bar of every block, merged at the smallest distance that keeps
/// them within [`MAX_BARS`].
fn all_bars(blocks: &[Block], holds: &[Hold], sc: &Scale) -> (Vec<Vec<Vec<Bar>>>, f64) {
    let count = |gap: Option<f64>| -> usize {
        let lanes = blocks.iter().flat_map(|b| &b.lanes);
        lanes
            .map(|lane| {
                let spans: Vec<(f64, f64)> = lane
                    .iter()
                    .map(|&i| (sc.x(holds[i].start), sc.x(holds[i].end)))
                    .collect();
                merge(&spans, gap).len()
            })
            .sum()
    };
    let gap = merge_gap(MAX_BARS, count);
    let bars = blocks
        .iter()
        .map(|b| {
            b.lanes
                .iter()
                .map(|lane| lane_bars(lane, holds, sc, gap))
                .collect()
        })
        .collect();
    (bars, gap.unwrap_or(0.0))
}

/// The time axis: a grid line and a label every round step.
fn axis_svg(out: &mut String, sc: &Scale, (top, bottom): (f64, f64)) {
    let span_s = sc.span as f64 / 1e9;
    let steps = [
        0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0,
        3600.0, 7200.0, 14400.0, 43200.0, 86400.0,
    ];
    let most = (sc.width / 70.0).max(1.0);
    let step = steps
        .iter()
        .copied()
        .find(|s| span_s / s <= most)
        .unwrap_or(span_s);
    let _ = writeln!(
        out,
        r#"<line class="axis" x1="{LEFT}" y1="{bottom:.0}" x2="{:.1}" y2="{bottom:.0}"/>"#,
        LEFT + sc.width
    );
    let decimals = usize::from(step < 1.0);
    for i in 0..=(span_s / step) as u64 {
        let t = i as f64 * step;
        let x = LEFT + t / span_s * sc.width;
        let _ = writeln!(
            out,
            r#"<line class="grid" x1="{x:.1}" y1="{top:.0}" x2="{x:.1}" y2="{:.0}"/><text class="t" x="{x:.1}" y="{:.0}">{t:.decimals$} s</text>"#,
            bottom + 4.0,
            bottom + 15.0
        );
    }
}

/// The style sheet: colours per worker, kinds, faults, violations.
fn style(procs: &BTreeSet<u32>) -> String {
    let mut css = String::from(
        "text{font:10px sans-serif;fill:#222}.t{text-anchor:middle}.k{font-size:8px;fill:#111}\
         .fl{font-size:9px;fill:#7a5a00}.hold{fill-opacity:.9}.sh{fill-opacity:.45}\
         .mix{fill:#888}.lost{stroke:#000;stroke-width:1;stroke-dasharray:2 1}\
         .hit{stroke:#d62728;stroke-width:2;stroke-dasharray:none}\
         .fault{fill:#f5b800;fill-opacity:.16}.violation line{stroke:#d62728;stroke-width:1.5}\
         .violation path{fill:#d62728}.grid{stroke:#ddd}.axis{stroke:#444}.lane{fill:#f4f4f4}",
    );
    let used: BTreeSet<usize> = procs.iter().map(|&p| p as usize % COLOURS.len()).collect();
    for c in used {
        let _ = write!(css, ".c{c}{{fill:{}}}", COLOURS[c]);
    }
    css
}

/// The legend line: workers' colours, kinds, lost, faults, violations.
fn legend_svg(out: &mut String, procs: &BTreeSet<u32>, y: f64) {
    let mut items: Vec<(String, String)> = procs
        .iter()
        .map(|&p| {
            let class = format!("hold c{}", p as usize % COLOURS.len());
            (class, format!("worker p{p}"))
        })
        .collect();
    for (class, label) in [
        ("hold mix", "exclusive (plain, W write, F fair, term)"),
        ("hold mix sh", "shared (R read, P permits)"),
        ("hold mix lost", "told Lost"),
        ("fault", "fault window"),
        ("violation", "violation (red outline: holds at that moment)"),
    ] {
        items.push((class.to_owned(), label.to_owned()));
    }
    let mut x = LEFT;
    for (class, label) in items {
        if class == "violation" {
            let _ = write!(
                out,
                r#"<g class="violation"><line x1="{:.0}" y1="{y:.0}" x2="{:.0}" y2="{:.0}"/></g>"#,
                x + 5.0,
                x + 5.0,
                y + LANE
            );
        } else {
            let _ = write!(
                out,
                r#"<rect class="{class}" x="{x:.0}" y="{y:.0}" width="10" height="{LANE}"/>"#
            );
        }
        let _ = writeln!(
            out,
            r#"<text x="{:.0}" y="{:.0}">{}</text>"#,
            x + 14.0,
            y + 9.0,
            esc(&label)
        );
        x += 22.0 + 5.5 * label.chars().count() as f64;
    }
}

/// Draws the picture of history `h` and its `violations`, titled `label`
/// (the seed and mode, say).
pub fn render(h: &History, violations: &[Violation], label: &str) -> Picture {
    let origin = h.origin();
    let last = last_time(h).max(origin);
    let mut holds = lock_holds(h, origin);
    holds.extend(term_holds(h, origin, last));
    let span = (last - origin).max(1_000_000_000);
    let sc = Scale {
        origin,
        span,
        width: (span as f64 / 1e9 * PX_PER_S).clamp(400.0, MAX_PLOT),
    };
    let (keys, keys_left) = keys_drawn(&holds, violations);
    let (blocks, left_out) = blocks(&holds, &keys);
    let (mut bars, merged) = all_bars(&blocks, &holds, &sc);
    // Backgrounds, then faults and the grid over them, then the bars.
    let mut body = String::new();
    let mut y = TOP + STRIP + KEY_GAP;
    let mut places = Vec::new();
    for (block, lanes) in blocks.iter().zip(bars.iter_mut()) {
        let height = lanes.len().max(1) as f64 * (LANE + LANE_GAP) - LANE_GAP;
        places.push((y, y + height));
        key_svg(&mut body, block, &sc, (y, y + height));
        for lane in lanes.iter_mut() {
            mark_hits(lane, &block.key, violations, &sc);
        }
        y += height + KEY_GAP;
    }
    let fault_marks = faults_svg(&mut body, h, &sc, y);
    axis_svg(&mut body, &sc, (TOP, y));
    let per_key: Vec<Vec<&Violation>> = blocks
        .iter()
        .map(|b| {
            let mut vs: Vec<&Violation> = violations.iter().filter(|v| v.key == b.key).collect();
            vs.sort_by_key(|v| v.at);
            vs
        })
        .collect();
    let mark_gap = merge_gap(MAX_MARKS, |g| {
        let groups = per_key.iter().map(|vs| merge(&marks_at(vs, &sc), g).len());
        groups.sum()
    });
    for ((lanes, vs), &(y0, y1)) in bars.iter().zip(&per_key).zip(&places) {
        for (i, lane) in lanes.iter().enumerate() {
            let ly = y0 + i as f64 * (LANE + LANE_GAP);
            for bar in lane {
                bar_svg(&mut body, bar, &holds, ly, origin);
            }
        }
        violations_svg(&mut body, vs, (&sc, mark_gap), (y0, y1));
    }
    let procs: BTreeSet<u32> = holds.iter().map(|h| h.proc).collect();
    let (width, height) = (LEFT + sc.width + RIGHT, y + AXIS);
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" \
         viewBox=\"0 0 {width:.0} {height:.0}\">\n<style>{}</style>\n\
         <rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n",
        style(&procs)
    );
    let notes = Notes {
        holds: holds.len(),
        keys: blocks.len(),
        keys_left,
        left_out,
        faults: h.faults.len(),
        fault_marks,
        violations: violations.len(),
        merged,
    };
    header_svg(&mut svg, label, &notes);
    legend_svg(&mut svg, &procs, 38.0);
    svg.push_str(&body);
    svg.push_str("</svg>\n");
    Picture {
        svg,
        holds: holds.len(),
        bars: bars.iter().flatten().map(Vec::len).sum(),
        left_out,
        merged_under_px: merged,
    }
}

/// The header's counts.
struct Notes {
    holds: usize,
    keys: usize,
    keys_left: usize,
    left_out: usize,
    faults: usize,
    fault_marks: usize,
    violations: usize,
    merged: f64,
}

/// The title and the counts, with what was merged or left out.
fn header_svg(out: &mut String, label: &str, n: &Notes) {
    let mut line = format!(
        "{} holds on {} keys, {} faults, {} violations",
        n.holds, n.keys, n.faults, n.violations
    );
    if n.merged > 0.0 {
        let _ = write!(line, "; bars closer than {} px merged", n.merged);
    }
    if n.fault_marks < n.faults {
        let _ = write!(line, "; close faults merged into {}", n.fault_marks);
    }
    if n.keys_left > 0 {
        let _ = write!(line, "; {} more keys not drawn", n.keys_left);
    }
    if n.left_out > 0 {
        let _ = write!(line, "; {} holds not drawn", n.left_out);
    }
    let _ = writeln!(
        out,
        r#"<text x="10" y="16" style="font-size:13px;font-weight:bold">lock-chaos timeline: {}</text><text x="10" y="30">{}</text>"#,
        esc(label),
        esc(&line)
    );
}

/// A key's name and kinds (when not only plain), and its lanes'
/// background.
fn key_svg(out: &mut String, block: &Block, sc: &Scale, (y0, y1): (f64, f64)) {
    let kinds: Vec<&str> = block.kinds.iter().map(String::as_str).collect();
    let kinds = if kinds == ["plain"] {
        String::new()
    } else {
        format!(
            r#"<tspan dx="5" style="font-size:8px;fill:#666">{}</tspan>"#,
            kinds.join(" ")
        )
    };
    let _ = writeln!(
        out,
        r#"<text x="10" y="{:.0}">{}{kinds}</text><rect class="lane" x="{LEFT}" y="{y0:.0}" width="{:.0}" height="{:.0}"/>"#,
        y0 + 9.0,
        esc(&block.key),
        sc.width,
        y1 - y0
    );
}

#[cfg(test)]
#[path = "timeline_tests.rs"]
mod tests;
