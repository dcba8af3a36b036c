//! The integration tests of baton-lock, in one test binary (one link instead
//! of 3): each file is a module. A new test file must be declared here (the
//! crate sets `autotests = false`).
//!
//! `locks` and `previous` run on every platform (under wine too; one test of
//! `locks` is Linux-only); `windows` holds what only Windows promises.

mod locks;
mod previous;
mod reserve;
mod windows;

#[test]
fn every_test_file_is_declared_here() {
    baton_testkit::assert_test_files_declared(env!("CARGO_MANIFEST_DIR"));
}
