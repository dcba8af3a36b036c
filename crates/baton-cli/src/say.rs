//! Printing that never panics. `println!` and `eprintln!` panic when the
//! write fails (stdout on a full disk, stderr closed or on `/dev/full`),
//! which turned any exit code, a `run`'s 75 or the command's own, into
//! Rust's 101. Here a failed write to stderr is dropped (there is nowhere to
//! report it), and a failed write to stdout is kept and reported once when
//! the command ends ([`finish`]): the output the caller asked for was lost.
//!
//! Also the one way errors ([`fail`]) and `--json` documents
//! ([`print_json`]) are printed. A leaf: every command module prints through
//! it, and it depends on nothing of the crate but the exit codes.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use serde::Serialize;

use crate::exit_codes::BATON_FAILED;

/// The first failed write to stdout, if any.
static STDOUT_ERROR: Mutex<Option<std::io::Error>> = Mutex::new(None);

/// Whether warnings are silenced (`-q`).
static QUIET: AtomicBool = AtomicBool::new(false);

/// Silences warnings (`-q`/`--quiet`): errors are still printed.
pub(crate) fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

/// Prints a warning line on stderr, unless `-q` silenced warnings.
pub(crate) fn warn_line(args: std::fmt::Arguments<'_>) {
    if !QUIET.load(Ordering::Relaxed) {
        err_line(args);
    }
}

/// Whether the command's change was made (see [`committed`]).
static COMMITTED: AtomicBool = AtomicBool::new(false);

/// Marks the command's change as made (a release, a state edit): from now
/// on, output that cannot be written no longer fails the command, because a
/// caller that retried on the failure would make the change twice. The loss
/// is said on stderr instead.
pub(crate) fn committed() {
    COMMITTED.store(true, Ordering::Relaxed);
}

/// Flushes stdout and says whether everything written so far reached it;
/// the error, if any, is taken (not reported again by [`finish`]).
pub(crate) fn delivered() -> Result<(), std::io::Error> {
    if let Err(e) = std::io::stdout().flush() {
        remember(e);
    }
    match STDOUT_ERROR
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take()
    {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Writes one line to stdout (see [`outln!`]).
pub(crate) fn out_line(args: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args).and_then(|()| out.write_all(b"\n")) {
        remember(e);
    }
}

/// Writes one line to stderr (see [`errln!`]); a failure is ignored.
pub(crate) fn err_line(args: std::fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr().lock(), "{args}");
}

fn remember(e: std::io::Error) {
    let mut first = STDOUT_ERROR.lock().unwrap_or_else(|p| p.into_inner());
    first.get_or_insert(e);
}

/// The exit code of a command that ended with `code`: stdout is flushed,
/// and if any output was lost a command that succeeded fails (exit 125,
/// with the reason on stderr), as `cat` or `ls` do on a full disk; unless
/// its change was made ([`committed`]): then the code stays.
pub(crate) fn finish(code: u8) -> u8 {
    match delivered() {
        Err(e) if COMMITTED.load(Ordering::Relaxed) => {
            err_line(format_args!(
                "baton: the change was made, but its report could not be written to stdout: {e}"
            ));
            code
        }
        Err(e) if code == 0 => {
            err_line(format_args!(
                "baton: cannot write the output to stdout: {e}"
            ));
            BATON_FAILED
        }
        _ => code,
    }
}

/// Prints an error and its causes on one line; returns `code`.
pub(crate) fn fail(e: &dyn std::error::Error, code: u8) -> u8 {
    err_line(format_args!("baton: {}", baton_lock::one_line(e)));
    code
}

/// How a `--json` document is laid out.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    /// Indented, for reports (`lock status`, `workspace list`, ...).
    Pretty,
    /// One line, for values that scripts pipe on (`state get`, `state edit`).
    Line,
}

/// The one JSON printer of the CLI; returns the exit code.
pub(crate) fn print_json<T: Serialize + ?Sized>(value: &T) -> u8 {
    write_json(value, Layout::Pretty)
}

/// Prints `value` as JSON laid out as asked; returns the exit code.
pub(crate) fn write_json<T: Serialize + ?Sized>(value: &T, layout: Layout) -> u8 {
    let text = match layout {
        Layout::Pretty => serde_json::to_string_pretty(value),
        Layout::Line => serde_json::to_string(value),
    };
    match text {
        Ok(s) => {
            out_line(format_args!("{s}"));
            0
        }
        Err(e) => {
            err_line(format_args!("baton: cannot encode JSON: {e}"));
            BATON_FAILED
        }
    }
}

/// `println!` that does not panic: see the module documentation.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::say::out_line(format_args!($($arg)*))
    };
}

/// A `baton: warning: ...` line on stderr, unless `-q` was given.
macro_rules! warnln {
    ($($arg:tt)*) => {
        $crate::say::warn_line(format_args!($($arg)*))
    };
}

/// `eprintln!` that does not panic: see the module documentation.
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::say::err_line(format_args!($($arg)*))
    };
}
