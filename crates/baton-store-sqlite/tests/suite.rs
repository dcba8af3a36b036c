//! The driver suite (`baton_store::suite`) on SQLite: one test per
//! exercise, each on a fresh file in a directory of its own.

use std::any::Any;
use std::path::Path;

use baton_store::suite::{Driver, Opening};
use baton_store::{Store, StoreError, StoreUrl};
use baton_store_sqlite::SqliteStore;

/// The SQLite driver, on a fresh file per test.
struct Sqlite;

impl Driver for Sqlite {
    fn fresh(&self, tmp: &Path) -> (StoreUrl, Box<dyn Any>) {
        (StoreUrl::Sqlite(tmp.join("jobs.db")), Box::new(()))
    }

    fn open<'a>(&'a self, url: &'a StoreUrl, baton_dir: &'a Path) -> Opening<'a> {
        Box::pin(async move {
            let StoreUrl::Sqlite(path) = url else {
                panic!("not a SQLite store: {url}");
            };
            let store =
                SqliteStore::open(&baton_dir.join(path)).map_err(|message| StoreError::Open {
                    url: url.to_string(),
                    message,
                })?;
            Ok(Box::new(store) as Box<dyn Store>)
        })
    }
}

baton_store::store_suite!(&Sqlite);
