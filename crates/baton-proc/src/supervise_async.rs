//! The supervisor on a tokio runtime (Linux, feature `tokio`): the command is
//! started by one thread that lives as long as the process, and its pidfd,
//! its cancel eventfd and its deadline are awaited on the runtime, so a
//! process that hosts many runs (the job service) holds no thread per
//! running command and its end reaches the runtime without a hand-off.
//!
//! **Why one spawner thread.** The parent-death signal (`PR_SET_PDEATHSIG`)
//! is sent when the *thread* that cloned the child exits, not the process.
//! A blocking-pool thread exits after some idle time, and a runtime worker
//! can too, so a command cloned there would be killed when its thread
//! retires, or, worse, if the signal were dropped, outlive a killed
//! service. The spawner thread is started once and never ends: a command
//! it clones dies with the process, as with [`Supervisor::run_with`].
//!
//! **What stays the same.** The start handshake (`on_start` runs, on the
//! spawner thread, while the child waits before its exec), timeout → TERM
//! to the group → grace → KILL, cancel through the [`Canceller`], the group
//! killed before its leader is reaped when it was being terminated, and the
//! leftovers terminated after the command ends (on a blocking thread, and
//! only when the group still has members or this process is a subreaper:
//! the usual case costs one system call on the runtime).
//!
//! A run that forwards signals, takes the terminal or has a guardian goes
//! on a blocking thread through [`Supervisor::run_with`]: those are the
//! interactive `baton run` and the runs of a store several nodes share.
//!
//! [`Canceller`]: crate::Canceller

use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use rustix::process::Signal;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use crate::error::ProcError;
use crate::leftover::{Leftover, LeftoverPolicy};
use crate::orphans::Registration;
use crate::spec::{Finished, Started};
use crate::supervise::{check_cwd, contain_leftovers, signal_group, ChildGuard, State};
use crate::supervisor::Phase;
use crate::supervisor::{cancelled, Supervisor};
use crate::sys::ProcFd;

/// Work for the spawner thread.
type Job = Box<dyn FnOnce() + Send>;

impl Supervisor {
    /// [`Supervisor::run_with`] awaited on a tokio runtime: `on_start` is
    /// called on the process's spawner thread (see the module
    /// documentation) while the child waits before its exec; the child's
    /// end, a cancel and the timeout are awaited on the runtime. Needs a
    /// runtime with I/O and time enabled.
    ///
    /// A run with [`RunSpec::forward_signals`], [`RunSpec::terminal`] or
    /// [`RunSpec::guard`] runs through [`Supervisor::run_with`] on a
    /// blocking thread of the runtime instead, with the same result.
    ///
    /// Dropping the future before it is ready kills the command's group and
    /// reaps its leader.
    ///
    /// # Errors
    ///
    /// As [`Supervisor::run`], and [`ProcError::Io`] when the spawner
    /// thread cannot be started.
    ///
    /// [`RunSpec::forward_signals`]: crate::RunSpec::forward_signals
    /// [`RunSpec::terminal`]: crate::RunSpec::terminal
    /// [`RunSpec::guard`]: crate::RunSpec::guard
    pub async fn run_async(
        self,
        on_start: impl FnOnce(Started) + Send + 'static,
    ) -> Result<Finished, ProcError> {
        if self.spec.forward_signals || self.spec.terminal || self.spec.guard.is_some() {
            return tokio::task::spawn_blocking(move || self.run_with(on_start))
                .await
                .map_err(|e| ProcError::io("supervise the command", io::Error::other(e)))?;
        }
        let Some(attached) = self.attach_waker()? else {
            return Ok(cancelled());
        };
        check_cwd(&self.spec)?;
        let cancel = watch(Arc::clone(&attached.waker))
            .map_err(|e| ProcError::io("watch the cancel eventfd", e))?;

        let (grace, timeout, leftovers) = (self.spec.grace, self.spec.timeout, self.spec.leftovers);
        let spec = self.spec.clone();
        let (tx, rx) = tokio::sync::oneshot::channel();
        submit(Box::new(move || {
            let spawning = crate::orphans::spawning();
            let child = crate::spawn::spawn(&spec, false, |started| {
                on_start(started);
                Ok(())
            })
            .map(|pid| {
                let child = ChildGuard::new(pid);
                let run = spawning.register(&spec.env, spec.new_session, child.pid);
                (child, run)
            });
            // Nobody waits any more (the future was dropped): the guard,
            // dropped with the unsent value, kills and reaps the command.
            let _ = tx.send(child);
        }))?;
        let spawner_gone = || {
            ProcError::io(
                "start the command",
                io::Error::other("the spawner thread failed"),
            )
        };
        // `run` is unregistered when this returns, after the leftovers.
        let (mut child, run) = rx.await.map_err(|_| spawner_gone())??;
        let started = Instant::now();
        let pidfd =
            ProcFd::open(child.pid).map_err(|e| ProcError::io("open a pidfd for the child", e))?;
        let pidfd = watch(pidfd).map_err(|e| ProcError::io("watch the child's pidfd", e))?;

        let mut state = State {
            pgid: child.pid,
            grace,
            deadline: timeout.and_then(|t| started.checked_add(t)),
            phase: Phase::Running,
        };
        loop {
            let deadline = state.next_deadline();
            // Once terminating, a cancel changes nothing (the eventfd is
            // never drained: watching it would spin).
            let running = state.phase == Phase::Running;
            tokio::select! {
                ready = pidfd.readable() => {
                    ready.map_err(|e| ProcError::io("wait for the child", e))?.retain_ready();
                    break;
                }
                ready = cancel.readable(), if running => {
                    ready.map_err(|e| ProcError::io("wait for a cancel", e))?.retain_ready();
                    state.on_cancel();
                }
                () = sleep_until(deadline) => {}
            }
            state.on_time(Instant::now());
        }
        if state.phase != Phase::Running {
            // The leader is gone but not reaped, so its id still pins the
            // group: kill what is left of the group we were terminating.
            signal_group(state.pgid, Signal::KILL);
        }
        // Its pidfd is readable: it has exited, so this does not block.
        let status = child.reap()?;
        let outcome = state.finish(status);
        let leftovers = match leftovers {
            LeftoverPolicy::Leave => Vec::new(),
            LeftoverPolicy::Terminate => contain(state.pgid, grace, run).await?,
        };
        Ok(Finished {
            outcome,
            leftovers,
            fenced: false,
            guardian_lost: false,
        })
    }
}

