//! The shared job store of the baton job service: PostgreSQL, for several
//! `baton serve` nodes that are one service ([`PgStore`], a
//! [`baton_store::Store`]).
//!
//! - `postgres.rs`: the store and its claims;
//! - `pg_pool.rs`: pooled connections within the operation limit, which
//!   every file below uses;
//! - `pg_sql.rs`: the schema, its migration, and the SQL steps the
//!   operations share;
//! - `pg_batch.rs`, `pg_submit.rs`: group commit of the bookkeeping and of
//!   submissions;
//! - `pg_session.rs`: a node's liveness session; `pg_reap.rs`: takeover of
//!   dead nodes' jobs.
//!
//! Design: see `docs/src/design/postgres.md` in baton's repository. The
//! driver test suite (`baton_store::suite`) runs on it in this crate's
//! tests, on the PostgreSQL at 127.0.0.1:5432.

// Its events keep the target they had when the store was a module of the
// service (`BATON_LOG=baton_serve::store=debug`), whatever file they come from.

mod pg_batch;
mod pg_pool;
mod pg_reap;
mod pg_session;
mod pg_sql;
mod pg_submit;
mod postgres;

pub use pg_session::node_id;
pub use postgres::PgStore;
