//! Fresh PostgreSQL databases for the tests that use the machine's server
//! (127.0.0.1:5432, user postgres, trust auth): each test creates its own
//! database with a random name and drops it when it ends, passed or not
//! (the approach of `crates/baton-cli/tests/pg_common`). PostgreSQL being
//! unreachable fails the tests loudly.
//!
//! Create and drop a `TestDb` outside any async runtime: it runs its
//! statements on a runtime of its own.

use std::sync::atomic::{AtomicU32, Ordering};

/// Runs `sql` (one or more statements) on the admin database `test`.
pub fn admin(sql: &str) {
    let conn = "host=127.0.0.1 port=5432 user=postgres dbname=test connect_timeout=5";
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (client, connection) = tokio_postgres::connect(conn, tokio_postgres::NoTls)
            .await
            .unwrap_or_else(|e| {
                panic!("PostgreSQL must run at 127.0.0.1:5432 (user postgres) for these tests: {e}")
            });
        let driver = tokio::spawn(connection);
        client
            .batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        drop(client);
        let _ = driver.await;
    });
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
}

impl Drop for TestDb {
    fn drop(&mut self) {
        admin(&format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        ));
    }
}
