//! `baton state ...`: crash-safe state files (syntax and output only; the
//! work is done by `baton_state`).

use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::Duration;

use baton_lock::{BatonDir, LockName};
use baton_state::{
    append, edit_with_filter, get, Appended, Edited, Filter, Options, StateError, Version,
};
use clap::{Args, Subcommand};
use serde::Serialize;

use crate::args::{lock_name, WaitArgs};
use crate::duration::parse_positive_duration;
use crate::exit_codes::{
    for_child, for_lock_error, BATON_FAILED, CHANGED_NOT_DURABLE, NOT_ACQUIRED, NOT_EXECUTABLE,
    NOT_FOUND, TIMED_OUT,
};
use crate::say::{fail, write_json, Layout};
use crate::size::parse_size;

fn version(s: &str) -> Result<Version, String> {
    s.parse().map_err(|e: StateError| e.to_string())
}

/// Which lock guards the file, and how long to wait for it.
#[derive(Debug, Args)]
pub struct LockArgs {
    /// Take this lock instead of the file's own (`state/<canonical path>`); every writer of
    /// the file must name the same lock. One lock may cover several files.
    #[arg(long, value_name = "NAME", value_parser = lock_name)]
    pub lock: Option<LockName>,

    #[command(flatten)]
    pub wait: WaitArgs,
}

/// `baton state ...` commands.
#[derive(Debug, Subcommand)]
pub enum StateCommand {
    /// Change a file atomically under its lock: FILTER reads the content, its output replaces it.
    #[command(after_help = "Examples:
  baton state edit counter.json -- jq '.n += 1'
  baton state edit tasks.json --lock memory -- python3 ./mark_done.py t1
  baton state edit notes.md -- sed 's/TODO/DONE/'
  V=$(baton state get tasks.json --json | jq -r .version)
  baton state edit tasks.json --if-version \"$V\" -- jq '.t1 = \"done\"'   # compare-and-swap

Under the lock, FILTER gets the current content on stdin (nothing if the file does not exist).
If it exits 0, its stdout replaces the file: temp file in the same directory, fsync, rename,
fsync of the directory; permissions and group (owner too, as root) are kept. A .json file's
new content must be one JSON value and a .jsonl file's every line one JSON value, else
nothing is written (exit 125).
Temp files left by writers killed mid-edit are removed. FILTER gets BATON_STATE_FILE,
BATON_LOCK and BATON_FENCING_TOKEN in its environment; it may change other files under
that lock (`baton state append log.jsonl --lock \"$BATON_LOCK\" ...`), not its own file.

Exit status: 0 when written (or unchanged); FILTER's own if it failed (128+N if killed by
signal N), nothing written; 74 written, but flushing it failed (durability unknown: check
the file before editing again without --if-version); 75 if --if-version no longer matches or
the lock was busy (--no-wait, --wait); 125 bad input (a directory, a symlink leaving its
directory, unreadable, read-only), invalid new content or an I/O error, nothing written;
124 FILTER ran past --filter-timeout and was killed with its process group, nothing
written; 126 / 127 FILTER not executable / not found. FILTER's output is the new content, held
in memory: past --max-output its process group is stopped (TERM, 10s, KILL), nothing is
written, exit 125.")]
    Edit {
        /// The state file (created if missing).
        file: PathBuf,

        #[command(flatten)]
        lock: LockArgs,

        /// Compare-and-swap: write only if the file's version is still V (from `get --json`;
        /// `absent` for a file that must not exist yet), else exit 75.
        #[arg(long, value_name = "V", value_parser = version)]
        if_version: Option<Version>,

        /// Print JSON {path, previous, version, changed} on success.
        #[arg(long)]
        json: bool,

        /// Kill FILTER's whole process group if it runs longer than this (TERM, 10s, KILL);
        /// nothing is written, exit 124.
        #[arg(long, value_name = "DURATION", value_parser = parse_positive_duration, allow_hyphen_values = true)]
        filter_timeout: Option<Duration>,

        /// The most FILTER may print (B, KiB, MiB, GiB): past it, FILTER's whole process group is
        /// stopped and nothing is written, exit 125.
        #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value = "256MiB")]
        max_output: u64,

        /// The filter and its arguments, after `--`.
        #[arg(last = true, required = true, value_name = "FILTER")]
        filter: Vec<OsString>,
    },

    /// Append whole lines under the file's lock; a torn last line is moved to FILE.torn first.
    #[command(after_help = "Examples:
  baton state append events.jsonl '{\"event\":\"started\",\"task\":\"t1\"}'
  printf '%s\\n' '{\"a\":1}' '{\"b\":2}' | baton state append events.jsonl
  baton state append session.log \"$(date -Is) step 3 done\"

