//! A short run of the whole harness (fixed seed, both modes, about 40 s):
//! no violations, and faults, bodies and multi-key calls did happen.

use std::collections::BTreeSet;
use std::process::Command;

/// The numbers after `label` on each summary line starting with it.
fn numbers(out: &str, label: &str) -> Vec<u64> {
    out.lines()
        .filter_map(|l| l.strip_prefix(label))
        .filter_map(|rest| rest.split([':', ' ']).find(|s| !s.is_empty())?.parse().ok())
        .collect()
}

/// The values of `name=` on the summary lines starting with `label`.
fn field(out: &str, label: &str, name: &str) -> Vec<u64> {
    out.lines()
        .filter_map(|l| l.strip_prefix(label))
        .filter_map(|l| {
            l.split_whitespace()
                .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('=')?.parse().ok())
        })
        .collect()
}

#[test]
fn short_run_both_modes() {
    let output = Command::new(env!("CARGO_BIN_EXE_lock-chaos"))
        .args(["--seconds", "36", "--mode", "both", "--seed", "7"])
        .output()
        .expect("run lock-chaos");
    let out = String::from_utf8_lossy(&output.stdout);
    println!("{out}");
    eprintln!("{}", String::from_utf8_lossy(&output.stderr));

    let bodies = numbers(&out, "bodies: ");
    assert_eq!(bodies.len(), 2, "a summary per mode");
    assert!(
        bodies.iter().all(|&n| n > 100),
        "bodies per mode: {bodies:?}"
    );
    let faults = numbers(&out, "faults: ");
    assert!(
        faults.iter().all(|&n| n >= 5),
        "faults per mode: {faults:?}"
    );
    let kinds: BTreeSet<&str> = out
        .lines()
        .filter_map(|l| l.strip_prefix("faults: "))
        .flat_map(|l| l.split_whitespace().skip(1))
        .filter_map(|kv| kv.split('=').next())
        .collect();
    assert!(kinds.len() >= 6, "fault kinds seen: {kinds:?}");
    // The multi-key move (10 % of the operations), on both modes.
    let sets = numbers(&out, "multi-key calls: ");
    assert!(
        sets.len() == 2 && sets.iter().all(|&n| n >= 10),
        "multi-key calls per mode: {sets:?}"
    );
    let entered: u64 = ["ok", "body_err"]
        .iter()
        .flat_map(|name| field(&out, "multi-key calls: ", name))
        .sum();
    assert!(entered >= 2, "multi-key calls that entered: {entered}");
    let violations = numbers(&out, "violations: ");
    assert_eq!(violations, vec![0, 0], "violations per mode (seed 7)");
    assert!(output.status.success());
}
