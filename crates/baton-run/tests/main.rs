//! The integration tests of baton-run, in one test binary (one link instead of
//! 2, on a 2-core CI): each file is a module. A new test file must be
//! declared here (the crate sets `autotests = false`).

mod events_rotation;
mod runs;
