//! The job store of the baton job service: where jobs live between their
//! submission and their eviction.
//!
//! - [`Store`]: the operations the service needs, each one atomic step (a
//!   transaction), so two callers in the same millisecond never both claim
//!   a job or both take the last place in the queue; with [`StoreError`],
//!   [`StoreEvent`], [`Settle`], [`Recovered`] and the other answers.
//! - [`model`]: the jobs as the store keeps them ([`NewJob`], [`Job`],
//!   [`Finish`], ...).
//! - [`StoreUrl`]: the store setting (`sqlite://PATH`, `postgres://...`),
//!   parsed once.
//! - `suite` (feature `suite`): the behaviour every driver must have,
//!   written once and run by each driver crate's tests ([`store_suite!`]).
//!
//! The drivers are crates of their own, so that a program links only the
//! engines it uses: `baton-store-sqlite` and `baton-store-pg`. This crate
//! links neither.
//!
//! Design (the claim protocol, durability per promise): see
//! `docs/src/design/service.md` in baton's repository.

pub mod model;
mod store;
#[cfg(feature = "suite")]
pub mod suite;
mod url;

pub use model::{
    now_ms, outranks, rfc3339, Counts, Finish, GroupMode, Job, JobStatus, ListFilter, NewJob,
    NodeInfo, RecordedGroup, Submitted,
};
pub use store::{CancelQueued, Recovered, RemoveFinished, Settle, Store, StoreError, StoreEvent};
pub use url::StoreUrl;
