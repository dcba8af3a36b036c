//! Fresh PostgreSQL databases for the tests that use the machine's server
//! (127.0.0.1:5432, user postgres, trust auth): each test creates its own
//! database with a random name and drops it when it ends, passed or not.
//! PostgreSQL being unreachable fails the tests loudly.
//!
//! Create and drop a [`TestDb`] outside any async runtime: every statement
//! runs on a runtime of its own.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test

use std::sync::atomic::{AtomicU32, Ordering};

/// Rows of a query, each column as text (`None` for NULL).
pub type Rows = Vec<Vec<Option<String>>>;

/// Runs `sql` (one or more statements) over the libpq-style `conninfo`,
/// without TLS; returns the rows of its last statement, or the error as
/// text.
pub fn try_query(conninfo: &str, sql: &str) -> Result<Rows, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        let (client, connection) = tokio_postgres::connect(conninfo, tokio_postgres::NoTls)
            .await
            .map_err(|e| e.to_string())?;
        let driver = tokio::spawn(connection);
        let messages = client.simple_query(sql).await.map_err(|e| e.to_string())?;
        let rows = messages
            .into_iter()
            .filter_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => {
                    Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
                }
                _ => None,
            })
            .collect();
        drop(client);
        let _ = driver.await;
        Ok(rows)
    })
}

/// Runs `sql` on database `dbname` of the machine's server as postgres;
/// panics (naming the statement) if it fails.
pub fn query_in(dbname: &str, sql: &str) -> Rows {
    let conn = format!("host=127.0.0.1 port=5432 user=postgres dbname={dbname} connect_timeout=5");
    try_query(&conn, sql).unwrap_or_else(|e| {
        panic!("{sql}: {e} (PostgreSQL must run at 127.0.0.1:5432, user postgres, for these tests)")
    })
}

/// Runs `sql` (one or more statements) on the admin database `test`.
pub fn admin(sql: &str) {
    query_in("test", sql);
}

/// A fresh database, dropped when the test ends (passed or not).
pub struct TestDb {
    /// Its name.
    pub name: String,
}

impl TestDb {
    /// Creates a database with a name no other test uses.
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
    pub fn query(&self, sql: &str) -> Rows {
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

impl Default for TestDb {
    fn default() -> TestDb {
        TestDb::new()
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
