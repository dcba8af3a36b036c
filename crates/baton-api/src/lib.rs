//! The wire model of the baton job service (`baton serve`): every type a
//! request or a response of `/v1/jobs` carries, in one place, so that the
//! server, its client (`baton-client`) and the `baton job` command cannot
//! drift apart. Serde types only: no I/O, no runtime.
//!
//! - [`JobStatus`], [`Mode`]: where a job is, and how it joins its group
//!   (the same modes as `baton run --group`: `baton-run` re-exports [`Mode`]).
//! - [`SubmitRequest`] (`POST /v1/jobs`) and its answer [`Queued`].
//! - [`JobView`] (a job as the service shows it) and [`JobList`] (a page of
//!   `GET /v1/jobs`, asked for with a [`ListQuery`]).
//! - [`ErrorBody`]: every refusal, `{"error": {"code", "message"}}`.
//!
//! Adding a field to a job: add it to [`JobView`] here, to the stores'
//! schemas and to the code that sets it; every other part of the service,
//! the client and the CLI's `--json` pass it through. The CLI's `--json`
//! contract (`baton_contract::json`) lists the fields of a job, and the
//! OpenAPI document (`baton-serve`'s `openapi.json`) describes them: both
//! are tested against this type.
//!
//! Requests carry a few fields as the client wrote them (`mode`, `timeout`,
//! a list's `status`): the server checks them in its own order and names the
//! field and the accepted values when one is wrong.

#![forbid(unsafe_code)]

mod error;
mod job;
mod mode;
mod request;
mod status;

pub use error::{ErrorBody, ErrorDetail};
pub use job::{JobList, JobView, Queued};
pub use mode::Mode;
pub use request::{ListQuery, SubmitRequest, WorkspaceOptions};
pub use status::JobStatus;
