//! Short runs of the replicated modes (fixed seed, 30 s each, one after
//! the other, about 40 s each): no violations, and faults, bodies,
//! successful calls and multi-key calls (on Cluster, over one slot and over
//! several) did happen.

use std::process::Command;

/// The numbers after `label` on each summary line starting with it.
fn numbers(out: &str, label: &str) -> Vec<u64> {
    out.lines()
        .filter_map(|l| l.strip_prefix(label))
        .filter_map(|rest| rest.split([':', ' ']).find(|s| !s.is_empty())?.parse().ok())
        .collect()
}

/// Runs `mode` for 30 s with seed 7; its output.
fn run(mode: &str) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_lock-chaos"))
        .args(["--seconds", "30", "--mode", mode, "--seed", "7"])
        .output()
        .expect("run lock-chaos");
    let out = String::from_utf8_lossy(&output.stdout).into_owned();
    println!("{out}");
    eprintln!("{}", String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{mode}: exit {:?}", output.status);
    out
}

#[test]
fn short_runs_cluster_then_sentinel() {
    for mode in ["cluster", "sentinel"] {
        let out = run(mode);
        assert_eq!(numbers(&out, "violations: "), vec![0], "{mode}");
        let bodies = numbers(&out, "bodies: ");
        assert!(bodies.iter().all(|&n| n > 50), "{mode}: bodies {bodies:?}");
        let faults = numbers(&out, "faults: ");
        assert!(faults.iter().all(|&n| n >= 2), "{mode}: faults {faults:?}");
        assert!(
            out.contains("successful calls per window"),
            "{mode}: the windows"
        );
        let sets = numbers(&out, "multi-key calls: ");
        assert!(
            sets.len() == 1 && sets[0] >= 10,
            "{mode}: multi-key calls {sets:?}"
        );
        if mode == "cluster" {
            // `multi-key sets: 2 keys A, 3 keys B, read 0, one hash tag T`.
            let line = out
                .lines()
                .find_map(|l| l.strip_prefix("multi-key sets: "))
                .expect("the multi-key sets");
            let tagged: u64 = line
                .rsplit(' ')
                .next()
                .and_then(|n| n.parse().ok())
                .expect("one hash tag N");
            assert!(
                tagged >= 3 && tagged + 3 <= sets[0],
                "cluster: sets of one hash tag {tagged} of {}",
                sets[0]
            );
        }
    }
}
