//! Running an external filter: current content on stdin, new content on stdout.

use std::ffi::{OsStr, OsString};
use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use baton_fs::IoResultExt;
use baton_lock::{CommandGroup, LockGuard};
use baton_proc::{Canceller, Outcome, ProcError, RunSpec, Streams, Supervisor, DEFAULT_GRACE};

use crate::error::StateError;

/// The variable that names the state file to its filter.
pub(crate) const STATE_FILE_VAR: &str = "BATON_STATE_FILE";

/// The most a filter may print unless [`Filter::max_output`] says otherwise:
/// 256 MiB. Its output is the new document, held in memory until it is
/// checked and written, so a filter that never stops writing (`yes`) must
/// not make the edit grow without bound.
pub const DEFAULT_MAX_OUTPUT: u64 = 256 << 20;

/// A command that turns a file's current content (its standard input) into
/// the new content (its standard output), like `jq '.n += 1'`,
/// `python3 -c ...` or `sed s/a/b/`.
///
/// Its standard error and working directory are inherited. It also gets
/// `BATON_STATE_FILE` (the real file's path) and, when run under a lock,
/// `BATON_LOCK` and `BATON_FENCING_TOKEN`. It may change other files under
/// that lock (`baton state append log.jsonl --lock "$BATON_LOCK"`): the
/// edit holds the lock as a supervisor of the filter (kind `run`), whose
/// descendants use its hold. A change to its own file from inside it is
/// refused ([`StateError::InsideOwnFilter`]): the filter's output would
/// overwrite it.
///
/// It is supervised like every child of baton (baton-proc): it leads its
/// own process group, dies with the baton process that runs it (even by
/// `SIGKILL`), and what it leaves running in its group when it exits is
/// terminated (`SIGTERM`, the [grace](Filter::grace), `SIGKILL`). With a
/// [timeout](Filter::timeout), its whole group is stopped the same way when
/// it runs longer, and nothing is written. Its output is capped
/// ([`max_output`](Filter::max_output)): when it prints more, its group is
/// stopped the same way and nothing is written. Its input is fed and its
/// output read at the same time, so a filter may write before it has read
/// everything.
///
/// Its process group is recorded with the lock it runs under, so that if
/// the process running it dies (even by `SIGKILL`), whoever takes the lock
/// next first terminates what is left of the group, as after a `baton run`
/// (docs/src/design/architecture.md, decision 11). A program that should pass its termination
/// signals on to the filter's whole group asks for it with
/// [`forward_signals`](Filter::forward_signals).
#[derive(Clone, Debug)]
pub struct Filter {
    program: OsString,
    args: Vec<OsString>,
    timeout: Option<Duration>,
    grace: Duration,
    forward_signals: bool,
    max_output: u64,
}

