//! The `baton` binary: parses arguments, calls the libraries, prints results.

mod cli;
mod commands;
mod duration;
mod exit_codes;
mod git_cli;
mod output;
mod state_cli;

fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(commands::main())
}
