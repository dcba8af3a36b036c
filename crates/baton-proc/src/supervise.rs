//! The supervisor: spawn, then wait on a pidfd, the signal pipe and the cancel eventfd.

use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::event::{poll, EventfdFlags, PollFd, PollFlags, Timespec};
use rustix::io::Errno;
use rustix::process::{kill_process_group, pidfd_open, Pid, PidfdFlags, Signal};

use crate::cancel::{CancelShared, Canceller};
use crate::contain::{stop_orphans, terminate_group, GroupIdentity, LeftoverPolicy, SUPERVISED};
use crate::handshake::{go, read_pid, Handshake};
use crate::signals::SignalCatcher;
use crate::terminal::{child_stopped, proxy_stop, StopWatch, TerminalHandover};
use crate::{Finished, Outcome, ProcError, RunSpec, Started};

/// Supervises one child command; see the [crate documentation](crate) for what it does.
///
/// ```no_run
/// use baton_proc::{RunSpec, Supervisor};
///
/// let supervisor = Supervisor::new(RunSpec::new("make").arg("test"));
/// let canceller = supervisor.canceller();
/// std::thread::spawn(move || {
///     // ... when this run has been superseded:
///     canceller.cancel();
/// });
/// let outcome = supervisor.run()?;
/// std::process::exit(outcome.exit_code());
/// # Ok::<(), baton_proc::ProcError>(())
/// ```
#[derive(Debug)]
#[must_use = "a Supervisor does nothing until `run` is called"]
pub struct Supervisor {
    spec: RunSpec,
    cancel: Arc<CancelShared>,
}

impl Supervisor {
    /// Prepare to run `spec`. Nothing is started until [`Supervisor::run`].
    pub fn new(spec: RunSpec) -> Self {
        Supervisor {
            spec,
            cancel: Arc::default(),
        }
    }

    /// A handle to cancel this run from another thread.
    pub fn canceller(&self) -> Canceller {
        Canceller {
            shared: Arc::clone(&self.cancel),
        }
    }

    /// Run the child to completion and report how it ended.
    ///
    /// Blocks the calling thread until the child (the leader of its process group) has exited
    /// and been reaped. When this returns, whether `Ok` or `Err`, no child of ours is left
    /// running: on an error after the spawn the group is killed and the child reaped first.
    ///
    /// # Errors
    ///
    /// [`ProcError::NotFound`], [`ProcError::NotExecutable`], [`ProcError::Cwd`] and
    /// [`ProcError::Spawn`] when the child could not be started; [`ProcError::Io`] when a
    /// system call needed to supervise it failed.
    pub fn run(self) -> Result<Outcome, ProcError> {
        self.run_with(|_| {}).map(|f| f.outcome)
    }

    /// Like [`Supervisor::run`], and calls `on_start` (on another thread)
    /// once the child exists but before it executes the command, so the
    /// caller can record its process group before anything of the command
    /// runs; reports the processes the command left behind, which were
    /// terminated unless [`RunSpec::leftovers`] says to leave them.
    ///
    /// # Errors
    ///
    /// As [`Supervisor::run`].
    pub fn run_with(self, on_start: impl FnOnce(Started) + Send) -> Result<Finished, ProcError> {
        let cancelled = Finished {
            outcome: Outcome::Cancelled,
            leftovers: Vec::new(),
        };
        if self.cancel.is_cancelled() {
            return Ok(cancelled);
        }
        let waker = rustix::event::eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)
            .map_err(|e| ProcError::io("create the cancel eventfd", e))?;
        let waker = Arc::new(waker);
        let _detach = Detach(&self.cancel);
        if self.cancel.attach(Arc::clone(&waker)) {
            return Ok(cancelled);
        }

