//! Supervising a command whose standard streams are the caller's: input fed
//! from a reader, output drained into writers, while the supervisor waits.
//!
//! For a program that filters data (a state filter) or whose output is its
//! answer (git): the command gets everything of [`Supervisor::run_with`] —
//! its own process group, the parent-death signal, the timeout, the
//! termination of its group and of what it left behind — and the streams
//! are pumped by helper threads, so a command that writes before it has
//! read all of its input does not deadlock. The supervisor itself stays on
//! the calling thread (the parent-death signal is tied to it).
//!
//! A stream ends when every copy of its pipe end is closed: the drains
//! return once the command and everything it started that kept the pipe
//! have exited. With [`LeftoverPolicy::Terminate`](crate::LeftoverPolicy)
//! that is when the command's group is gone; with `Leave`, a process left
//! behind that keeps the pipe open keeps its drain (and so
//! [`Supervisor::run_streaming`]) waiting, as `std::process::Command::output`
//! would.

use std::io::{self, Read, Write};
#[cfg(unix)]
use std::os::fd::OwnedFd;
#[cfg(windows)]
use std::os::windows::io::OwnedHandle as OwnedFd;
use std::sync::Arc;

use crate::error::ProcError;
use crate::spec::{Finished, Started, Stdio};
use crate::supervisor::Supervisor;

type Reader<'a> = Box<dyn Read + Send + 'a>;
type Writer<'a> = Box<dyn Write + Send + 'a>;

/// The caller's ends of the command's standard streams; a stream not set
/// here goes where [`RunSpec::stdio`](crate::RunSpec::stdio) says.
#[derive(Default)]
#[must_use]
pub struct Streams<'a> {
    stdin: Option<Reader<'a>>,
    stdout: Option<Writer<'a>>,
    stderr: Option<Writer<'a>>,
}

impl std::fmt::Debug for Streams<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Streams")
            .field("stdin", &self.stdin.is_some())
            .field("stdout", &self.stdout.is_some())
            .field("stderr", &self.stderr.is_some())
            .finish()
    }
}

impl<'a> Streams<'a> {
    /// No stream of the caller's: all as the spec says.
    pub fn new() -> Self {
        Streams::default()
    }

    /// The command reads `from` on its standard input, which is closed at
    /// the end of `from`.
    pub fn stdin(mut self, from: impl Read + Send + 'a) -> Self {
        self.stdin = Some(Box::new(from));
        self
    }

    /// What the command writes on its standard output goes to `to`.
    pub fn stdout(mut self, to: impl Write + Send + 'a) -> Self {
        self.stdout = Some(Box::new(to));
        self
    }

    /// What the command writes on its standard error goes to `to`.
    pub fn stderr(mut self, to: impl Write + Send + 'a) -> Self {
        self.stderr = Some(Box::new(to));
        self
    }
}

/// How a run with [`Streams`] ended, and how each stream fared.
#[derive(Debug)]
#[must_use]
pub struct Streamed {
    /// How the command ended, and what it left behind.
    pub finished: Finished,
    /// Feeding the standard input: `Ok` also when the command closed it
    /// before reading everything (it may ignore its input); an error of the
    /// reader or of the pipe otherwise.
    pub stdin: io::Result<()>,
    /// Draining the standard output: an error of the pipe or of the writer
    /// (after which the rest of the output was read and dropped, so the
    /// command was never blocked on a full pipe).
    pub stdout: io::Result<()>,
    /// Draining the standard error, as for `stdout`.
    pub stderr: io::Result<()>,
}

impl Supervisor {
    /// Like [`Supervisor::run_with`], with the streams set in `streams`
    /// connected by pipes to the caller's reader and writers (see the
    /// [module notes](crate::streams) for when the streams end).
    ///
    /// # Errors
    ///
    /// As [`Supervisor::run`]; also [`ProcError::Io`] when a pipe cannot be
    /// made. Errors of the streams themselves are in [`Streamed`].
    pub fn run_streaming(
        mut self,
        streams: Streams<'_>,
        on_start: impl FnOnce(Started) + Send,
    ) -> Result<Streamed, ProcError> {
        // The command's ends go into the spec, which `run_with` consumes:
        // once it returns, only the command's copies (and those of what it
        // left running) keep the pipes open.
        let stdin = match streams.stdin {
            Some(reader) => {
                let (read, write) = pipe()?;
                self.spec.stdio.stdin = Stdio::Fd(Arc::new(read));
                Some((reader, write))
            }
            None => None,
        };
        let stdout = drain_end(streams.stdout, &mut self.spec.stdio.stdout)?;
        let stderr = drain_end(streams.stderr, &mut self.spec.stdio.stderr)?;

        std::thread::scope(|s| {
            let fed = stdin.map(|(reader, pipe)| s.spawn(move || feed(reader, pipe)));
            let out = stdout.map(|(pipe, writer)| s.spawn(move || drain(pipe, writer)));
            let err = stderr.map(|(pipe, writer)| s.spawn(move || drain(pipe, writer)));
            let finished = self.run_with(on_start);
            let join = |h: Option<std::thread::ScopedJoinHandle<'_, io::Result<()>>>| match h {
                Some(h) => h
                    .join()
                    .unwrap_or_else(|_| Err(io::Error::other("a stream's thread panicked"))),
                None => Ok(()),
            };
            let (stdin, stdout, stderr) = (join(fed), join(out), join(err));
            Ok(Streamed {
                finished: finished?,
                stdin,
                stdout,
                stderr,
            })
        })
    }
}

/// A pipe (read end, write end) that no command inherits by itself: give an
/// end to a command as [`Stdio::Fd`], which hands it a duplicate. Unix:
/// close-on-exec descriptors (`OwnedFd`); Windows: handles that are not
/// inheritable (`OwnedHandle`).
///
/// # Errors
///
/// [`ProcError::Io`] when the system cannot make one.
pub fn pipe() -> Result<(OwnedFd, OwnedFd), ProcError> {
    crate::sys::pipe_cloexec().map_err(|e| ProcError::io("create a pipe", e))
}

/// A pipe for an output stream drained into `writer`: the command gets its
/// write end in `slot`; returns the read end and the writer.
fn drain_end<'a>(
    writer: Option<Writer<'a>>,
    slot: &mut Stdio,
) -> Result<Option<(OwnedFd, Writer<'a>)>, ProcError> {
    let Some(writer) = writer else {
        return Ok(None);
    };
    let (read, write) = pipe()?;
    *slot = Stdio::Fd(Arc::new(write));
    Ok(Some((read, writer)))
}

/// Copies `from` into the pipe, then closes it. A command that closed its
/// input early (`EPIPE`) is not an error.
fn feed(mut from: Reader<'_>, pipe: OwnedFd) -> io::Result<()> {
    let mut to = std::fs::File::from(pipe);
    match io::copy(&mut from, &mut to) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => other.map(drop),
    }
}

/// Copies the pipe into `to` until its end. After an error of `to` the rest
/// is read and dropped, so the command never blocks on a full pipe.
fn drain(pipe: OwnedFd, mut to: Writer<'_>) -> io::Result<()> {
    let mut from = std::fs::File::from(pipe);
    let mut buf = vec![0u8; 64 * 1024];
    let mut result = Ok(());
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return result.and(Err(e)),
        };
        if result.is_ok() {
            result = to.write_all(&buf[..n]);
        }
    }
    result.and_then(|()| to.flush())
}
