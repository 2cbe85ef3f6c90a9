//! Mistakes in `#[distributed_lock]` are compile errors on the offending token.

use std::path::Path;
use std::process::Command;

#[test]
fn ui() {
    trybuild::TestCases::new().compile_fail("tests/ui/*.rs");
}

/// The cases of `tests/ui` whose error rustc can report twice.
const INCREMENTAL_CASES: [&str; 3] = [
    "error-without-from-lock-error",
    "error-without-from-lock-error-with-client",
    "error-with-other-from-impls",
];

/// An error type without `From<LockError>` is one error, with the message
/// that says what to implement, also in an incremental build (`cargo build`
/// and `cargo check` in a workspace are): rustc reported a second, generic
/// one there for a bound that the future's type carried, at the `.await`.
/// trybuild builds with `CARGO_INCREMENTAL=0`, which hides it, so these
/// cases are checked again here, as a crate of their own built
/// incrementally in `target/tests/incremental-ui`.
#[test]
fn a_missing_from_lock_error_is_one_error_in_an_incremental_build() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = root.join("target/tests/incremental-ui");
    std::fs::create_dir_all(&dir).expect("create the crate's directory");
    let mut manifest = format!(
        "[package]\nname = \"incremental-ui\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\
         publish = false\n\n[dependencies]\nlock-runtime = {{ path = {:?}, default-features = false }}\n\n[workspace]\n",
        root.join("lock-runtime")
    );
    for case in INCREMENTAL_CASES {
        let path = root.join(format!("tests/ui/{case}.rs"));
        manifest.push_str(&format!("\n[[bin]]\nname = {case:?}\npath = {path:?}\n"));
    }
    std::fs::write(dir.join("Cargo.toml"), manifest).expect("write Cargo.toml");
    // The workspace's versions, so that the build needs no registry; no
    // embedded backend (the cases do not use it), so no Lua to build.
    std::fs::copy(root.join("Cargo.lock"), dir.join("Cargo.lock")).expect("copy Cargo.lock");

    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .current_dir(&dir)
        .env("CARGO_INCREMENTAL", "1")
        .env("CARGO_TARGET_DIR", dir.join("target"))
        .args([
            "check",
            "--offline",
            "--bins",
            "--keep-going",
            "--color=never",
        ])
        .args(["--message-format=short"])
        .output()
        .expect("run cargo");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success(),
        "the cases must not compile:\n{stderr}"
    );
    for case in INCREMENTAL_CASES {
        let errors: Vec<&str> = stderr
            .lines()
            .filter(|line| line.contains(&format!("tests/ui/{case}.rs:")))
            .filter(|line| line.contains(": error"))
            .collect();
        assert_eq!(errors.len(), 1, "{case}: one error expected:\n{stderr}");
        assert!(
            errors[0].contains("cannot carry a lock failure"),
            "{case}: the message that says what to implement:\n{stderr}"
        );
    }
}