        check_cwd(&self.spec)?;
        // Process-wide signal handling only when asked (`baton run` asks; a
        // service that hosts many runs does not).
        let mut signals = match self.spec.forward_signals {
            true => Some(
                SignalCatcher::new()
                    .map_err(|e| ProcError::io("install the signal handlers", e))?,
            ),
            false => None,
        };
        let terminal = self.spec.forward_signals && TerminalHandover::wanted();
        let mut stops = match terminal {
            true => {
                Some(StopWatch::new().map_err(|e| ProcError::io("watch for a stopped child", e))?)
            }
            false => None,
        };
        let mut handshake =
            Handshake::new().map_err(|e| ProcError::io("create the start handshake pipes", e))?;
        let child = std::thread::scope(|scope| {
            let (pid_read, go_write) = (&handshake.pid_read, &handshake.go_write);
            let recorder = scope.spawn(move || {
                if let Some(pgid) = read_pid(pid_read) {
                    // The child waits for this byte: send it on every path,
                    // a panicking `on_start` included.
                    let _go = GoOnDrop(go_write);
                    on_start(Started { pgid });
                }
            });
            let child = spawn(&self.spec, terminal, &handshake);
            // The child has exec'd or failed: a recorder still waiting for
            // a pid (the child never got that far) reads end of file now.
            drop(handshake.pid_write.take());
            let _ = recorder.join();
            child
        })?;
        let started = Instant::now();
        let mut child = ChildGuard::new(child);
        // Dropped when `run` returns: on the normal path the child has been
        // reaped by then; on an error path the terminal is taken back before
        // the child guard kills the group.
        let _terminal = terminal.then(|| TerminalHandover::give(child.pid));
        let pidfd = pidfd_open(child.pid, PidfdFlags::empty())
            .map_err(|e| ProcError::io("open a pidfd for the child", e))?;

        let mut state = State {
            pgid: child.pid,
            grace: self.spec.grace,
            deadline: self
                .spec
                .timeout
                .and_then(|timeout| started.checked_add(timeout)),
            phase: Phase::Running,
        };
        loop {
            let events = wait_for_events(&pidfd, signals.as_ref(), stops.as_ref(), &waker, &state)?;
            if events.child_exited {
                if state.phase != Phase::Running {
                    // The leader is gone but not reaped, so its id still pins the group: kill
                    // whatever is left of the group we were terminating (ESRCH if nothing).
                    signal_group(state.pgid, Signal::KILL);
                }
                let status = child.reap()?;
                let outcome = state.finish(status);
                let leftovers = match self.spec.leftovers {
                    LeftoverPolicy::Leave => Vec::new(),
                    LeftoverPolicy::Terminate => contain_leftovers(state.pgid, state.grace),
                };
                return Ok(Finished { outcome, leftovers });
            }
            if events.signals {
                if let Some(signals) = signals.as_mut() {
                    for signal in signals.pending() {
                        state.on_signal(signal);
                    }
                }
            }
            if events.stopped {
                if let Some(stops) = stops.as_mut() {
                    stops.drain();
                }
                if child_stopped(child.pid) && state.phase == Phase::Running {
                    proxy_stop(child.pid);
                }
            }
            if events.cancel {
                state.on_cancel();
            }
            state.on_time(Instant::now());
        }
    }
}

/// Terminates what the command left in its group (its leader is reaped) and,
/// in a subreaper, what left the group; returns whom it found.
fn contain_leftovers(pgid: Pid, grace: Duration) -> Vec<crate::Leftover> {
    // One system call in the usual case: nobody is left in the group. The
    // group id cannot name another group yet: a pid is reused only after the
    // kernel's pid counter wraps, and `terminate_group` re-checks anyway.
    let mut found = match rustix::process::test_kill_process_group(pgid) {
        Err(_) => Vec::new(),
        Ok(()) => terminate_group(
            pgid.as_raw_nonzero().get(),
            GroupIdentity::LeaderReaped,
            grace,
        ),
    };
    found.extend(stop_orphans(grace));
    found
}

