//! The `baton` command: argument parsing, dispatch to the library crates,
//! and output. It has no logic of its own and no stable Rust API: it is a
//! library only so that tests can reach the command-line definitions
//! ([`command`]) that `--help`, the man pages and the completions come from,
//! and so that its two binaries share it: `baton` ([`main`]) and
//! `baton-service` ([`service_main`]), which `baton` executes for `serve`
//! and `job` so that the job service's code stays out of the binary every
//! `baton run` starts.

#[macro_use]
mod say;

mod cli;
mod commands;
mod docs;
mod doctor;
mod doctor_backend;
mod duration;
mod exit_codes;
mod git_cli;
mod job_cli;
mod logging;
mod output;
mod serve_process;
mod service;
mod startup;
mod state_cli;

pub use commands::{main, service_main};
pub use startup::main_without_runtime;

/// The clap definition of the whole command line, every subcommand included.
pub fn command() -> clap::Command {
    <cli::Cli as clap::CommandFactory>::command()
}
