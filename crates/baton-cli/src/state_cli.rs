//! `baton state ...`: crash-safe state files (syntax and output only).

use baton_lock::BatonDir;
use clap::Subcommand;

/// `baton state ...` commands.
#[derive(Debug, Subcommand)]
pub enum StateCommand {
    /// Print a state file and its version.
    Get {
        /// The file.
        file: std::path::PathBuf,
    },
}

/// Runs a `baton state` command; returns the exit code.
pub fn run(_dir: &BatonDir, _cmd: StateCommand) -> u8 {
    crate::exit_codes::BATON_FAILED
}