/// Lets the waiting child go on to exec when dropped.
struct GoOnDrop<'a>(&'a OwnedFd);

impl Drop for GoOnDrop<'_> {
    fn drop(&mut self) {
        go(self.0);
    }
}

/// Clears the canceller's wake-up fd when `run` returns.
struct Detach<'a>(&'a CancelShared);

impl Drop for Detach<'_> {
    fn drop(&mut self) {
        self.0.detach();
    }
}

/// Why we started terminating the child's group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reason {
    /// We forwarded a signal that we received.
    Signal,
    /// The timeout elapsed.
    Timeout,
    /// [`Canceller::cancel`] was called.
    Cancel,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Nothing sent to the child yet.
    Running,
    /// A termination signal was sent; `SIGKILL` follows at `kill_at`.
    Terminating { reason: Reason, kill_at: Instant },
    /// `SIGKILL` was sent; waiting for the leader to die.
    Killed { reason: Reason },
}

struct State {
    pgid: Pid,
    grace: Duration,
    /// When the timeout elapses, if there is one (`None` also when it would overflow).
    deadline: Option<Instant>,
    phase: Phase,
}

impl State {
    fn reason(&self) -> Option<Reason> {
        match self.phase {
            Phase::Running => None,
            Phase::Terminating { reason, .. } | Phase::Killed { reason } => Some(reason),
        }
    }

    /// The next instant at which something must happen without any event.
    fn next_deadline(&self) -> Option<Instant> {
        match self.phase {
            Phase::Running => self.deadline,
            Phase::Terminating { kill_at, .. } => Some(kill_at),
            Phase::Killed { .. } => None,
        }
    }

    /// Send `signal` to the group and wait `grace` before killing it.
    fn start_terminating(&mut self, reason: Reason, signal: Signal) {
        signal_group(self.pgid, signal);
        // A stopped process (say, by `SIGTTIN`) would only see the signal when continued.
        signal_group(self.pgid, Signal::CONT);
        // If grace is so long that it overflows, never escalate: waiting is the best we can do.
        match Instant::now().checked_add(self.grace) {
            Some(kill_at) => self.phase = Phase::Terminating { reason, kill_at },
            None => self.phase = Phase::Killed { reason },
        }
    }

    fn kill(&mut self, reason: Reason) {
        signal_group(self.pgid, Signal::KILL);
        self.phase = Phase::Killed { reason };
    }

    /// A forwarded signal arrived: pass the first on, kill at once on the second.
    fn on_signal(&mut self, raw: i32) {
        match self.phase {
            Phase::Running => match Signal::from_named_raw(raw) {
                Some(signal) => self.start_terminating(Reason::Signal, signal),
                None => self.start_terminating(Reason::Signal, Signal::TERM),
            },
            Phase::Terminating { reason, .. } => self.kill(reason),
            Phase::Killed { .. } => {}
        }
    }

    fn on_cancel(&mut self) {
        if self.phase == Phase::Running {
            self.start_terminating(Reason::Cancel, Signal::TERM);
        }
    }

    fn on_time(&mut self, now: Instant) {
        match self.phase {
            Phase::Running => {
                if self.deadline.is_some_and(|deadline| now >= deadline) {
                    self.start_terminating(Reason::Timeout, Signal::TERM);
                }
            }
            Phase::Terminating { reason, kill_at } => {
                if now >= kill_at {
                    self.kill(reason);
                }
            }
            Phase::Killed { .. } => {}
        }
    }

    /// The leader exited and was reaped: map its status to an outcome.
    fn finish(&self, status: ExitStatus) -> Outcome {
        match self.reason() {
            Some(Reason::Timeout) => Outcome::TimedOut,
            Some(Reason::Cancel) => Outcome::Cancelled,
            Some(Reason::Signal) | None => outcome_of(status),
        }
    }
}

