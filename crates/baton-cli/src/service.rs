//! `baton serve`, `baton job` and `baton mcp` live in the `baton-service` binary, which
//! `baton` executes with the same arguments: the job service's code (tokio,
//! axum, SQLite, the HTTP client) is then not part of the binary that starts
//! for every `baton run`, `baton state` and `baton lock` (a 10 MB binary with
//! 7763 relocations shrinks to about half; bench/README.md, "Where the time
//! goes"). On Windows, which cannot replace a process, `baton.exe` runs
//! `baton-service.exe` as its supervised command (a Job Object: it ends
//! with `baton.exe`; Ctrl-C and Ctrl-Break reach it) and exits with its code.

use crate::exit_codes::BATON_FAILED;

/// The name of the binary that carries out `serve`, `job` and `mcp`, installed next
/// to `baton` (`cargo install --path crates/baton-cli` installs both).
pub(crate) const SERVICE_BINARY: &str = "baton-service";

/// Replaces this process with `baton-service` and the same arguments; returns
/// (an exit code) only if that cannot be done, after saying why.
#[cfg(unix)]
pub(crate) fn exec_service() -> u8 {
    use std::os::unix::process::CommandExt;
    let path = match std::env::current_exe() {
        Ok(me) => me.with_file_name(SERVICE_BINARY),
        Err(e) => {
            errln!("baton: cannot find where baton is installed, to start {SERVICE_BINARY}: {e}");
            return BATON_FAILED;
        }
    };
    let e = std::process::Command::new(&path)
        .arg0("baton")
        .args(std::env::args_os().skip(1))
        .exec();
    errln!(
        "baton: cannot start {} (it carries out `baton serve`, `baton job` and `baton mcp`): {e}; install it next to baton (`cargo install --path crates/baton-cli` installs both)",
        path.display()
    );
    BATON_FAILED
}

/// Runs `baton-service.exe` with the same arguments, supervised (see the
/// module's documentation); returns its exit code, or says why it could
/// not run.
#[cfg(windows)]
pub(crate) fn exec_service() -> u8 {
    let path = match std::env::current_exe() {
        Ok(me) => me.with_file_name(format!("{SERVICE_BINARY}.exe")),
        Err(e) => {
            errln!("baton: cannot find where baton is installed, to start {SERVICE_BINARY}: {e}");
            return BATON_FAILED;
        }
    };
    let mut spec = baton_proc::RunSpec::new(path.as_os_str());
    spec.args = std::env::args_os().skip(1).collect();
    spec.forward_signals = true;
    match baton_proc::run(&spec) {
        Ok(outcome) => u8::try_from(outcome.exit_code()).unwrap_or(BATON_FAILED),
        Err(e) => {
            errln!(
                "baton: cannot start {} (it carries out `baton serve`, `baton job` and `baton mcp`): {e}; install it next to baton (`cargo install --path crates/baton-cli` installs both)",
                path.display()
            );
            BATON_FAILED
        }
    }
}
