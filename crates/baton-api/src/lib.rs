//! The wire model of the baton job service (`baton serve`): every type a
//! request or a response of `/v1/jobs` carries, in one place, so that the
//! server, its client (`baton-client`) and the `baton job` command cannot
//! drift apart. Serde types only: no I/O, no runtime.
//!
//! - [`JobStatus`], [`GroupMode`]: where a job is, and how it joins its group
//!   (the same modes as `baton run --group`: `baton-run` re-exports [`GroupMode`]).
//! - [`SubmitRequest`] (`POST /v1/jobs`) and its answer [`Queued`].
//! - [`JobView`] (a job as the service shows it) and [`JobList`] (a page of
//!   `GET /v1/jobs`, asked for with a [`ListQuery`]).
//! - [`Order`]: a group run's or a job's ordering key (`--order`, `order`).
//! - [`ErrorBody`]: every refusal, `{"error": {"code", "message"}}`.
//! - [`contract`]: the `--json` contract of `baton job`'s outputs, read
//!   from these types.
//!
//! Requests carry a few fields as the client wrote them (`mode`, `timeout`,
//! a list's `status`): the server checks them in its own order and names the
//! field and the accepted values when one is wrong.
//!
//! # Adding a field to a job
//!
//! A field the service stores and shows touches three places:
//!
//! 1. **This crate**: the field on [`JobView`]; one a client sends goes on
//!    [`SubmitRequest`] too.
//! 2. **The store schemas** (`baton-store` and its drivers): the field on
//!    `model::Job` (on `model::NewJob` when it comes with the submission)
//!    and its line in `From<&Job> for JobView` (`baton-store`'s
//!    `model.rs`); in each store its column, all in one file:
//!    `baton-store-sqlite`'s `sqlite.rs` (`SCHEMA`, `SCHEMA_VERSION` + 1 and
//!    its `ALTER TABLE` step, `COLUMNS`, `job_from_row`, and `submit_one`'s
//!    `INSERT` for a submitted field) and `baton-store-pg`'s `pg_sql.rs` (a
//!    `SCHEMA_V<n>` step in `migrate`, `COLUMNS`, `job_from_row`;
//!    `pg_submit.rs`'s `INSERT` for a submitted field). `waiter` was added so (schema 2 of
//!    both stores), and `reset_branch` (submitted) and `abandoned_ref` (set
//!    with the job's workspace, `Store::set_workspace`): schema 3 of SQLite,
//!    5 of PostgreSQL.
//! 3. **The place that sets or uses it**: a submitted field is resolved
//!    in `baton-serve`'s `api::resolve` (and sent by `baton job submit`,
//!    `baton-cli`'s `commands/job.rs`, if the CLI is to set it); one the
//!    service sets is written by the store operation that changes the job.
//!
//! Nothing else describes a job's fields: the `--json` contract of `baton
//! job` ([`contract`]), the JSON Schemas of `schemas/` (`cargo run -p
//! baton-schema` regenerates them; a test fails until it is done) and the
//! service's OpenAPI document (`baton-serve`'s `openapi`; its checked-in
//! copy, `docs/src/reference/openapi.json`, is rewritten by
//! `BATON_BLESS=1 cargo nextest run -p baton the_checked_in_document`) are
//! all read from [`JobView`]. The compiler names the struct literals to
//! complete (test fixtures). Nothing else changes: `baton-client`, `baton
//! job ... --json`, the dashboard and the compatibility routes pass a
//! [`JobView`] through whole.

#![forbid(unsafe_code)]

pub mod contract;
mod error;
mod job;
mod mode;
mod order;
mod request;
mod status;

pub use error::{ErrorBody, ErrorDetail};
pub use job::{JobList, JobView, Queued};
pub use mode::GroupMode;
pub use order::{Order, OrderError, OrderKind};
pub use request::{ListQuery, SubmitRequest, WorkspaceOptions};
pub use status::JobStatus;
