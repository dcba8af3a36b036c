#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! The PostgreSQL store's tests, in one test binary: the driver suite
//! (`baton_store::suite`, one test per exercise, each on a fresh database
//! at 127.0.0.1:5432 that it drops when it ends), and what only this
//! store has: its sessions, its schema's history, its kept depth. Each
//! file is a module (the crate sets `autotests = false`).

mod depth;
mod liveness;
mod schema;

use std::any::Any;
use std::path::Path;

use baton_store::suite::{self, Driver, Opening};
use baton_store::{Store, StoreError, StoreUrl};
use baton_store_pg::PgStore;
use baton_testkit::pg::TestDb;

/// The PostgreSQL driver, on a fresh database per test.
struct Postgres;

impl Driver for Postgres {
    fn fresh(&self, _tmp: &Path) -> (StoreUrl, Box<dyn Any>) {
        let db = TestDb::new();
        (StoreUrl::Postgres(db.url()), Box::new(db))
    }

    fn open<'a>(&'a self, url: &'a StoreUrl, baton_dir: &'a Path) -> Opening<'a> {
        Box::pin(open(url, baton_dir))
    }
}

/// Opens `url` as the node of `baton_dir`, as the service does.
async fn open(url: &StoreUrl, baton_dir: &Path) -> Result<Box<dyn Store>, StoreError> {
    let StoreUrl::Postgres(pg) = url else {
        panic!("not a PostgreSQL store: {url}");
    };
    let open_error = |message: String| StoreError::Open {
        url: url.to_string(),
        message,
    };
    let node = baton_store_pg::node_id(baton_dir).map_err(open_error)?;
    Ok(Box::new(PgStore::open(pg, node).await.map_err(open_error)?))
}

baton_store::store_suite!(&Postgres);

/// A test of an exercise of this store's own.
macro_rules! own {
    ($($module:ident :: $name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                suite::run(&Postgres, |ctx| Box::pin($module::$name(ctx)));
            }
        )*
    };
}

own!(
    liveness::a_node_claims_only_while_its_own_session_holds_its_lock,
    depth::a_database_without_the_kept_depth_gets_it_counted,
    depth::a_truncated_queue_leaves_no_depth_behind,
);

#[test]
fn every_test_file_is_declared_here() {
    baton_testkit::assert_test_files_declared(env!("CARGO_MANIFEST_DIR"));
}