impl Filter {
    /// A filter from a command line: the program, then its arguments. No
    /// timeout; a grace period of [`DEFAULT_GRACE`]; output capped at
    /// [`DEFAULT_MAX_OUTPUT`].
    pub fn new<I, S>(argv: I) -> Result<Filter, StateError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut it = argv.into_iter().map(|s| s.as_ref().to_os_string());
        let program = it.next().ok_or(StateError::NoFilter)?;
        Ok(Filter {
            program,
            args: it.collect(),
            timeout: None,
            grace: DEFAULT_GRACE,
            forward_signals: false,
            max_output: DEFAULT_MAX_OUTPUT,
        })
    }

    /// Stops the filter's process group (`SIGTERM`, the grace, `SIGKILL`)
    /// as soon as it has printed more than `bytes`:
    /// [`StateError::FilterOutputTooLarge`], nothing written. What it
    /// prints past the cap is read and dropped, never kept.
    #[must_use]
    pub fn max_output(mut self, bytes: u64) -> Filter {
        self.max_output = bytes;
        self
    }

    /// Stops the filter's process group when it runs longer than `timeout`
    /// (measured from its start): [`StateError::FilterTimedOut`], nothing
    /// written.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Filter {
        self.timeout = Some(timeout);
        self
    }

    /// How long the filter's group gets between `SIGTERM` and `SIGKILL`, at
    /// a timeout and for what it left running.
    #[must_use]
    pub fn grace(mut self, grace: Duration) -> Filter {
        self.grace = grace;
        self
    }

    /// Passes `SIGINT`, `SIGTERM`, `SIGHUP` and `SIGQUIT` sent to this
    /// process on to the filter's whole process group while it runs (and
    /// hands it the terminal, as `baton run` does), so that stopping the
    /// caller stops everything the filter started. This installs
    /// process-wide signal handling for the duration of the run: for a
    /// program that runs one filter at a time (the `baton` CLI), not for a
    /// library or a service hosting many. Off by default.
    #[must_use]
    pub fn forward_signals(mut self, forward: bool) -> Filter {
        self.forward_signals = forward;
        self
    }

    /// The program.
    pub fn program(&self) -> &OsStr {
        &self.program
    }

    /// Runs the filter on `input` and returns what it printed, if it exited 0.
    /// `file` is the state file, for messages and `BATON_STATE_FILE`; `held`
    /// the lock it runs under, which records the filter's process group.
    pub(crate) fn run(
        &self,
        input: &[u8],
        file: &Path,
        held: &LockGuard,
        env: &[(&str, String)],
    ) -> Result<Vec<u8>, StateError> {
        let mut spec = RunSpec::new(&self.program).args(&self.args);
        spec.env
            .push((STATE_FILE_VAR.into(), file.as_os_str().to_owned()));
        for (k, v) in env {
            spec.env.push((k.into(), v.into()));
        }
        spec.timeout = self.timeout;
        spec.grace = self.grace;
        spec.forward_signals = self.forward_signals;
        let grace_ms = u64::try_from(self.grace.as_millis()).unwrap_or(u64::MAX);
        let mut output = Vec::new();
        let over = AtomicBool::new(false);
        let supervisor = Supervisor::new(spec);
        let capped = Capped {
            out: &mut output,
            max: self.max_output,
            over: &over,
            stop: supervisor.canceller(),
        };
        let streamed = supervisor
            .run_streaming(Streams::new().stdin(input).stdout(capped), |started| {
                // Best effort, as for `baton run`: a lock file that cannot
                // be updated only loses the clean-up after a crash.
                let _ = held.set_command_group(CommandGroup::of_started(started, grace_ms));
            })
            .map_err(|e| self.spawn_error(e, file))?;
        // Whatever the filter's end (stopped, or exited 0 just past the
        // cap), output past the cap is refused.
        if over.load(Ordering::SeqCst) {
            return Err(StateError::FilterOutputTooLarge {
                program: self.program.clone(),
                path: file.to_path_buf(),
                max: self.max_output,
            });
        }
        match streamed.finished.outcome {
            Outcome::Exited(0) => {}
            Outcome::Exited(code) => return Err(self.failed(file, code, None)),
            Outcome::Signaled(sig) => return Err(self.failed(file, 128 + sig, Some(sig))),
            Outcome::TimedOut | Outcome::Cancelled => {
                return Err(StateError::FilterTimedOut {
                    program: self.program.clone(),
                    path: file.to_path_buf(),
                    timeout: self.timeout.unwrap_or_default(),
                })
            }
        }
        streamed
            .stdin
            .context("cannot write to the filter of", file)?;
        streamed
            .stdout
            .context("cannot read the output of the filter of", file)?;
        Ok(output)
    }

    fn failed(&self, file: &Path, code: i32, signal: Option<i32>) -> StateError {
        StateError::FilterFailed {
            program: self.program.clone(),
            path: file.to_path_buf(),
            code,
            signal,
        }
    }

    /// "Not found" (the program, or its interpreter) is 127's case;
    /// anything else that stops the start (permission, not an executable
    /// format, a directory) is 126's.
    fn spawn_error(&self, e: ProcError, file: &Path) -> StateError {
        let program = self.program.clone();
        match e {
            ProcError::NotFound { .. } | ProcError::InterpreterNotFound { .. } => {
                StateError::FilterNotFound {
                    program,
                    // 2 is "not found" on every platform: ENOENT on
                    // Linux and macOS, ERROR_FILE_NOT_FOUND on Windows.
                    source: io::Error::from_raw_os_error(2),
                }
            }
            ProcError::NotExecutable { source, .. } | ProcError::Spawn { source, .. } => {
                StateError::FilterNotExecutable { program, source }
            }
            other => StateError::Io(baton_fs::PathError {
                op: "cannot supervise the filter of",
                path: file.to_path_buf(),
                source: io::Error::other(other),
            }),
        }
    }
}

/// The filter's standard output, kept up to `max` bytes: past it, `over`
/// is set, the filter's group is stopped, and every write fails (the
/// drain then reads and drops the rest).
struct Capped<'a> {
    out: &'a mut Vec<u8>,
    max: u64,
    over: &'a AtomicBool,
    stop: Canceller,
}

impl Write for Capped<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let total = u64::try_from(self.out.len().saturating_add(buf.len())).unwrap_or(u64::MAX);
        if self.over.load(Ordering::SeqCst) || total > self.max {
            self.over.store(true, Ordering::SeqCst);
            self.stop.cancel();
            return Err(io::Error::other("the filter's output passed its cap"));
        }
        self.out.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
