//! The integration tests of baton-proc, in one test binary (one link instead of
//! 4, on a 2-core CI): each file is a module. A new test file must be
//! declared here (the crate sets `autotests = false`).
//!
//! `run`, `signals` and `start` are Linux tests (they read `/proc`, use
//! pidfds and `sh`); `windows` runs under Windows (and wine).

#[cfg(target_os = "linux")]
mod common;
#[cfg(target_os = "linux")]
mod run;
#[cfg(target_os = "linux")]
mod signals;
#[cfg(target_os = "linux")]
mod start;
#[cfg(windows)]
mod windows;

#[test]
fn every_test_file_is_declared_here() {
    baton_testkit::assert_test_files_declared(env!("CARGO_MANIFEST_DIR"));
}