fn outcome_of(status: ExitStatus) -> Outcome {
    if let Some(code) = status.code() {
        Outcome::Exited(code)
    } else if let Some(signal) = status.signal() {
        Outcome::Signaled(signal)
    } else {
        // `wait` reports only exits and deaths by signal; keep the raw status rather than panic.
        Outcome::Exited(status.into_raw())
    }
}

/// Send `signal` to the process group `pgid`, best effort.
///
/// The group is ours and we have not reaped its leader, so its id cannot have been reused.
/// The only errors the kernel can report here are `ESRCH` (the group is already gone, which
/// is what we want) and `EPERM` (a member changed its credentials, which we cannot override).
fn signal_group(pgid: Pid, signal: Signal) {
    let _ = kill_process_group(pgid, signal);
}

#[derive(Debug, Default)]
struct Events {
    child_exited: bool,
    signals: bool,
    stopped: bool,
    cancel: bool,
}

/// Block in `poll` until the child exits, a signal or a cancel arrives, or the next deadline.
fn wait_for_events(
    pidfd: &OwnedFd,
    signals: Option<&SignalCatcher>,
    stops: Option<&StopWatch>,
    waker: &OwnedFd,
    state: &State,
) -> Result<Events, ProcError> {
    let timeout = state
        .next_deadline()
        .map(|at| timespec(at.saturating_duration_since(Instant::now())));
    let mut fds = vec![PollFd::new(pidfd, PollFlags::IN)];
    // Once we are terminating, a cancel changes nothing: stop watching the
    // (level-triggered, never drained) eventfd so `poll` does not spin.
    let watch_cancel = state.phase == Phase::Running;
    if watch_cancel {
        fds.push(PollFd::new(waker, PollFlags::IN));
    }
    let signal_at = signals.map(|s| {
        fds.push(PollFd::from_borrowed_fd(s.fd(), PollFlags::IN));
        fds.len() - 1
    });
    let stop_at = stops.map(|s| {
        fds.push(PollFd::from_borrowed_fd(s.fd(), PollFlags::IN));
        fds.len() - 1
    });
    match poll(&mut fds, timeout.as_ref()) {
        Ok(_) => {}
        Err(Errno::INTR) => return Ok(Events::default()),
        Err(e) => return Err(ProcError::io("poll for child events", e)),
    }
    let ready = |i: Option<usize>| i.is_some_and(|i| !fds[i].revents().is_empty());
    Ok(Events {
        child_exited: ready(Some(0)),
        cancel: watch_cancel && ready(Some(1)),
        signals: ready(signal_at),
        stopped: ready(stop_at),
    })
}

/// A `poll` timeout (`ppoll` takes nanoseconds, so no rounding is needed).
pub(crate) fn timespec(duration: Duration) -> Timespec {
    Timespec::try_from(duration).unwrap_or(Timespec {
        tv_sec: rustix::event::Secs::MAX,
        tv_nsec: 0,
    })
}

/// Owns the spawned child until it is reaped; if dropped earlier (an error), it kills the
/// whole group and reaps the leader, so no child outlives `run`.
struct ChildGuard {
    child: Option<Child>,
    pid: Pid,
}

impl ChildGuard {
    fn new(child: Child) -> Self {
        let pid = Pid::from_child(&child);
        SUPERVISED
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(pid.as_raw_nonzero().get());
        ChildGuard {
            pid,
            child: Some(child),
        }
    }

    fn unregister(&self) {
        let raw = self.pid.as_raw_nonzero().get();
        SUPERVISED
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|p| *p != raw);
    }

    /// Reap the leader (its pidfd is readable, so this does not block).
    fn reap(&mut self) -> Result<ExitStatus, ProcError> {
        let Some(mut child) = self.child.take() else {
            return Err(ProcError::io(
                "reap the child",
                io::Error::from(io::ErrorKind::NotFound),
            ));
        };
        let status = child.wait().map_err(|e| ProcError::io("reap the child", e));
        self.unregister();
        status
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal_group(self.pid, Signal::KILL);
            let _ = child.wait();
            self.unregister();
        }
    }
}

