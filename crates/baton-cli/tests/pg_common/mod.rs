//! Fresh PostgreSQL databases for the tests that use the machine's server
//! (127.0.0.1:5432, user postgres, trust auth): each test creates its own
//! database with a random name and drops it when it ends, passed or not.
//! PostgreSQL being unreachable fails the tests loudly.

#![allow(dead_code)] // each test file uses a different subset
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test

use std::sync::atomic::{AtomicU32, Ordering};

/// The admin connection (the `test` database).
pub const ADMIN: &str = "host=127.0.0.1 port=5432 user=postgres dbname=test connect_timeout=5";

/// Runs `sql` (one or more statements) on the admin database.
pub fn admin(sql: &str) {
    query_in("test", sql);
}

/// Runs `sql` on database `dbname` as postgres; returns the rows of its
/// last statement, each column as text (`None` for NULL).
pub fn query_in(dbname: &str, sql: &str) -> Vec<Vec<Option<String>>> {
    let conn = format!("host=127.0.0.1 port=5432 user=postgres dbname={dbname} connect_timeout=5");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (client, connection) = tokio_postgres::connect(&conn, tokio_postgres::NoTls)
            .await
            .unwrap_or_else(|e| {
                panic!("PostgreSQL must run at 127.0.0.1:5432 (user postgres) for these tests: {e}")
            });
        let driver = tokio::spawn(connection);
        let messages = client
            .simple_query(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        let mut rows = Vec::new();
        for m in messages {
            match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => {
                    rows.push((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
                }
                tokio_postgres::SimpleQueryMessage::CommandComplete(_) => {}
                _ => {}
            }
        }
        drop(client);
        let _ = driver.await;
        rows
    })
}

/// A fresh database, dropped when the test ends (passed or not).
pub struct TestDb {
    pub name: String,
}

impl TestDb {
    pub fn new() -> TestDb {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let seq = SEQ.fetch_add(1, Ordering::SeqCst);
        let name = format!("baton_test_{}_{seq}_{nanos:09}", std::process::id());
        admin(&format!("CREATE DATABASE {name}"));
        TestDb { name }
    }

    /// `postgres://postgres@127.0.0.1:5432/<name>`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:5432/{}", self.name)
    }

    /// Runs `sql` in this database as postgres (see [`query_in`]).
    pub fn query(&self, sql: &str) -> Vec<Vec<Option<String>>> {
        query_in(&self.name, sql)
    }

    /// The first column of the first row of `sql`, as text.
    pub fn scalar(&self, sql: &str) -> Option<String> {
        self.query(sql)
            .into_iter()
            .next()
            .and_then(|r| r.into_iter().next().flatten())
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        admin(&format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        ));
    }
}

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
