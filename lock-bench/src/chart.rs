//! The side-by-side results as an SVG chart (`--svg PATH`), hand-written:
//! (b)'s pairs per second and (a)'s p50, this library (attribute and
//! `on_current_runtime`) against the floor and rslock, one group of bars
//! per server family. Text is in a generic font family (`sans-serif`), so
//! the file needs no font of its own.

use std::fmt::Write as _;

use crate::contenders::Who;

/// The contenders drawn, in each group's order.
pub const DRAWN: [Who; 4] = [Who::Floor, Who::Library, Who::LibraryLocal, Who::Rslock];

/// One server family's figures: per contender, (a)'s p50 in seconds and
/// (b)'s pairs per second (NaN where not measured).
#[derive(Clone, Debug)]
pub struct Group {
    pub label: String,
    pub bars: Vec<(Who, f64, f64)>,
}

const WIDTH: f64 = 960.0;
const PANEL: f64 = 250.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 90.0;
const GAP: f64 = 30.0;

fn color(who: Who) -> &'static str {
    match who {
        Who::Floor => "#8c8c8c",
        Who::Library => "#1f77b4",
        Who::LibraryLocal => "#6baed6",
        Who::Rslock => "#d62728",
        Who::Polling => "#bcbd22",
    }
}

/// The chart of `groups`; `note` is its second line (the runtime, the
/// runs, the machine).
pub fn render(groups: &[Group], note: &str) -> String {
    let height = TOP + 2.0 * PANEL + GAP;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif">"#
    );
    let _ = writeln!(
        s,
        r#"<rect width="{WIDTH}" height="{height}" fill="white"/>"#
    );
    let _ = writeln!(
        s,
        r#"<text x="{LEFT}" y="24" font-size="16" font-weight="bold">lock-runtime against the floor (its own scripts by hand) and rslock</text>"#
    );
    let _ = writeln!(
        s,
        r##"<text x="{LEFT}" y="44" font-size="12" fill="#444">{}</text>"##,
        escape(note)
    );
    legend(&mut s);
    let throughput = |b: &(Who, f64, f64)| b.2;
    let latency = |b: &(Who, f64, f64)| b.1 * 1e6;
    panel(
        &mut s,
        groups,
        TOP,
        "(b) 64 tasks on 64 keys: pairs per second (higher is better)",
        &throughput,
        &|v| thousands(v),
    );
    panel(
        &mut s,
        groups,
        TOP + PANEL + GAP,
        "(a) uncontended acquire + release: p50 in µs (lower is better)",
        &latency,
        &|v| format!("{v:.0}"),
    );
    s.push_str("</svg>\n");
    s
}

fn legend(s: &mut String) {
    let mut x = LEFT;
    for who in DRAWN {
        let name = escape(&who.to_string());
        let _ = writeln!(
            s,
            r#"<g class="legend" data-contender="{}"><rect x="{x}" y="56" width="12" height="12" fill="{}"/><text x="{}" y="66" font-size="12">{name}</text></g>"#,
            who.tag(),
            color(who),
            x + 16.0
        );
        x += 16.0 + 7.0 * name.chars().count() as f64 + 18.0;
    }
}

type Value<'a> = &'a dyn Fn(&(Who, f64, f64)) -> f64;

/// One panel at `top`: an axis with 4 steps, a group of bars per family.
fn panel(
    s: &mut String,
    groups: &[Group],
    top: f64,
    title: &str,
    value: Value,
    label: &dyn Fn(f64) -> String,
) {
    let plot_w = WIDTH - LEFT - RIGHT;
    let base = top + PANEL - 30.0;
    let plot_h = PANEL - 60.0;
    let max = groups
        .iter()
        .flat_map(|g| g.bars.iter().map(value))
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    let step = nice_step(max / 4.0);
    let top_value = step * 4.0;
    let _ = writeln!(s, r#"<g class="panel">"#);
    let _ = writeln!(
        s,
        r#"<text x="{LEFT}" y="{}" font-size="13" font-weight="bold">{}</text>"#,
        top + 14.0,
        escape(title)
    );
    for i in 0..=4 {
        let v = step * f64::from(i);
        let y = base - plot_h * v / top_value;
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" font-size="10" text-anchor="end">{}</text>"##,
            WIDTH - RIGHT,
            LEFT - 6.0,
            y + 3.0,
            escape(&label(v))
        );
    }
    let n = groups.len().max(1) as f64;
    let group_w = plot_w / n;
    let bar_w = group_w * 0.8 / DRAWN.len() as f64;
    for (gi, group) in groups.iter().enumerate() {
        let x0 = LEFT + group_w * gi as f64 + group_w * 0.1;
        for (bi, who) in DRAWN.iter().enumerate() {
            let Some(bar) = group.bars.iter().find(|b| b.0 == *who) else {
                continue;
            };
            let v = value(bar);
            if !v.is_finite() {
                continue;
            }
            let h = plot_h * v / top_value;
            let x = x0 + bar_w * bi as f64;
            let text = label(v);
            let _ = writeln!(
                s,
                r#"<rect class="bar" data-contender="{}" x="{x:.1}" y="{:.1}" width="{:.1}" height="{h:.1}" fill="{}"><title>{}, {}: {}</title></rect>"#,
                who.tag(),
                base - h,
                bar_w - 2.0,
                color(*who),
                escape(&group.label),
                escape(&who.to_string()),
                escape(&text)
            );
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" font-size="9" text-anchor="middle">{}</text>"#,
                x + bar_w / 2.0 - 1.0,
                base - h - 3.0,
                escape(&text)
            );
        }
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="middle">{}</text>"#,
            x0 + group_w * 0.4,
            base + 16.0,
            escape(&group.label)
        );
    }
    let _ = writeln!(
        s,
        r#"<line x1="{LEFT}" y1="{base}" x2="{}" y2="{base}" stroke="black"/>"#,
        WIDTH - RIGHT
    );
    s.push_str("</g>\n");
}