Each record is written with its trailing newline; all records of one call are checked first
and written with one write, then fsynced: all of them or, if the write fails (disk full, file
size limit), none. A record must not contain a newline, and in a
.jsonl file must be one JSON value, else nothing is appended (exit 125). A .json file is one
JSON document, not lines: appending to it is refused (exit 125; use `state edit`). If the file ends in
a torn line (a writer died mid-append), those bytes are appended to FILE.torn and the file
is cut back to its last complete line before the new records are written. A .jsonl file's
last line that is one whole JSON record (not a bare number) only missing its newline is not
torn: it is kept, and the newline written first.

Exit status: 0 appended; 74 appended, but flushing failed (durability unknown), or the
write failed part-way and could not be undone: check the file before appending again
without --if-version; 75 lock busy (--no-wait, --wait) or
--if-version no longer matches; 125 bad input or I/O error, nothing appended.")]
    Append {
        /// The state file (created if missing).
        file: PathBuf,

        /// The record; without it, each line of standard input is one record.
        record: Option<OsString>,

        #[command(flatten)]
        lock: LockArgs,

        /// Compare-and-swap: append only if the file's version is still V, else exit 75.
        #[arg(long, value_name = "V", value_parser = version)]
        if_version: Option<Version>,
    },

    /// Print a state file as of one instant (never half-written), or its version and content.
    #[command(after_help = "Examples:
  baton state get tasks.json
  baton state get tasks.json --json | jq -r .version

Reads under a shared lock. Without --json the content is printed as is (nothing for a
missing file). With --json one line {\"version\":...,\"content\":...}: version is 16 hex
digits of the content's SHA-256, or \"absent\"; content is the parsed value of a .json file,
a string for any other file, null for a missing file. A .jsonl file's torn last line, if
any, is left out. Exact or refused: with --json, a file that is not UTF-8 exits 125 naming
the offset of its first bad byte (without --json its bytes are printed as they are).")]
    Get {
        /// The state file.
        file: PathBuf,

        /// Print {version, content} as JSON.
        #[arg(long)]
        json: bool,

        #[command(flatten)]
        lock: LockArgs,
    },
}

/// Runs a `baton state` command; returns the exit code.
pub(crate) fn cmd_state(dir: &BatonDir, cmd: StateCommand) -> u8 {
    match cmd {
        StateCommand::Edit {
            file,
            lock,
            if_version,
            json,
            filter_timeout,
            max_output,
            filter,
        } => {
            let filter = match Filter::new(&filter) {
                // A signal that stops baton stops the filter's whole group.
                Ok(f) => match filter_timeout {
                    Some(t) => f.timeout(t),
                    None => f,
                }
                .max_output(max_output)
                .forward_signals(true),
                Err(e) => return fail(&e, BATON_FAILED),
            };
            // This process runs one filter: a process that leaves the
            // filter's group (and may hold its output open) comes back to
            // it, and is stopped when the filter ends, as for `baton run`.
            #[cfg(unix)]
            if let Err(e) = baton_proc::become_subreaper() {
                warnln!("baton: warning: {e}; processes that leave the filter's process group are not contained");
            }
            let mut opts = options(lock);
            opts.if_version = if_version;
            match edit_with_filter(dir, &file, &opts, &filter) {
                Ok(edited) => {
                    crate::say::committed();
                    print_edited(&edited, json)
                }
                Err(e) => fail(&e, code(&e)),
            }
        }
        StateCommand::Append {
            file,
            record,
            lock,
            if_version,
        } => {
            let mut opts = options(lock);
            opts.if_version = if_version;
            let result = match record {
                Some(r) => append(dir, &file, &opts, &[r.as_encoded_bytes()]),
                None => {
                    let mut input = Vec::new();
                    if let Err(e) = std::io::stdin().lock().read_to_end(&mut input) {
                        return fail(&e, BATON_FAILED);
                    }
                    let body = input.strip_suffix(b"\n").unwrap_or(&input);
                    let records: Vec<&[u8]> = if input.is_empty() {
                        Vec::new()
                    } else {
                        body.split(|&b| b == b'\n').collect()
                    };
                    append(dir, &file, &opts, &records)
                }
            };
            match result {
                Ok(appended) => {
                    note_torn(&appended);
                    0
                }
                Err(e) => fail(&e, code(&e)),
            }
        }
        StateCommand::Get { file, json, lock } => {
            // Only for `get`: an edit must survive a filter that closes its input early.
            crate::startup::restore_default_sigpipe();
            let snap = match get(dir, &file, &options(lock)) {
                Ok(s) => s,
                Err(e) => return fail(&e, code(&e)),
            };
            if !json {
                let mut out = std::io::stdout().lock();
                let written = out
                    .write_all(snap.content.as_deref().unwrap_or_default())
                    .and_then(|()| out.flush());
                return match written {
                    Ok(()) => 0,
                    Err(e) => {
                        errln!("baton: cannot write the output to stdout: {e}");
                        BATON_FAILED
                    }
                };
            }
            match snap.content_json() {
                Ok(content) => print_json(&GetJson {
                    version: snap.version.as_str(),
                    content,
                }),
                Err(e) => fail(&e, code(&e)),
            }
        }
    }
}

