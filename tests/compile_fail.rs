//! Mistakes in `#[distributed_lock]` are compile errors on the offending token.

#[test]
fn ui() {
    trybuild::TestCases::new().compile_fail("tests/ui/*.rs");
}
