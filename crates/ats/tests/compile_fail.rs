//! The safe layer's lifetime and thread promises, locked in: each file under
//! `compile_fail/` is code that must never compile (a dangling state or
//! header reference, a transaction reaching another thread). A change to
//! the safe layer that lets one compile fails this test.

#[test]
fn lifetime_and_thread_promises_hold() {
    trybuild::TestCases::new().compile_fail("tests/compile_fail/*.rs");
}
