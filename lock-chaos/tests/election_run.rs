//! A short election run on one node (fixed seed, 20 s, about 22 s): the
//! workers campaign with `lead` and tick with fenced writes, under the
//! server's and the link's faults and their own pauses; no violation of
//! rules 11 to 15 (nor of any other), and many terms, accepted ticks,
//! resignations, losses and worker pauses and kills did happen; its
//! timeline (`--timeline`) draws a bar per term.

use std::process::Command;

/// The number after `label` on the summary line starting with it.
fn number(out: &str, label: &str) -> u64 {
    out.lines()
        .filter_map(|l| l.strip_prefix(label))
        .find_map(|rest| rest.split([':', ' ']).find(|s| !s.is_empty())?.parse().ok())
        .unwrap_or(0)
}

/// The value of `name=` on the summary line starting with `label`.
fn field(out: &str, label: &str, name: &str) -> u64 {
    out.lines()
        .filter_map(|l| l.strip_prefix(label))
        .flat_map(str::split_whitespace)
        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('=')?.parse().ok())
        .unwrap_or(0)
}

#[test]
fn short_election_run_on_one_node() {
    let dir = lock_testkit::TempDir::new("chaos-election-timeline");
    let svg = dir.path().join("election.svg");
    let output = Command::new(env!("CARGO_BIN_EXE_lock-chaos"))
        .args(["--seconds", "20", "--mode", "single", "--seed", "7"])
        .arg("--election")
        .arg("--timeline")
        .arg(&svg)
        .output()
        .expect("run lock-chaos");
    let out = String::from_utf8_lossy(&output.stdout);
    println!("{out}");
    eprintln!("{}", String::from_utf8_lossy(&output.stderr));

    let election = out
        .lines()
        .find(|l| l.starts_with("election violations: "))
        .expect("the election violations line");
    assert!(
        election.ends_with(
            "Redis order 0, terms' tokens rise 0, stale ticks 0, hand-over 0, many terms 0"
        ),
        "{election}"
    );
    assert!(!out.contains("VIOLATION"), "violations found");
    assert!(output.status.success(), "exit status {:?}", output.status);

    let terms = number(&out, "terms: ");
    assert!(terms >= 40, "terms: {terms}");
    let accepted = field(&out, "ticks: ", "accepted");
    assert!(accepted >= 500, "accepted ticks: {accepted}");
    assert!(field(&out, "term ends: ", "resign") >= 20, "resignations");
    let lost = ["lost_expired", "lost_taken", "lost_other"]
        .iter()
        .map(|name| field(&out, "term ends: ", name))
        .sum::<u64>();
    assert!(lost >= 1, "no term was lost");
    assert!(field(&out, "faults: ", "wpause") >= 2, "worker pauses");
    assert!(field(&out, "faults: ", "wkill") >= 1, "worker kills");
    assert!(number(&out, "faults: ") >= 8, "faults");
    let drawn = format!(
        "timeline written to {}: {terms} bars for {terms} holds (0 not drawn)",
        svg.display()
    );
    assert!(out.contains(&drawn), "{drawn}");
    let picture = std::fs::read_to_string(&svg).expect("the timeline");
    // Each term's bar has a tooltip `pPtT term on KEY, token N: ...`.
    let terms_drawn = picture.matches(" term on e").count() as u64;
    assert_eq!(terms_drawn, terms, "a bar per term");
}
