//! Pooled connections within the operation limit, and the errors of a
//! pool and of an operation the database did not answer in time: what the
//! store (`postgres.rs`) and its group commits (`pg_batch.rs`,
//! `pg_submit.rs`) and takeovers (`pg_reap.rs`) share.

use std::time::Duration;

use deadpool_postgres::Pool;

use baton_pg::one_line;
use baton_store::StoreError;

/// How long one store operation may take before it fails.
pub(crate) const OP_LIMIT: Duration = Duration::from_secs(10);

/// A connection of `pool`, within `OP_LIMIT`.
pub(crate) async fn pooled(
    pool: &Pool,
    op: &'static str,
) -> Result<deadpool_postgres::Object, StoreError> {
    match tokio::time::timeout(OP_LIMIT, pool.get()).await {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e)) => Err(StoreError::Query {
            op,
            message: pool_error(&e),
        }),
        Err(_) => Err(too_slow(op)),
    }
}

/// The error of `op` when the database did not answer within `OP_LIMIT`.
pub(crate) fn too_slow(op: &'static str) -> StoreError {
    StoreError::Query {
        op,
        message: "the database did not answer in time".into(),
    }
}

/// A pool's error in one line.
pub(crate) fn pool_error(e: &deadpool_postgres::PoolError) -> String {
    match e {
        deadpool_postgres::PoolError::Backend(e) => one_line(e),
        other => other.to_string(),
    }
}
