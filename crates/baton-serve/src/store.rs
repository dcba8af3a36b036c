//! Where jobs live: the job store's trait and types (`baton_store`), its
//! drivers (`baton_store_sqlite`, and `baton_store_pg` with the feature
//! `postgres`), and the one place that opens a store from its URL
//! ([`open`]).
//!
//! Design (the claim protocol, durability per promise): see `docs/src/design/service.md`.

use std::path::Path;

pub use baton_store::{
    CancelQueued, Recovered, RemoveFinished, Settle, Store, StoreError, StoreEvent, StoreUrl,
};
#[cfg(feature = "postgres")]
pub use baton_store_pg::PgStore;
pub use baton_store_sqlite::SqliteStore;

/// How long a node of a store several nodes share may go without proving
/// that its session lives before its jobs' guardians stop them
/// (`baton_pg::FENCE`). Without the feature `postgres` no store is shared,
/// and nothing is fenced (zero).
pub const FENCE: std::time::Duration = {
    #[cfg(feature = "postgres")]
    let fence = baton_pg::FENCE;
    #[cfg(not(feature = "postgres"))]
    let fence = std::time::Duration::ZERO;
    fence
};

/// Why a PostgreSQL store is refused by a service built without the
/// feature `postgres`.
#[cfg(not(feature = "postgres"))]
pub const WITHOUT_POSTGRES: &str = "this baton was built without PostgreSQL support";

/// Opens the store `url` names: SQLite (a relative path is taken from the
/// baton dir) or PostgreSQL (TLS as the URL's `sslmode` says). For
/// PostgreSQL this connects,
/// migrates the schema and establishes this node's session before
/// returning.
///
/// # Errors
///
/// [`StoreError::Open`]: the store cannot be opened (or, built without the
/// feature `postgres`, is a PostgreSQL one).
pub async fn open(url: &StoreUrl, baton_dir: &Path) -> Result<Box<dyn Store>, StoreError> {
    let open_error = |message: String| StoreError::Open {
        url: url.to_string(),
        message,
    };
    match url {
        StoreUrl::Sqlite(path) => {
            let path = baton_dir.join(path);
            Ok(Box::new(SqliteStore::open(&path).map_err(open_error)?))
        }
        #[cfg(feature = "postgres")]
        StoreUrl::Postgres(pg) => {
            let node = baton_store_pg::node_id(baton_dir).map_err(open_error)?;
            Ok(Box::new(PgStore::open(pg, node).await.map_err(open_error)?))
        }
        #[cfg(not(feature = "postgres"))]
        StoreUrl::Postgres(_) => Err(open_error(WITHOUT_POSTGRES.to_string())),
    }
}
