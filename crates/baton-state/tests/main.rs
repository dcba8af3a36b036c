#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! The integration tests of baton-state, in one test binary: each file is a
//! module. A new test file must be declared here (the crate sets
//! `autotests = false`).
//!
//! `state` runs on every platform (under wine too; its few unix-only parts,
//! permission bits and `chattr`, are gated); `filters` holds the filter
//! tests written as `sh` scripts that look into `/proc` (unix);
//! `windows` what differs on Windows: filters run by `cmd.exe` and this
//! binary, the read-only attribute, replacing a file a reader has open,
//! and one lock for every spelling of a name.

mod common;
mod filters;
mod state;
mod windows;

#[test]
fn every_test_file_is_declared_here() {
    baton_testkit::assert_test_files_declared(env!("CARGO_MANIFEST_DIR"));
}