/// Terminates what the command left (see `supervise::contain_leftovers`)
/// on a blocking thread, which it holds only when there may be someone to
/// stop: a member of the group still there, a child of this shared
/// subreaper that is no supervised command nor an orphan of another
/// running run seen before (a new orphan, one of this run's, a helper), or
/// this process a subreaper of one run.
async fn contain(
    pgid: rustix::process::Pid,
    grace: std::time::Duration,
    run: Option<Registration>,
) -> Result<Vec<Leftover>, ProcError> {
    let group_alive = rustix::process::test_kill_process_group(pgid).is_ok();
    let orphans = match &run {
        Some(run) => crate::orphans::may_have_orphans(run),
        None => crate::contain::is_subreaper(),
    };
    if !group_alive && !orphans {
        return Ok(Vec::new());
    }
    tokio::task::spawn_blocking(move || contain_leftovers(pgid, grace, run.as_ref()))
        .await
        .map_err(|e| ProcError::io("stop the command's leftovers", io::Error::other(e)))
}

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await,
        None => std::future::pending().await,
    }
}

/// Hands `job` to the spawner thread, starting it the first time; a start
/// that failed (the user at its process limit, say) is tried again by the
/// next job, never kept: one failure must not fail every later start.
fn submit(job: Job) -> Result<(), ProcError> {
    static SPAWNER: Mutex<Option<mpsc::Sender<Job>>> = Mutex::new(None);
    let mut spawner = SPAWNER.lock().unwrap_or_else(PoisonError::into_inner);
    let tx = match spawner.take() {
        Some(tx) => tx,
        None => {
            let (tx, rx) = mpsc::channel::<Job>();
            std::thread::Builder::new()
                .name("baton-spawner".into())
                .spawn(move || {
                    // The sender is in a static: this loop, and the
                    // thread, last as long as the process.
                    for job in rx {
                        // A panicking `on_start` must not take the thread
                        // (and every later start) with it; its child was
                        // killed by the spawn's own guard during the unwind.
                        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                    }
                })
                .map_err(|e| ProcError::io("start the spawner thread", e))?;
            tx
        }
    };
    match tx.send(job) {
        Ok(()) => {
            *spawner = Some(tx);
            Ok(())
        }
        // The thread is gone (it cannot end, but if it did): the next job
        // starts another.
        Err(_) => Err(ProcError::io(
            "start the command",
            io::Error::other("the spawner thread is gone"),
        )),
    }
}

/// A descriptor for [`AsyncFd`], which wants [`AsRawFd`].
struct Fd<T>(T);

/// Registers `fd`, which it then owns, with the runtime's reactor, for
/// reading.
#[allow(unsafe_code)] // the SAFETY comment below
fn watch<T: AsFd>(fd: T) -> io::Result<AsyncFd<Fd<T>>> {
    // SAFETY: the `AsyncFd` owns `fd` (an owned descriptor: a pidfd, or an
    // eventfd kept alive by its `Arc`), so the descriptor stays open and
    // the same for as long as it is registered, and `as_raw_fd` always
    // returns it.
    unsafe { AsyncFd::register_with_interest(Fd(fd), Interest::READABLE) }.map_err(io::Error::from)
}

impl<T: AsFd> AsRawFd for Fd<T> {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}
