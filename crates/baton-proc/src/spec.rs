//! What to run ([`RunSpec`], its [`Stdio`]) and what came of it
//! ([`Started`], [`Finished`], [`Outcome`]): the values every part of the
//! crate passes around.

use std::ffi::OsString;
#[cfg(unix)]
use std::os::fd::OwnedFd;
#[cfg(windows)]
use std::os::windows::io::OwnedHandle as OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::guard::GuardSpec;
use crate::leftover::{Leftover, LeftoverPolicy};

/// The grace period callers use by default between `SIGTERM` and `SIGKILL`.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(10);

/// Exit code for a run that was killed because it exceeded its timeout.
pub const EXIT_TIMED_OUT: i32 = baton_contract::exit::TIMED_OUT;
/// Exit code for a run that was cancelled (in baton: superseded by a newer run).
pub const EXIT_CANCELLED: i32 = baton_contract::exit::SUPERSEDED;

/// What to run and how long to let it run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSpec {
    /// The program; looked up in `PATH` when it contains no `/`.
    pub program: OsString,
    /// Its arguments, without the program name.
    pub args: Vec<OsString>,
    /// Variables added to (or replacing ones in) the inherited environment.
    pub env: Vec<(OsString, OsString)>,
    /// Start from an empty environment instead of this process's: the
    /// command gets `env` and nothing else. Give it a `PATH` (without one,
    /// the program is looked up in this process's `PATH` and `execvp`'s
    /// default path, which may differ).
    pub clear_env: bool,
    /// The child's working directory; the current one when `None`.
    pub cwd: Option<PathBuf>,
    /// Kill the child's group when it runs longer than this, measured from the spawn.
    pub timeout: Option<Duration>,
    /// How long to wait after `SIGTERM` before `SIGKILL`.
    pub grace: Duration,
    /// What to do with processes of the command's group (and, in a subreaper,
    /// its orphans) still running when the command exits.
    pub leftovers: LeftoverPolicy,
    /// Forward SIGINT, SIGTERM, SIGHUP and SIGQUIT received by this process to
    /// the command's group while it runs, and (when this process is the
    /// terminal's foreground job) hand it the terminal and proxy job control.
    /// This installs process-wide signal handlers for the duration of the
    /// run: right for a program that runs one command (`baton run`), wrong
    /// for one that hosts many runs, so it is off unless asked for.
    pub forward_signals: bool,
    /// Hand the command the terminal when this process is the terminal's
    /// foreground job, and proxy job control, as [`RunSpec::forward_signals`]
    /// does, but without forwarding the signals this process receives: for a
    /// helper that may prompt on the terminal (git starting ssh), run by a
    /// library that must not take over this process's `SIGINT`/`SIGTERM`.
    /// Keyboard signals then reach the command's group only. (Only while the
    /// command has the terminal is a `SIGCHLD` watch installed, to proxy
    /// job control.) Implied by `forward_signals`; off by default.
    pub terminal: bool,
    /// Where the command's standard input, output and error go; inherited
    /// from this process by default.
    pub stdio: StdioSpec,
    /// Start the command in a session of its own (`setsid`) instead of a
    /// new process group of this process's session: it still leads its
    /// own group (its pgid is its pid), but none of its processes can join
    /// a group outside that session (`setpgid` is refused across
    /// sessions), so none can hide in this process's own group. For a
    /// process that hosts many runs (the job service); it gives up the
    /// controlling terminal, so it implies no [`RunSpec::terminal`] hand
    /// over (`baton run` keeps the terminal's session). Unix; ignored on
    /// Windows. Off by default.
    pub new_session: bool,
    /// Start a guardian before the command, which stops the command's whole
    /// process group if this process dies or stops vouching for itself in
    /// time (see [`guard`](crate::guard)). `None` by default.
    pub guard: Option<GuardSpec>,
}

/// Where one of the command's standard streams goes.
#[derive(Debug, Clone, Default)]
pub enum Stdio {
    /// This process's own stream.
    #[default]
    Inherit,
    /// `/dev/null`.
    Null,
    /// A descriptor of the caller's (a file, a pipe's end; on Windows an
    /// `OwnedHandle`); the command gets a duplicate, the caller keeps this one.
    Fd(Arc<OwnedFd>),
}

impl PartialEq for Stdio {
    fn eq(&self, other: &Stdio) -> bool {
        match (self, other) {
            (Stdio::Inherit, Stdio::Inherit) | (Stdio::Null, Stdio::Null) => true,
            (Stdio::Fd(a), Stdio::Fd(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl Eq for Stdio {}

/// The command's three standard streams.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StdioSpec {
    /// Standard input.
    pub stdin: Stdio,
    /// Standard output.
    pub stdout: Stdio,
    /// Standard error.
    pub stderr: Stdio,
}

impl RunSpec {
    /// Run `program` with no arguments, no extra environment, in the current directory, with
    /// no timeout and a grace period of [`DEFAULT_GRACE`].
    pub fn new(program: impl Into<OsString>) -> Self {
        RunSpec {
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            clear_env: false,
            cwd: None,
            timeout: None,
            grace: DEFAULT_GRACE,
            leftovers: LeftoverPolicy::Terminate,
            forward_signals: false,
            terminal: false,
            new_session: false,
            stdio: StdioSpec::default(),
            guard: None,
        }
    }

    /// Append one argument.
    #[must_use]
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Append several arguments.
    #[must_use]
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }
}

/// The child has started: what a caller records so that its processes can be
/// found again if the supervisor dies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Started {
    /// The child's process group id (the child leads it: it is the child's pid).
    pub pgid: i32,
}

/// How a supervised run ended, and what it left behind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    /// How the command ended.
    pub outcome: Outcome,
    /// Processes still running when the command exited: terminated (TERM,
    /// grace, KILL) unless [`RunSpec::leftovers`] is [`LeftoverPolicy::Leave`].
    pub leftovers: Vec<Leftover>,
    /// The guardian ([`RunSpec::guard`]) killed the command's group because
    /// this process did not vouch for itself in time (it was stopped, or
    /// its proofs of liveness failed).
    pub fenced: bool,
    /// The guardian died while the command ran (someone killed it), so
    /// the command was stopped: it must not run unguarded.
    pub guardian_lost: bool,
}

/// How a supervised child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The child exited by itself with this code.
    Exited(i32),
    /// The child was killed by this signal (not by our timeout or a cancel). This includes a
    /// signal we forwarded to it, and the `SIGKILL` we sent when it outlived the grace period
    /// after a forwarded signal.
    Signaled(i32),
    /// We killed the child's group because the timeout elapsed.
    TimedOut,
    /// We killed the child's group because [`Canceller::cancel`](crate::Canceller::cancel) was called.
    Cancelled,
}

impl Outcome {
    /// The exit code `baton run` exits with: the child's own code, 128+N for signal N,
    /// [`EXIT_TIMED_OUT`] (124) or [`EXIT_CANCELLED`] (79).
    pub fn exit_code(&self) -> i32 {
        match *self {
            Outcome::Exited(code) => code,
            Outcome::Signaled(signal) => baton_contract::exit::SIGNALED_BASE + signal,
            Outcome::TimedOut => EXIT_TIMED_OUT,
            Outcome::Cancelled => EXIT_CANCELLED,
        }
    }
}
