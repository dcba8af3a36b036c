//! Fresh PostgreSQL databases for the tests that use the machine's server
//! (127.0.0.1:5432, user postgres, trust auth): each test creates its own
//! database with a random name and drops it when it ends, passed or not
//! (the approach of `crates/baton-cli/tests/pg_common`). PostgreSQL being
//! unreachable fails the tests loudly.
//!
//! Create and drop a `TestDb` outside any async runtime: it runs its
//! statements on a runtime of its own.

pub use baton_testkit::pg::TestDb;
