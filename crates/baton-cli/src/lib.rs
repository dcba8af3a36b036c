//! The `baton` command: argument parsing, dispatch to the library crates,
//! and output. It has no logic of its own and no stable Rust API: it is a
//! library only so that tests can reach the command-line definitions
//! ([`command`]) that `--help`, the man pages and the completions come from,
//! and `doctor`'s judgements with an injected filesystem probe ([`seams`]),
//! and so that its two binaries share it: `baton` ([`main`]) and
//! `baton-service` ([`service_main`]), which `baton` executes for `serve`
//! and `job` so that the job service's code stays out of the binary every
//! `baton run` starts.
//!
//! # Layout
//!
//! Modules only import modules below them in this list (no circles):
//!
//! - `app`: one invocation — the guardian's dispatch, the parse, the
//!   diagnostics, the baton dir and the backend — then `commands`.
//! - `cli`: the whole command tree (global options, the fast parse of the
//!   per-step commands), gathered from `commands`.
//! - `commands`: the top-level `Command` and the match that hands it to one
//!   module per command family (`commands/run.rs`, `lock.rs`, `group.rs`,
//!   `state.rs`, `workspace.rs`, `git.rs`, `job.rs`, `serve.rs`, `doctor.rs`, `docs.rs`,
//!   `init.rs`, `db.rs`; `hold.rs` is the background holder `lock acquire`
//!   starts), each owning its arguments and its handler. A family uses
//!   another only for its arguments (`run --workspace` takes
//!   `workspace::RunWorkspaceArgs`) or, for `lock`, its holder.
//! - Leaves, which import no module above: `args` (argument types several
//!   commands share, and their conversion into library policies), `say`
//!   (output that never panics, `--json`, one-line errors), `exit_codes`,
//!   `filesystem` (the network filesystem warning), `logging`, `startup`,
//!   `duration`, `service` (executing `baton-service`).
//!
//! The one arrow up: [`main_without_runtime`] hands [`main`] to `startup`.
//!
//! # Platforms
//!
//! The same commands on Linux, macOS (type-checked only) and Windows. What
//! the command itself does differently on Windows (the libraries' own
//! differences are in their docs): `baton.exe` has a normal `main` (the
//! unix start-up of `startup` skips Rust's and ignores SIGPIPE; Windows has
//! neither need); `serve` and `job` run `baton-service.exe` as a supervised
//! command instead of replacing the process; `baton serve` ends on Ctrl-C
//! or Ctrl-Break; the background holder of `lock acquire` leaves the
//! caller's console, takes `lock release` as an exit request (a named
//! event, `baton_ipc::on_exit_request`) instead of SIGUSR1, and watches
//! its caller and its requester through process handles
//! (`commands/hold/windows.rs`); `doctor` says that permissions are ACLs
//! and that there are no PID namespaces. The integration tests that use
//! `sh` or signals are unix; `tests/windows.rs` checks the real
//! `baton.exe` under wine.

#![deny(unsafe_code)]

#[macro_use]
mod say;

mod app;
mod args;
mod cli;
mod commands;
mod duration;
mod exit_codes;
mod filesystem;
mod logging;
mod serve_process;
mod service;
mod size;
// The start-up without Rust's runtime: `poll` and `signal` through libc
// (the SAFETY comments there say why each call is sound).
#[allow(unsafe_code)]
mod startup;

#[cfg(feature = "schema")]
#[doc(hidden)]
pub mod schema;

use commands::Services;

/// The `baton` command: runs the CLI and returns the process exit code;
/// `serve` and `job` are handed to the `baton-service` binary next to it.
pub fn main() -> u8 {
    say::finish(app::run_cli(&Services {
        serve: |_, _| service::exec_service(),
        job: |_| service::exec_service(),
        mcp: |_, _, _, _| service::exec_service(),
    }))
}

/// The `baton-service` command: the whole CLI, `serve` and `job` included.
pub fn service_main() -> u8 {
    say::finish(app::run_cli(&Services {
        serve: commands::serve::cmd_serve,
        job: commands::job::run,
        mcp: commands::mcp::cmd_mcp,
    }))
}

/// [`main`] in a process that Rust's runtime did not start (the `baton`
/// binary is `no_main` on unix): see `startup`.
#[cfg(unix)]
pub fn main_without_runtime() -> u8 {
    startup::without_runtime(main)
}

/// Seams for tests in process: the judgements of `baton doctor` and of the
/// network filesystem warning of `run` and `lock acquire`, with the probe
/// that finds a path's filesystem given, so that a network or FUSE
/// filesystem can be named without mounting one. The binary always uses the
/// kernel's answer (`baton_lock::filesystem`).
#[doc(hidden)]
pub mod seams {
    pub use crate::commands::doctor::{doctor, Doctor};
    pub use crate::filesystem::{remote_warning, FsProbe};
}

/// The clap definition of the whole command line, every subcommand included.
pub fn command() -> clap::Command {
    <cli::Cli as clap::CommandFactory>::command()
}