/// 1, 2 or 5 times a power of ten, at least `raw` (1 for nothing).
fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let power = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * power)
        .find(|&step| step >= raw)
        .unwrap_or(10.0 * power)
}

/// "83,631".
fn thousands(v: f64) -> String {
    let digits = format!("{:.0}", v.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Whether `svg` is well-formed as far as the chart goes: every tag closed
/// in order, one root `svg`, quotes paired in every tag, every `&` an
/// entity. Answers the first fault.
pub fn check(svg: &str) -> Result<(), String> {
    let mut open: Vec<&str> = Vec::new();
    let mut roots = 0;
    let mut rest = svg;
    loop {
        let (text, tail) = match rest.find('<') {
            Some(i) => (&rest[..i], Some(&rest[i + 1..])),
            None => (rest, None),
        };
        check_text(text)?;
        let Some(tail) = tail else { break };
        let end = tail.find('>').ok_or("a tag without its `>`")?;
        let tag = &tail[..end];
        rest = &tail[end + 1..];
        if tag.matches('"').count() % 2 != 0 {
            return Err(format!("unpaired quotes in <{tag}>"));
        }
        if let Some(name) = tag.strip_prefix('/') {
            match open.pop() {
                Some(top) if top == name.trim() => {}
                top => return Err(format!("</{name}> closes {top:?}")),
            }
            continue;
        }
        let name = tag
            .split_whitespace()
            .next()
            .unwrap_or("")
            .trim_end_matches('/');
        if name.is_empty() {
            return Err(format!("a tag without a name: <{tag}>"));
        }
        if open.is_empty() {
            roots += 1;
            if name != "svg" || roots > 1 {
                return Err(format!("<{name}> outside the one <svg>"));
            }
        }
        if !tag.ends_with('/') {
            open.push(name);
        }
    }
    match (open.last(), roots) {
        (Some(name), _) => Err(format!("<{name}> is never closed")),
        (None, 0) => Err("no <svg>".into()),
        (None, _) => Ok(()),
    }
}

fn check_text(text: &str) -> Result<(), String> {
    if text.contains('>') {
        return Err(format!("a bare `>` in text: {text:?}"));
    }
    for (i, _) in text.match_indices('&') {
        let entity = &text[i..];
        if !["&amp;", "&lt;", "&gt;", "&quot;", "&apos;", "&#"]
            .iter()
            .any(|e| entity.starts_with(e))
        {
            return Err(format!("a bare `&` in text: {text:?}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn groups() -> Vec<Group> {
        let bars = |scale: f64| {
            vec![
                (Who::Floor, 150e-6 * scale, 90_000.0 / scale),
                (Who::Library, 157e-6 * scale, 83_631.0 / scale),
                (Who::LibraryLocal, 155e-6 * scale, 85_000.0 / scale),
                (Who::Rslock, 160e-6 * scale, 105_645.0 / scale),
            ]
        };
        vec![
            Group {
                label: "Redis 7.0.15".into(),
                bars: bars(1.0),
            },
            Group {
                label: "Valkey 9.1 <&>".into(),
                bars: bars(2.0),
            },
        ]
    }

    #[test]
    fn the_chart_is_well_formed_with_a_bar_and_a_label_per_contender() {
        let svg = render(&groups(), "multi-thread runtime, 1 run");
        check(&svg).unwrap_or_else(|e| panic!("{e}\n{svg}"));
        for who in DRAWN {
            let bars = svg
                .matches(&format!(r#"class="bar" data-contender="{}""#, who.tag()))
                .count();
            // Two families, two panels.
            assert_eq!(bars, 4, "{who}'s bars in\n{svg}");
            let name = escape(&who.to_string());
            assert!(svg.contains(&format!(">{name}</text>")), "{who}'s label");
        }
        for value in ["83,631", "105,645", "157", "41,816"] {
            assert!(
                svg.contains(&format!(">{value}</text>")),
                "{value} in\n{svg}"
            );
        }
        assert!(svg.contains(">Valkey 9.1 &lt;&amp;&gt;</text>"));
        assert!(svg.contains(r#"font-family="sans-serif""#));
    }

    #[test]
    fn the_check_finds_what_is_not_well_formed() {
        assert!(check(r#"<svg><g><rect/></g></svg>"#).is_ok());
        assert!(check(r#"<svg><g></svg>"#).is_err());
        assert!(check(r#"<svg><g></g>"#).is_err());
        assert!(check(r#"<svg x="1></svg>"#).is_err());
        assert!(check(r#"<svg><text>a & b</text></svg>"#).is_err());
        assert!(check(r#"<svg></svg><svg></svg>"#).is_err());
    }
}
