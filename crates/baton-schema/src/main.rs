//! `cargo run -p baton-schema`: rewrites `schemas/` from the types (refusing
//! a change that breaks readers without a new version); `--check` only
//! says what is out of date, and exits 1 if anything is.

use std::process::ExitCode;

fn main() -> ExitCode {
    let dir = baton_schema::schemas_dir();
    match std::env::args().nth(1).as_deref() {
        Some("--check") => {
            let problems = baton_schema::stale(&dir);
            for p in &problems {
                eprintln!("baton-schema: {p}");
            }
            if problems.is_empty() {
                ExitCode::SUCCESS
            } else {
                eprintln!("baton-schema: run `cargo run -p baton-schema` to regenerate");
                ExitCode::FAILURE
            }
        }
        None => match baton_schema::write(&dir) {
            Ok(written) => {
                for path in &written {
                    println!("wrote {}", path.display());
                }
                if written.is_empty() {
                    println!("{} is up to date", dir.display());
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("baton-schema: {e}");
                ExitCode::FAILURE
            }
        },
        Some(other) => {
            eprintln!("baton-schema: unknown argument {other:?} (usage: baton-schema [--check])");
            ExitCode::from(2)
        }
    }
}
