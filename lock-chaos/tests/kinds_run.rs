//! A short run of the kinds workload on one node (fixed seed, 30 s, about
//! 32 s): no violation of any rule, availability included, and faults,
//! every kind's successful calls, readers and permit holders side by side,
//! fair calls that waited together and multi-key calls on the read-write
//! keys (readers among them) did happen.

use std::process::Command;

/// The numbers after `label` on each summary line starting with it.
fn numbers(out: &str, label: &str) -> Vec<u64> {
    out.lines()
        .filter_map(|l| l.strip_prefix(label))
        .filter_map(|rest| rest.split([':', ' ']).find(|s| !s.is_empty())?.parse().ok())
        .collect()
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
fn short_kinds_run_on_one_node() {
    let output = Command::new(env!("CARGO_BIN_EXE_lock-chaos"))
        .args([
            "--seconds",
            "30",
            "--mode",
            "single",
            "--seed",
            "7",
            "--kinds",
        ])
        .output()
        .expect("run lock-chaos");
    let out = String::from_utf8_lossy(&output.stdout);
    println!("{out}");
    eprintln!("{}", String::from_utf8_lossy(&output.stderr));

    let rules = out
        .lines()
        .find_map(|l| l.strip_prefix("violations: "))
        .expect("the violations line");
    let by_rule: Vec<(&str, u64)> = rules
        .split(['(', ')', ','])
        .skip(1)
        .filter_map(|part| {
            let (name, n) = part.trim().rsplit_once(' ')?;
            Some((name, n.parse().ok()?))
        })
        .collect();
    assert_eq!(by_rule.len(), 11, "{rules}");
    for (name, n) in &by_rule {
        assert_eq!(*n, 0, "{name} violations (seed 7): {rules}");
    }
    let faults = numbers(&out, "faults: ");
    assert!(faults.iter().all(|&n| n >= 5), "faults: {faults:?}");
    for kind in ["read", "write", "plain", "permits:2", "permits:3", "fair"] {
        let ok = field(&out, &format!("kind {kind}: "), "ok");
        assert!(ok >= 10, "{kind}: {ok} calls ok");
    }
    assert_eq!(field(&out, "calls: ", "kind_mismatch"), 0);
    // Multi-key calls on the read-write keys, readers among them.
    let sets = numbers(&out, "multi-key calls: ");
    assert!(sets.len() == 1 && sets[0] >= 10, "multi-key calls {sets:?}");
    assert!(field(&out, "multi-key calls: ", "ok") >= 5);
    let read = out
        .lines()
        .find_map(|l| l.strip_prefix("multi-key sets: "))
        .and_then(|l| l.split(", ").find_map(|p| p.strip_prefix("read ")))
        .and_then(|n| n.parse::<u64>().ok());
    assert!(read.is_some_and(|n| n >= 5), "multi-key readers: {read:?}");
    let most = out
        .lines()
        .find_map(|l| l.strip_prefix("most inside at once: "))
        .expect("the most inside at once");
    for seen in ["p2 (permits:2) 2", "p3 (permits:3) 3"] {
        assert!(most.contains(seen), "{seen} in {most}");
    }
    let readers: Vec<u64> = most
        .split(", ")
        .filter(|s| s.contains("(read)"))
        .filter_map(|s| s.rsplit(' ').next()?.parse().ok())
        .collect();
    assert!(readers.iter().any(|&n| n >= 2), "readers together: {most}");
    let pairs = numbers(&out, "fair pairs that waited together: ");
    assert!(pairs.iter().all(|&n| n >= 5), "fair pairs: {pairs:?}");
    assert_eq!(output.status.code(), Some(0), "{:?}", output.status);
}
