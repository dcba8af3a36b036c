//! The integration tests of baton-run, in one test binary (one link instead of
//! 2, on a 2-core CI): each file is a module. A new test file must be
//! declared here (the crate sets `autotests = false`).

mod events_follow;
mod events_rotation;
#[cfg(unix)] // sh scripts; windows.rs has these tests with Windows processes
mod runs;
#[cfg(windows)]
mod windows;

#[test]
fn every_test_file_is_declared_here() {
    baton_testkit::assert_test_files_declared(env!("CARGO_MANIFEST_DIR"));
}
