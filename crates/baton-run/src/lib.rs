//! Running commands under baton locks, and holding locks for scripts.
//!
//! [`run()`] is `baton run --lock ...`: acquire every lock in canonical order,
//! run the command supervised (own process group, signals forwarded, timeout),
//! release, optionally inside a concurrency [`group`] (queue, supersede,
//! coalesce, skip) whose lifecycle is logged to [`events`]. [`hold`] is `baton lock acquire/release/break`: a background
//! holder process for scripts that cannot wrap a command.
//!
//! ## Platforms
//!
//! Linux, macOS and Windows; this crate calls no platform API itself (what
//! it needs is in baton-fs, baton-proc and baton-lock). What differs:
//!
//! - **Supersede**: a newer run of a group wakes an older one through a
//!   doorbell (`baton_ipc::doorbell`): an abstract socket on Linux, a
//!   named event of the logon session on Windows, a socket file in
//!   `<baton dir>/bells` on macOS (which has no abstract sockets).
//! - **Event log**: `flock` on unix, on Windows a `LockFileEx` lock on one
//!   byte beyond the data; `--follow` waits with inotify on Linux and looks
//!   again every 100 ms on macOS and Windows (`baton_fs::shared_log`).
//! - **`lock release`** asks the background holder with `SIGUSR1` on unix;
//!   Windows has no signals, and the release is refused, saying so.
//!   **`lock break`** stops the script a hold was taken for with its
//!   process tree on unix, its process alone on Windows.
//! - **`lock acquire`'s caller**: walking past command-substitution
//!   subshells and wrappers reads `/proc` on Linux and asks `proc_pidinfo`
//!   on macOS (`baton_ipc::lineage`); on Windows the caller is the parent
//!   process.
//! - **A run's command dies with a killed `baton run`** by the parent-death
//!   signal on Linux, the Job Object on Windows, and a guardian on macOS
//!   ([`Backend::guard`]).
//! - **A run's command** is recorded as its process group (leader start
//!   time, session) on unix, as its process (creation time) on Windows,
//!   where its tree is in a Job Object that dies with the run.

#![forbid(unsafe_code)]
// Without PostgreSQL the baton dir is the one place of locks and groups:
// a match on it has one arm.
#![cfg_attr(not(feature = "postgres"), allow(irrefutable_let_patterns))]

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
mod push_queue;
mod run;

#[cfg(feature = "postgres")]
pub use backend::{diagnose_database, DiagnoseError, Diagnosis};
pub use backend::{Backend, Migrated};
pub use control::{RunControl, StopReason};
pub use error::RunError;
pub use group::{GroupEvent, GroupMode, GroupRequest, Order, OrderKind, RunState};
pub use group_status::GroupStatus;
pub use locks::HeldLocks;
pub use run::{command_line, run, OnStart, RunReport, RunRequest};
