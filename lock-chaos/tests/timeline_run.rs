//! A short run on one node with `--timeline` (fixed seed, 10 s, about
//! 12 s): the picture is written, and draws a bar for each hold the run's
//! history recorded, a shading for each of its faults, and a mark for
//! each violation it printed.

use std::collections::BTreeSet;
use std::process::Command;

use lock_chaos::history::History;
use lock_testkit::TempDir;

/// The titles of the elements `<tag class="CLASS...` of `svg` whose class
/// list has `class` and that carry a title.
fn titles<'a>(svg: &'a str, tag: &str, class: &str) -> Vec<&'a str> {
    let head = format!("<{tag} class=\"");
    svg.match_indices(&head)
        .filter_map(|(i, _)| {
            let el = &svg[i + head.len()..];
            let classes = el.split('"').next()?;
            let (_, rest) = el.split_once('>')?;
            let title = rest.strip_prefix("<title>")?.split("</title>").next()?;
            classes.split(' ').any(|c| c == class).then_some(title)
        })
        .collect()
}

#[test]
fn short_run_draws_its_timeline() {
    let dir = TempDir::new("chaos-timeline");
    let svg_path = dir.path().join("run.svg");
    let output = Command::new(env!("CARGO_BIN_EXE_lock-chaos"))
        .args(["--seconds", "10", "--mode", "single", "--seed", "7"])
        .arg("--history")
        .arg(dir.path())
        .arg("--timeline")
        .arg(&svg_path)
        .output()
        .expect("run lock-chaos");
    let out = String::from_utf8_lossy(&output.stdout);
    println!("{out}");
    eprintln!("{}", String::from_utf8_lossy(&output.stderr));
    // 0: no violations, 1: some (drawn too); 2 would be the harness's own
    // failure.
    assert!(
        matches!(output.status.code(), Some(0 | 1)),
        "{:?}",
        output.status
    );

    let text = std::fs::read_to_string(dir.path().join("single-seed7.history")).expect("history");
    let mut history = History::default();
    history.parse_into(&text);
    let svg = std::fs::read_to_string(&svg_path).expect("the timeline file");
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    assert!(svg.ends_with("</svg>\n"));
    for tag in ["title", "g", "text", "style"] {
        let open =
            svg.matches(&format!("<{tag}>")).count() + svg.matches(&format!("<{tag} ")).count();
        assert_eq!(
            open,
            svg.matches(&format!("</{tag}>")).count(),
            "<{tag}> balanced"
        );
    }

    // A bar per hold: each body of an acquisition, by worker, task, call
    // and key.
    let holds: BTreeSet<String> = history
        .bodies
        .iter()
        .filter(|b| b.call == b.acq)
        .map(|b| format!("p{}t{} call {} on {}", b.proc, b.task, b.call, b.key))
        .collect();
    assert!(holds.len() >= 50, "holds: {}", holds.len());
    let bars = titles(&svg, "rect", "hold");
    let drawn: BTreeSet<String> = bars
        .iter()
        .filter_map(|t| t.split(':').next())
        .map(str::to_owned)
        .collect();
    assert_eq!(bars.len(), holds.len(), "one bar per hold");
    assert_eq!(drawn, holds);
    let line = format!(
        "timeline written to {}: {n} bars for {n} holds (0 not drawn)",
        svg_path.display(),
        n = holds.len()
    );
    assert!(out.contains(&line), "{line}");

    let faults = titles(&svg, "rect", "fault");
    assert!(
        history.faults.len() >= 3,
        "faults: {}",
        history.faults.len()
    );
    assert_eq!(faults.len(), history.faults.len(), "{faults:?}");
    for f in &history.faults {
        let head = format!("{} on {}: ", f.kind, f.target);
        assert!(faults.iter().any(|t| t.starts_with(&head)), "{head} shaded");
    }
    let violations = out.lines().filter(|l| l.starts_with("VIOLATION")).count();
    assert_eq!(titles(&svg, "g", "violation").len(), violations);
}
