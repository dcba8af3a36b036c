#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
//! Fresh PostgreSQL databases for the tests that use the machine's server
//! (127.0.0.1:5432, user postgres, trust auth): each test creates its own
//! database with a random name and drops it when it ends, passed or not.
//! PostgreSQL being unreachable fails the tests loudly.

#![allow(dead_code, unused_imports)] // each test file uses a different subset
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test

pub use baton_testkit::pg::{admin, query_in, TestDb};

/// The lines of a file (none when it does not exist yet).
pub fn lines(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Whether process `pid` runs (a zombie does not).
pub fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, r)| r.trim_start().starts_with('Z'))
        })
        .is_some_and(|zombie| !zombie)
}
