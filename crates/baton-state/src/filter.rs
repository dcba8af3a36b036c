//! Running an external filter: current content on stdin, new content on stdout.

use std::ffi::{OsStr, OsString};
use std::io::{self, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::error::StateError;
use baton_fs::IoResultExt;

/// A command that turns a file's current content (its standard input) into
/// the new content (its standard output), like `jq '.n += 1'`,
/// `python3 -c ...` or `sed s/a/b/`.
///
/// Its standard error and working directory are inherited. It also gets
/// `BATON_STATE_FILE` (the real file's path) and, when run under a lock,
/// `BATON_LOCK` and `BATON_FENCING_TOKEN`.
#[derive(Clone, Debug)]
pub struct Filter {
    program: OsString,
    args: Vec<OsString>,
}

impl Filter {
    /// A filter from a command line: the program, then its arguments.
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
        })
    }

    /// The program.
    pub fn program(&self) -> &OsStr {
        &self.program
    }

    /// Runs the filter on `input` and returns what it printed, if it exited 0.
    /// `file` is the state file, for messages and `BATON_STATE_FILE`.
    pub(crate) fn run(
        &self,
        input: &[u8],
        file: &Path,
        env: &[(&str, String)],
    ) -> Result<Vec<u8>, StateError> {
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args)
            .env("BATON_STATE_FILE", file)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().map_err(|e| self.spawn_error(e))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        // Feed stdin from a second thread while reading stdout here: a filter
        // that writes before it has read everything must not deadlock us.
        let (fed, output) = std::thread::scope(|s| {
            let feeder = s.spawn(move || match stdin {
                Some(mut pipe) => match pipe.write_all(input) {
                    // A filter may well ignore its input (`echo '{}'`).
                    Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
                    other => other,
                },
                None => Ok(()),
            });
            let mut out = Vec::new();
            let read = match stdout {
                Some(mut pipe) => pipe.read_to_end(&mut out).map(|_| out),
                None => Ok(out),
            };
            let fed = feeder.join().unwrap_or_else(|_| {
                Err(io::Error::other("the thread feeding the filter panicked"))
            });
            (fed, read)
        });
        let status = child
            .wait()
            .context("cannot wait for the filter of", file)?;
        if let Some(sig) = status.signal() {
            return Err(self.failed(file, 128 + sig, Some(sig)));
        }
        match status.code() {
            Some(0) => {}
            Some(code) => return Err(self.failed(file, code, None)),
            None => return Err(self.failed(file, 125, None)),
        }
        fed.context("cannot write to the filter of", file)?;
        output
            .context("cannot read the output of the filter of", file)
            .map_err(Into::into)
    }

    fn failed(&self, file: &Path, code: i32, signal: Option<i32>) -> StateError {
        StateError::FilterFailed {
            program: self.program.clone(),
            path: file.to_path_buf(),
            code,
            signal,
        }
    }

    /// "Not found" is 127's case; anything else that stops the start
    /// (permission, not an executable format, a directory) is 126's.
    fn spawn_error(&self, source: io::Error) -> StateError {
        let program = self.program.clone();
        if source.kind() == io::ErrorKind::NotFound {
            StateError::FilterNotFound { program, source }
        } else {
            StateError::FilterNotExecutable { program, source }
        }
    }
}
