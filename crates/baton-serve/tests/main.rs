//! The integration tests of baton-serve, in one test binary (one link instead of
//! 3, on a 2-core CI): each file is a module. A new test file must be
//! declared here (the crate sets `autotests = false`).

mod entry_point;
// fdatasync under strace (Linux).
#[cfg(target_os = "linux")]
mod sync;
// Jobs run `sh` (entry_point.rs runs jobs on every platform).
#[cfg(unix)]
mod wire;

#[test]
fn every_test_file_is_declared_here() {
    baton_testkit::assert_test_files_declared(env!("CARGO_MANIFEST_DIR"));
}