/// `baton state get --json`: a state file's content and its version.
#[derive(Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub(crate) struct GetJson<'a> {
    /// The content's version (16 hex digits, `absent` when the file does
    /// not exist): pass it to `state edit --if-version` to change the file
    /// only if nobody changed it since.
    version: &'a str,
    /// The content: the document of a JSON file, the text of a `.jsonl` or
    /// text file (a `.jsonl` file's complete lines only); `null` when the
    /// file does not exist.
    content: serde_json::Value,
}

/// `baton state edit --json`: what an edit did.
#[derive(Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub(crate) struct EditJson<'a> {
    /// The real file edited (symbolic links resolved).
    path: &'a std::path::Path,
    /// The version before the edit.
    previous: &'a str,
    /// The version after the edit (the same as `previous` when nothing changed).
    version: &'a str,
    /// Whether the file was replaced: `false` when the command printed the
    /// content the file already had.
    changed: bool,
}

fn print_edited(e: &Edited, json: bool) -> u8 {
    if let Some(t) = &e.torn {
        note_torn_bytes(t.bytes, &e.path, &t.saved_to);
    }
    if !json {
        return 0;
    }
    print_json(&EditJson {
        path: &e.path,
        previous: e.previous.as_str(),
        version: e.version.as_str(),
        changed: e.changed,
    })
}

fn note_torn(a: &Appended) {
    if let Some(t) = &a.torn {
        note_torn_bytes(t.bytes, &a.path, &t.saved_to);
    }
}

fn note_torn_bytes(bytes: u64, path: &std::path::Path, saved_to: &std::path::Path) {
    errln!(
        "baton: '{}' ended in a torn line; moved its {bytes} bytes to '{}'",
        path.display(),
        saved_to.display()
    );
}

fn print_json<T: Serialize>(value: &T) -> u8 {
    write_json(value, Layout::Line)
}

fn options(lock: LockArgs) -> Options {
    let mut opts = Options::new();
    opts.lock = lock.lock;
    opts.wait = lock.wait.into();
    opts
}

/// The exit code for a failed state command (docs/src/design/architecture.md, "Exit codes").
fn code(e: &StateError) -> u8 {
    match e {
        StateError::Lock(l) => for_lock_error(l),
        StateError::VersionMismatch { .. } => NOT_ACQUIRED,
        StateError::FilterFailed { code, .. } => for_child(*code),
        StateError::FilterNotFound { .. } => NOT_FOUND,
        StateError::FilterNotExecutable { .. } => NOT_EXECUTABLE,
        StateError::FilterTimedOut { .. } => TIMED_OUT,
        e if e.changed() => CHANGED_NOT_DURABLE,
        _ => BATON_FAILED,
    }
}
