//! The supervisor on Unix: spawn, then wait on a pidfd (a kqueue on macOS),
//! the signal pipe and the cancel eventfd.

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags};
use rustix::io::Errno;
use rustix::process::{kill_process_group, Pid, Signal};

use crate::contain::{stop_orphans, terminate_group, GroupIdentity, SUPERVISED};
use crate::error::ProcError;
use crate::guard::Guardian;
use crate::leftover::{Leftover, LeftoverPolicy};
use crate::orphans::{stop_orphans_of, Registration};
use crate::signals::SignalCatcher;
use crate::spec::{Finished, Outcome, RunSpec, Started};
use crate::supervisor::{cancelled, Phase, Reason, Supervisor};
use crate::sys::{ProcFd, Waker};
use crate::terminal::{child_stopped, proxy_stop, StopWatch, TerminalHandover};
use crate::time::timespec;

impl Supervisor {
    /// Like [`Supervisor::run`], and calls `on_start` (on this thread)
    /// once the child exists but before it executes the command, so the
    /// caller can record its process group before anything of the command
    /// runs; reports the processes the command left behind, which were
    /// terminated unless [`RunSpec::leftovers`] says to leave them.
    ///
    /// # Errors
    ///
    /// As [`Supervisor::run`].
    pub fn run_with(self, on_start: impl FnOnce(Started) + Send) -> Result<Finished, ProcError> {
        let Some(attached) = self.attach_waker()? else {
            return Ok(cancelled());
        };
        let waker = &attached.waker;

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
        // A command in a session of its own cannot have this one's terminal.
        let terminal = (self.spec.forward_signals || self.spec.terminal)
            && !self.spec.new_session
            && TerminalHandover::wanted();
        let mut stops = match terminal {
            true => {
                Some(StopWatch::new().map_err(|e| ProcError::io("watch for a stopped child", e))?)
            }
            false => None,
        };
        // Started before the command, armed before it executes: the
        // command never runs unguarded. Declared before the child, so on an
        // error path the child's group is killed first, then it is disarmed.
        let guardian = match &self.spec.guard {
            Some(g) => Some(Guardian::spawn(g)?),
            None => None,
        };
        let spawning = crate::orphans::spawning();
        let child = crate::spawn::spawn(&self.spec, terminal, |started| {
            if let Some(g) = &guardian {
                g.arm(started.pgid)?;
            }
            on_start(started);
            Ok(())
        })?;
        let started = Instant::now();
        let mut child = ChildGuard::new(child);
        // Unregistered when this returns, after its leftovers are stopped.
        let run = spawning.register(&self.spec.env, self.spec.new_session, child.pid);
        // Dropped when `run` returns: on the normal path the child has been
        // reaped by then; on an error path the terminal is taken back before
        // the child guard kills the group.
        let _terminal = terminal.then(|| TerminalHandover::give(child.pid));
        let pidfd =
            ProcFd::open(child.pid).map_err(|e| ProcError::io("open a pidfd for the child", e))?;

        let mut state = State {
            pgid: child.pid,
            grace: self.spec.grace,
            deadline: self
                .spec
                .timeout
                .and_then(|timeout| started.checked_add(timeout)),
            phase: Phase::Running,
        };
        // A guardian that exits while the command runs either stopped the
        // command (it then ends too) or was killed: the command must not
        // run on unguarded, so it is stopped (TERM, grace, KILL).
        let mut guardian_lost = false;
        loop {
            let watch_guardian = guardian
                .as_ref()
                .and_then(Guardian::pidfd)
                .filter(|_| !guardian_lost);
            let events = wait_for_events(
                &pidfd,
                signals.as_ref(),
                stops.as_ref(),
                waker,
                watch_guardian,
                &state,
            )?;
            if events.guardian_gone {
                guardian_lost = true;
                state.on_cancel();
            }
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
                    LeftoverPolicy::Terminate => {
                        contain_leftovers(state.pgid, state.grace, run.as_ref())
                    }
                };
                let fenced = guardian.map(Guardian::finish).unwrap_or(false);
                return Ok(Finished {
                    outcome,
                    leftovers,
                    fenced,
                    guardian_lost: guardian_lost && !fenced,
                });
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
/// in a subreaper, what left the group (in a shared one, what `run` left:
/// `orphans.rs`); returns whom it found.
pub(crate) fn contain_leftovers(
    pgid: Pid,
    grace: Duration,
    run: Option<&Registration>,
) -> Vec<Leftover> {
    // Its command has ended: no other run's end leaves an orphan to it.
    if let Some(run) = run {
        crate::orphans::ending(run);
    }
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
    if let Some(run) = run {
        found.extend(stop_orphans_of(run, grace));
    }
    found
}

pub(crate) struct State {
    pub(crate) pgid: Pid,
    pub(crate) grace: Duration,
    /// When the timeout elapses, if there is one (`None` also when it would overflow).
    pub(crate) deadline: Option<Instant>,
    pub(crate) phase: Phase,
}

impl State {
    fn reason(&self) -> Option<Reason> {
        match self.phase {
            Phase::Running => None,
            Phase::Terminating { reason, .. } | Phase::Killed { reason } => Some(reason),
        }
    }

    /// The next instant at which something must happen without any event.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
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

    pub(crate) fn on_cancel(&mut self) {
        if self.phase == Phase::Running {
            self.start_terminating(Reason::Cancel, Signal::TERM);
        }
    }

    pub(crate) fn on_time(&mut self, now: Instant) {
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
    pub(crate) fn finish(&self, status: ExitStatus) -> Outcome {
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
pub(crate) fn signal_group(pgid: Pid, signal: Signal) {
    let _ = kill_process_group(pgid, signal);
}

#[derive(Debug, Default)]
struct Events {
    child_exited: bool,
    signals: bool,
    stopped: bool,
    cancel: bool,
    guardian_gone: bool,
}

/// Block in `poll` until the child exits, a signal or a cancel arrives, or the next deadline.
fn wait_for_events(
    pidfd: &ProcFd,
    signals: Option<&SignalCatcher>,
    stops: Option<&StopWatch>,
    waker: &Waker,
    guardian: Option<&ProcFd>,
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
    let guardian_at = guardian.map(|g| {
        fds.push(PollFd::new(g, PollFlags::IN));
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
        guardian_gone: ready(guardian_at),
    })
}

/// Owns the spawned child until it is reaped; if dropped earlier (an error), it kills the
/// whole group and reaps the leader, so no child outlives `run`.
pub(crate) struct ChildGuard {
    /// Not yet reaped.
    live: bool,
    pub(crate) pid: Pid,
}

impl ChildGuard {
    pub(crate) fn new(pid: Pid) -> Self {
        SUPERVISED
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(pid.as_raw_nonzero().get());
        ChildGuard { pid, live: true }
    }

    fn unregister(&self) {
        let raw = self.pid.as_raw_nonzero().get();
        SUPERVISED
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|p| *p != raw);
    }

    /// Reap the leader (its pidfd is readable, so this does not block).
    pub(crate) fn reap(&mut self) -> Result<ExitStatus, ProcError> {
        if !self.live {
            return Err(ProcError::io(
                "reap the child",
                io::Error::from(io::ErrorKind::NotFound),
            ));
        }
        let status = wait_for(self.pid);
        self.live = false;
        self.unregister();
        status.map_err(|e| ProcError::io("reap the child", e))
    }
}

/// Waits for the child `pid` to exit and reaps it.
fn wait_for(pid: Pid) -> io::Result<ExitStatus> {
    loop {
        match rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty()) {
            Ok(Some((_, status))) => return Ok(ExitStatus::from_raw(status.as_raw())),
            Ok(None) => {
                return Err(io::Error::from(io::ErrorKind::NotFound));
            }
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if self.live {
            signal_group(self.pid, Signal::KILL);
            let _ = wait_for(self.pid);
            self.live = false;
            self.unregister();
        }
    }
}

/// Refuse a working directory that does not exist or cannot be entered, so that the
/// `ENOENT`/`EACCES` of `chdir` in the child is not mistaken for the program's.
pub(crate) fn check_cwd(spec: &RunSpec) -> Result<(), ProcError> {
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
