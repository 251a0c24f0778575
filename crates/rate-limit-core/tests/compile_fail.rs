//! Scopes the compiler checks, locked in: each file under `compile_fail/`
//! is code that must never compile (a key passed to a rule limiter, a key
//! made from a bare number, a flow taken for a key). A change to the
//! limiters' handles that lets one compile fails this test.

#[test]
fn scopes_are_checked_by_the_compiler() {
    trybuild::TestCases::new().compile_fail("tests/compile_fail/*.rs");
}
