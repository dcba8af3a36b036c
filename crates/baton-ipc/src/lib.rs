//! Processes that call on each other, for `baton run` and the background
//! holder of `baton lock acquire`:
//!
//! - [`doorbell`]: a process wakes a thread of another (or of itself) by a
//!   name, without a signal (a group's runs ring the one that must look at
//!   the group again);
//! - [`ask_to_exit`]: asking a process that is not our child to let go and
//!   exit by itself (`SIGUSR1` on unix; on Windows a doorbell the process
//!   listens on with `on_exit_request`), then waiting for it to exit;
//! - [`lineage`]: how a process came to be (a fork of its parent that has
//!   not executed another program, whose output its parent reads), which
//!   `baton lock acquire` needs to find the script it was called from.
//!
//! Processes are pinned and identified by `baton-proc` (a pid reused by
//! another process is never rung, asked or taken for the one meant).
//!
//! # Layout
//!
//! Modules import only from modules below them: `sys` (the platform seam:
//! every call that differs between Linux, macOS and Windows) at the bottom;
//! `doorbell` and `lineage` over it; `ask` (which rings a doorbell on
//! Windows) over those; then this root.

#![deny(unsafe_code)]

mod ask;
pub mod doorbell;
pub mod lineage;
mod sys;

#[cfg(windows)]
pub use ask::on_exit_request;
pub use ask::{ask_to_exit, Asked};
