//! The error type of this crate and its exit codes.

use std::ffi::OsString;
use std::io;
use std::path::PathBuf;

/// Exit code for "the command was not found" (as in POSIX shells).
pub const EXIT_NOT_FOUND: i32 = baton_contract::exit::NOT_FOUND;
/// Exit code for "the command was found but could not be executed".
pub const EXIT_NOT_EXECUTABLE: i32 = baton_contract::exit::NOT_EXECUTABLE;
/// Exit code for "baton itself failed".
pub const EXIT_INTERNAL: i32 = baton_contract::exit::BATON_FAILED;

/// Why a child could not be run or supervised, or a process could not be terminated.
///
/// Once [`Supervisor::run`](crate::Supervisor::run) has started a child, it returns an error
/// only after it has killed and reaped that child, so an error never leaves a process behind.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProcError {
    /// The program does not exist (not on `PATH`, or the given path does not exist).
    #[error("command not found: {}", program.to_string_lossy())]
    NotFound {
        /// The program as given.
        program: OsString,
    },
    /// The program exists, but a file it needs to start does not: the interpreter named
    /// on its `#!` line, or the loader of an ELF binary (`execve` says "not found" for
    /// both). Exit code 127, as in POSIX shells.
    #[error("{}", missing_interpreter_message(program, path, interpreter.as_deref()))]
    InterpreterNotFound {
        /// The program as given.
        program: OsString,
        /// The file the program was found at.
        path: PathBuf,
        /// The interpreter from its `#!` line; `None` for a binary whose loader is missing.
        interpreter: Option<String>,
    },
    /// The program exists but could not be executed (no execute permission, a directory,
    /// or not a format the kernel can run).
    #[error("command cannot be executed: {}", program.to_string_lossy())]
    NotExecutable {
        /// The program as given.
        program: OsString,
        /// The error from `execve`.
        #[source]
        source: io::Error,
    },
    /// The child's working directory does not exist or cannot be entered.
    #[error("cannot use '{}' as the working directory of the command", path.display())]
    Cwd {
        /// The working directory from [`RunSpec::cwd`](crate::RunSpec::cwd).
        path: PathBuf,
        /// What went wrong with it.
        #[source]
        source: io::Error,
    },
    /// Starting the child failed for another reason (for example too many processes).
    #[error("could not start command {}", program.to_string_lossy())]
    Spawn {
        /// The program as given.
        program: OsString,
        /// The error from `fork`/`execve`.
        #[source]
        source: io::Error,
    },
    /// A pid that cannot name a single other process: zero, negative, or this process itself.
    #[error("refusing to signal pid {pid}: it does not name a single other process")]
    InvalidPid {
        /// The pid as given.
        pid: i32,
    },
    /// Sending a signal to a process failed (for example: it belongs to another user).
    #[error("could not send {signal} to process {pid}")]
    Signal {
        /// The target process.
        pid: i32,
        /// The signal's name, such as `SIGTERM`.
        signal: &'static str,
        /// The error from the kernel.
        #[source]
        source: io::Error,
    },
    /// What was asked cannot be had on this operating system (see
    /// `docs/src/design/signals.md`, "Platforms"): said instead of doing less than promised.
    #[error("{what} is not supported on {platform}")]
    Unsupported {
        /// What was asked, as a noun phrase ("becoming a child subreaper").
        what: &'static str,
        /// The operating system (`std::env::consts::OS`).
        platform: &'static str,
    },
    /// Another operating-system call failed while supervising.
    #[error("could not {op}")]
    Io {
        /// What was being done, as a verb phrase ("poll for child events").
        op: &'static str,
        /// The error from the kernel.
        #[source]
        source: io::Error,
    },
}

impl ProcError {
    /// The exit code `baton run` uses for this error: 127 for [`ProcError::NotFound`] and
    /// [`ProcError::InterpreterNotFound`], 126 for
    /// [`ProcError::NotExecutable`], 125 for everything else (baton itself failed).
    pub fn exit_code(&self) -> i32 {
        match self {
            ProcError::NotFound { .. } | ProcError::InterpreterNotFound { .. } => EXIT_NOT_FOUND,
            ProcError::NotExecutable { .. } => EXIT_NOT_EXECUTABLE,
            _ => EXIT_INTERNAL,
        }
    }

    #[cfg_attr(target_os = "linux", allow(dead_code))]
    pub(crate) fn unsupported(what: &'static str) -> Self {
        ProcError::Unsupported {
            what,
            platform: std::env::consts::OS,
        }
    }

    pub(crate) fn io(op: &'static str, source: impl Into<io::Error>) -> Self {
        ProcError::Io {
            op,
            source: source.into(),
        }
    }
}

fn missing_interpreter_message(
    program: &OsString,
    path: &std::path::Path,
    interpreter: Option<&str>,
) -> String {
    // One line whatever the names hold (a newline, a carriage return, ESC).
    let program = program.to_string_lossy().escape_debug().to_string();
    let at = if path.as_os_str() == program.as_str() {
        String::new()
    } else {
        format!(" (found at {})", path.to_string_lossy().escape_debug())
    };
    match interpreter {
        Some(i) if i.ends_with('\r') => format!(
            "cannot run {program}{at}: its interpreter '{}' (the #! line) was not found: the file has Windows (CRLF) line endings",
            i.escape_debug()
        ),
        Some(i) => format!(
            "cannot run {program}{at}: its interpreter '{}' (the #! line) was not found",
            i.escape_debug()
        ),
        None => format!(
            "cannot run {program}{at}: the file exists, but the loader or interpreter it needs was not found"
        ),
    }
}
