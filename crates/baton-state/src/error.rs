//! Typed errors of state-file operations.

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use baton_lock::LockError;

use crate::version::Version;

/// Everything that can go wrong when reading or changing a state file.
///
/// An edit or append that returns one of these changed nothing, so it may
/// be repeated, except for two variants, which say that the change was
/// (or may have been) made: [`StateError::NotDurable`] and
/// [`StateError::PartlyAppended`]; [`StateError::changed`] tells them
/// apart. (A torn line moved to `FILE.torn` before a failure stays there;
/// moving it again later is harmless.)
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// The path names no file: it is empty or ends in `/`, `.` or `..`.
    #[error("'{}' does not name a file", path.display())]
    NoFileName {
        /// The path as given.
        path: PathBuf,
    },
    /// The path exists but is a directory, a device, a FIFO or a socket.
    #[error("'{}' is {what}, not a regular file", path.display())]
    NotAFile {
        /// The path.
        path: PathBuf,
        /// What it is instead (`a directory`, `a FIFO`, ...).
        what: &'static str,
    },
    /// The path is a symbolic link whose target is in another directory.
    #[error("'{}' is a symbolic link to '{}', outside its directory; name the target itself", path.display(), target.display())]
    SymlinkOutside {
        /// The link.
        path: PathBuf,
        /// Where it points.
        target: PathBuf,
    },
    /// A chain of symbolic links that does not end within a few hops.
    #[error("'{}' is a chain of too many symbolic links", path.display())]
    SymlinkLoop {
        /// The first link.
        path: PathBuf,
    },
    /// The new content of a `.json` file does not parse as one JSON value.
    #[error("refusing to write '{}': the new content is not valid JSON", path.display())]
    InvalidJson {
        /// The state file.
        path: PathBuf,
        /// What the parser found.
        #[source]
        source: serde_json::Error,
    },
    /// An existing `.json` file does not parse (when its content is asked for as JSON).
    #[error("'{}' does not contain valid JSON", path.display())]
    CorruptJson {
        /// The state file.
        path: PathBuf,
        /// What the parser found.
        #[source]
        source: serde_json::Error,
    },
    /// A file asked for as one JSON string (`baton state get --json`) is not
    /// UTF-8, so no JSON string holds its content exactly.
    #[error("'{}' is not UTF-8 text (byte {offset} starts an invalid sequence), so its content cannot be one exact JSON string; read it without --json", path.display())]
    NotUtf8 {
        /// The state file.
        path: PathBuf,
        /// The offset of the first byte that is not part of valid UTF-8.
        offset: usize,
    },
    /// A line of the new content of a `.jsonl` file is not one JSON value.
    #[error("refusing to write '{}': line {line} of the new content is not one JSON value", path.display())]
    InvalidJsonLine {
        /// The state file.
        path: PathBuf,
        /// The offending line, counted from 1.
        line: usize,
        /// What the parser found.
        #[source]
        source: serde_json::Error,
    },
    /// A record to append is not acceptable; nothing was appended.
    #[error("refusing to append to '{}': record {record} {reason}", path.display())]
    InvalidRecord {
        /// The state file.
        path: PathBuf,
        /// The offending record, counted from 1.
        record: usize,
        /// Why it is refused.
        reason: &'static str,
        /// The parser's complaint, for records that are not JSON.
        #[source]
        source: Option<serde_json::Error>,
    },
    /// An append to a `.json` file, whose whole content is one JSON value:
    /// a line after it (or the repair of its last line, which need not end
    /// in a newline) would break it. Nothing was written.
    #[error("refusing to append to '{}': a .json file is one JSON document, not lines; change it with `baton state edit` (or use a .jsonl file)", path.display())]
    AppendToJson {
        /// The state file.
        path: PathBuf,
    },
    /// An edit or append of a file from inside the filter of an edit of
    /// that same file (through the edit's hold): the filter's output would
    /// overwrite the change. Nothing was written.
    #[error("refusing to change '{}' from the filter that is editing it: the filter's output would overwrite the change (print the new content instead)", path.display())]
    InsideOwnFilter {
        /// The state file.
        path: PathBuf,
    },
    /// A compare-and-swap failed: the file changed since the expected version.
    #[error("'{}' has changed: its version is {actual}, not {expected}; nothing written", path.display())]
    VersionMismatch {
        /// The state file.
        path: PathBuf,
        /// The version the caller expected.
        expected: Version,
        /// The version found under the lock.
        actual: Version,
    },
    /// A version string that is neither `absent` nor 16 hex digits.
    #[error("invalid version {given:?}: expected 16 hex digits or 'absent', as printed by `baton state get --json`")]
    InvalidVersion {
        /// The rejected text.
        given: String,
    },
    /// No filter command was given.
    #[error("no filter command given")]
    NoFilter,
    /// The filter ran and failed (non-zero exit or killed by a signal); nothing was written.
    #[error("filter '{}' {}; '{}' unchanged", program.to_string_lossy(), describe_exit(*code, *signal), path.display())]
    FilterFailed {
        /// The filter program.
        program: OsString,
        /// The state file.
        path: PathBuf,
        /// The exit code to pass on: the filter's own, or 128+N if killed by signal N.
        code: i32,
        /// The signal that killed the filter, if one did.
        signal: Option<i32>,
    },
    /// The filter ran longer than its [timeout](crate::Filter::timeout)
    /// and its process group was stopped; nothing was written.
    #[error("filter '{}' timed out after {}; '{}' unchanged", program.to_string_lossy(), humantime::format_duration(*timeout), path.display())]
    FilterTimedOut {
        /// The filter program.
        program: OsString,
        /// The state file.
        path: PathBuf,
        /// The timeout it exceeded.
        timeout: std::time::Duration,
    },
    /// The filter printed more than its cap ([`Filter::max_output`](crate::Filter::max_output)),
    /// and its process group was stopped; nothing was written.
    #[error("refusing to write '{}': the output of filter '{}' passed {max} bytes, the most allowed (--max-output); the filter was stopped, the file is unchanged", path.display(), program.to_string_lossy())]
    FilterOutputTooLarge {
        /// The filter program.
        program: OsString,
        /// The state file.
        path: PathBuf,
        /// The cap, in bytes.
        max: u64,
    },
    /// The filter program does not exist.
    #[error("filter '{}' not found", program.to_string_lossy())]
    FilterNotFound {
        /// The filter program.
        program: OsString,
        /// The error from starting it.
        #[source]
        source: io::Error,
    },
    /// The filter program exists but cannot be executed.
    #[error("filter '{}' cannot be executed", program.to_string_lossy())]
    FilterNotExecutable {
        /// The filter program.
        program: OsString,
        /// The error from starting it.
        #[source]
        source: io::Error,
    },
    /// The change was made (readers see it), but flushing it to disk failed,
    /// so a crash of the machine may still undo it. Repeating the change
    /// without a compare-and-swap may apply it twice: check the file first.
    #[error("'{}' was changed, but its durability is unknown (check it before repeating the change): {op} '{}'", file.display(), path.display())]
    NotDurable {
        /// The state file.
        file: PathBuf,
        /// What failed (`cannot flush`, `cannot flush directory`).
        op: &'static str,
        /// The path it failed on: the file or its directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// Writing an append's records failed part-way, and the bytes written
    /// could not be cut off again: the file may end in some of the records,
    /// the last of them torn. Check the file before repeating the append.
    #[error("appending to '{}' failed part-way ({cause}) and the {written} bytes written could not be cut off, so some records may be in the file (check it before repeating the append)", path.display())]
    PartlyAppended {
        /// The state file.
        path: PathBuf,
        /// How many bytes of the records the file had gained.
        written: u64,
        /// Why the write failed.
        cause: io::Error,
        /// Why cutting them off failed.
        #[source]
        source: io::Error,
    },
    /// Taking or releasing the lock failed (busy, bad name, unsafe baton dir, ...).
    #[error(transparent)]
    Lock(#[from] LockError),
    /// An I/O error, with what was being done and the path it concerns.
    #[error(transparent)]
    Io(#[from] baton_fs::PathError),
}

impl StateError {
    /// Whether the file was (or may have been) changed despite the error:
    /// [`StateError::NotDurable`] and [`StateError::PartlyAppended`]. Any
    /// other error left the file's content as it was.
    pub fn changed(&self) -> bool {
        matches!(
            self,
            StateError::NotDurable { .. } | StateError::PartlyAppended { .. }
        )
    }

    /// An I/O error that came after the change to `file` was made: it
    /// becomes [`StateError::NotDurable`].
    pub(crate) fn after_change(self, file: &Path) -> StateError {
        match self {
            StateError::Io(e) => StateError::NotDurable {
                file: file.to_path_buf(),
                op: e.op,
                path: e.path,
                source: e.source,
            },
            other => other,
        }
    }
}

fn describe_exit(code: i32, signal: Option<i32>) -> String {
    match signal {
        Some(sig) => format!("was killed by signal {sig}"),
        None => format!("exited with status {code}"),
    }
}

/// The error of [`edit`](crate::edit) and [`edit_locked`](crate::edit_locked):
/// either the state machinery failed or the caller's edit function returned
/// an error. Nothing was written, except after
/// [`StateError::NotDurable`] (see [`StateError::changed`]).
#[derive(Debug, thiserror::Error)]
pub enum EditError<E> {
    /// Locking, reading, validating or writing failed.
    #[error(transparent)]
    State(#[from] StateError),
    /// The edit function returned this error.
    #[error("{0}")]
    Aborted(E),
}

impl FromStr for Version {
    type Err = StateError;

    /// Accepts `absent` or 16 hex digits (either case).
    fn from_str(s: &str) -> Result<Version, StateError> {
        Version::parse(s).ok_or_else(|| StateError::InvalidVersion {
            given: s.to_string(),
        })
    }
}