/// Refuse a working directory that does not exist or cannot be entered, so that the
/// `ENOENT`/`EACCES` of `chdir` in the child is not mistaken for the program's.
fn check_cwd(spec: &RunSpec) -> Result<(), ProcError> {
    let Some(cwd) = &spec.cwd else {
        return Ok(());
    };
    let result = std::fs::metadata(cwd).and_then(|meta| {
        if meta.is_dir() {
            rustix::fs::access(cwd, rustix::fs::Access::EXEC_OK).map_err(io::Error::from)
        } else {
            Err(io::Error::from_raw_os_error(Errno::NOTDIR.raw_os_error()))
        }
    });
    result.map_err(|source| ProcError::Cwd {
        path: cwd.clone(),
        source,
    })
}

fn spawn(spec: &RunSpec, take_terminal: bool, handshake: &Handshake) -> Result<Child, ProcError> {
    let mut command = Command::new(&spec.program);
    command.args(&spec.args);
    command.envs(spec.env.iter().map(|(k, v)| (k, v)));
    if let Some(cwd) = &spec.cwd {
        command.current_dir(cwd);
    }
    let stdio = |s: &crate::Stdio| {
        s.to_std()
            .map_err(|e| ProcError::io("duplicate a descriptor for the command's stdio", e))
    };
    command.stdin(stdio(&spec.stdio.stdin)?);
    command.stdout(stdio(&spec.stdio.stdout)?);
    command.stderr(stdio(&spec.stdio.stderr)?);
    command.process_group(0);
    die_with_parent(&mut command);
    if take_terminal {
        // SAFETY: runs between fork and exec, after std made the child's
        // process group; `take_in_child` makes only async-signal-safe calls
        // (sigprocmask, ioctl) and touches no shared state.
        unsafe {
            command.pre_exec(crate::terminal::take_in_child);
        }
    }
    // SAFETY: the hook runs between fork and exec and makes only
    // async-signal-safe system calls (getpid, write, close, read) on
    // descriptors of this handshake; see `handshake.rs`.
    unsafe {
        command.pre_exec(handshake.child_hook());
    }
    command.spawn().map_err(|source| spawn_error(spec, source))
}

fn spawn_error(spec: &RunSpec, source: io::Error) -> ProcError {
    let program = spec.program.clone();
    let errno = source.raw_os_error().map(Errno::from_raw_os_error);
    match errno {
        Some(Errno::NOENT) => ProcError::NotFound { program },
        Some(Errno::ACCESS | Errno::NOEXEC | Errno::ISDIR) => {
            ProcError::NotExecutable { program, source }
        }
        _ if source.kind() == io::ErrorKind::NotFound => ProcError::NotFound { program },
        _ if source.kind() == io::ErrorKind::PermissionDenied => {
            ProcError::NotExecutable { program, source }
        }
        _ => ProcError::Spawn { program, source },
    }
}

/// Make the child get `SIGKILL` when the thread that spawned it dies, even by `SIGKILL`.
fn die_with_parent(command: &mut Command) {
    let parent = rustix::process::getpid();
    let hook = move || -> io::Result<()> {
        rustix::process::set_parent_process_death_signal(Some(Signal::KILL))?;
        // If the parent died before the prctl, the death signal will never come: we have
        // been re-parented already, so give up rather than run unsupervised.
        if rustix::process::getppid() != Some(parent) {
            return Err(io::Error::from_raw_os_error(Errno::SRCH.raw_os_error()));
        }
        Ok(())
    };
    // SAFETY: the hook runs in the child between fork and exec, where only async-signal-safe
    // operations are allowed. It makes two raw system calls through rustix (prctl, getppid),
    // does not allocate (an `io::Error` from a raw errno is stored inline), takes no locks
    // and touches no shared state.
    unsafe {
        command.pre_exec(hook);
    }
}
