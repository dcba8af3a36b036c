//! The `baton` binary: everything is in the library part of this crate.

fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(baton::main())
}
