//! The embedded job store of the baton job service: one SQLite file in WAL
//! mode, for one node ([`SqliteStore`], a [`baton_store::Store`]).
//!
//! - `sqlite.rs`: the store, its schema and its operations.
//! - `sqlite_writes.rs`: group commit of the bookkeeping.
//! - `sqlite_files.rs`: its files under a running service (owner lock,
//!   replaced or removed files, a full disk), and `sqlite_rescue.rs`: what
//!   is kept of files removed under it.
//!
//! Design (durability per promise): see `docs/src/design/service.md` in
//! baton's repository. The driver test suite (`baton_store::suite`) runs on
//! it in this crate's tests.

// Its events keep the target they had when the store was a module of the
// service (`BATON_LOG=baton_serve::store=debug`), whatever file they come from.

mod sqlite;
mod sqlite_files;
mod sqlite_rescue;
mod sqlite_writes;

pub use sqlite::SqliteStore;

/// Only the service's user may open a file this creates (mode 0600).
#[cfg(unix)]
fn private_file(options: &mut std::fs::OpenOptions) -> &mut std::fs::OpenOptions {
    use std::os::unix::fs::OpenOptionsExt;
    options.mode(0o600)
}

/// The file inherits its directory's ACL (there are no mode bits).
#[cfg(windows)]
fn private_file(options: &mut std::fs::OpenOptions) -> &mut std::fs::OpenOptions {
    options
}
