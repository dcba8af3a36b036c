//! The `baton-service` binary: the whole `baton` command line, `baton serve`
//! and `baton job` included. `baton` executes it for those two commands, so
//! that the job service's code stays out of the binary every `baton run`
//! starts.

#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(baton::service_main())
}
