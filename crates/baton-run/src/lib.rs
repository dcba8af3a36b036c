//! Running commands under baton locks, and holding locks for scripts.
//!
//! [`run()`] is `baton run --lock ...`: acquire every lock in canonical order,
//! run the command supervised (own process group, signals forwarded, timeout),
//! release, optionally inside a concurrency [`group`] (queue, supersede,
//! coalesce, skip) whose lifecycle is logged to [`events`]. [`hold`] is `baton lock acquire/release/break`: a background
//! holder process for scripts that cannot wrap a command.

#![forbid(unsafe_code)]

mod backend;
mod control;
mod error;
pub mod events;
mod git_env;
pub mod group;
mod group_status;
pub mod hold;
mod inbox;
mod locks;
mod member;
mod run;

pub use backend::{diagnose_database, Backend, DiagnoseError, Diagnosis, Migrated};
pub use control::{RunControl, StopReason};
pub use error::RunError;
pub use group::{GroupEvent, GroupMode, GroupRequest, RunState};
pub use group_status::GroupStatus;
pub use locks::HeldLocks;
pub use run::{command_line, run, OnStart, RunReport, RunRequest};
