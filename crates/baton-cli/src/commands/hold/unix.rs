//! The background holder's wait on unix: signals through a self-pipe
//! (`SIGUSR1` is `baton lock release`), the caller and the requester
//! through pidfds, and what the caller starts followed in its process tree.
//!
//! A hold goes through four steps, one function each: [`Wakeups::install`]
//! (before anything else, so that an early release request is not lost),
//! [`wait_for_grant`] (the lock is waited for in a thread while this one
//! watches for reasons to give up), [`Guarded::start`] (the script is
//! followed and guarded while the lock is held) with [`Guarded::wait_for_end`],
//! and [`let_go`].

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::mpsc::RecvError;
use std::time::{Duration, Instant};

use baton_lock::{start_time, BatonDir};
use baton_proc::{ExitWatch, GuardSpec, ProcessTree, TreeGuard};
use baton_run::{Backend, HeldLocks, RunError};
use rustix::event::{PollFd, PollFlags, Timespec};

use super::{fault, lock_request, report_held, take_grant, End, HoldEnd, HoldRequest, Report};

pub(super) fn hold(
    dir: &BatonDir,
    req: &HoldRequest,
    report: &mut dyn FnMut(&Report) -> bool,
) -> Result<HoldEnd, String> {
    let wakeups = Wakeups::install(req)?;
    let watched = watch_caller(req)?;
    let backend =
        Backend::open(dir, req.backend.as_deref()).map_err(|e| baton_lock::one_line(&e))?;
    let guard_spec = backend.hold_guard();
    let Some((result, lost)) = wait_for_grant(backend, req, &wakeups, watched.as_ref())? else {
        return Ok(HoldEnd::Abandoned);
    };
    let Some(guard) = take_grant(result, req, report)? else {
        return Ok(HoldEnd::Done);
    };
    let mut guarded = match Guarded::start(req, &guard, &guard_spec, watched.as_ref()) {
        Ok(g) => g,
        Err(e) => {
            let _ = guard.release();
            return Err(e);
        }
    };
    if !report_held(&guard, req, report) {
        // `acquire` died before it could print the token: nobody knows the
        // lock is held, so nobody would release it. Let go at once.
        guard.release().map_err(|e| e.to_string())?;
        if let Some(g) = guarded.guardian {
            g.disarm();
        }
        return Ok(HoldEnd::Abandoned);
    }
    let end = guarded.wait_for_end(req, &guard, &wakeups, &lost, watched.as_ref());
    let_go(end, req, guard, guarded, watched.as_ref())?;
    Ok(HoldEnd::Done)
}

/// The self-pipes the holder's signals write to: TERM, INT and HUP (stop),
/// and USR1 (`baton lock release`: the caller is done, just let go).
struct Wakeups {
    stop: UnixStream,
    release: UnixStream,
}

impl Wakeups {
    /// Installed first, so that a release request that arrives early is not lost.
    fn install(req: &HoldRequest) -> Result<Wakeups, String> {
        let signals = fault(req, "set up its signal handling");
        let (stop, stop_tx) = UnixStream::pair().map_err(signals)?;
        stop.set_nonblocking(true).map_err(signals)?;
        for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            let tx = stop_tx.try_clone().map_err(signals)?;
            signal_hook::low_level::pipe::register(sig, tx).map_err(signals)?;
        }
        let (release, release_tx) = UnixStream::pair().map_err(signals)?;
        release.set_nonblocking(true).map_err(signals)?;
        signal_hook::low_level::pipe::register(libc::SIGUSR1, release_tx).map_err(signals)?;
        Ok(Wakeups { stop, release })
    }
}

/// The caller's pidfd, checked after opening to be the process the hold is
/// for (the pidfd then pins it); an error if it has already exited.
fn watch_caller(req: &HoldRequest) -> Result<Option<ExitWatch>, String> {
    let Some((pid, start)) = req.caller else {
        return Ok(None);
    };
    match ExitWatch::open(pid) {
        Some(fd) if start_time(pid) == Some(start) => Ok(Some(fd)),
        _ => Err(format!(
            "lock '{}' was not acquired: the process to hold it for (pid {pid}) has already exited",
            req.name
        )),
    }
}

/// The acquisition's answer, as the waiting thread sent it.
type Answer = Result<Result<HeldLocks, RunError>, RecvError>;

/// The socket written to when the database session holding the lock ends,
/// kept open with its writer, so that only a written byte counts (the local
/// backend drops its unused callback: never a hang-up).
struct Lost {
    rx: UnixStream,
    _open: UnixStream,
}

/// Waits for the lock in a thread, so that this thread can give up when the
/// requester (the `acquire` process that started us and waits for our
/// report) or the caller dies, or a signal asks us to stop: returning
/// `None` ends the process, which is what takes us out of the line.
fn wait_for_grant(
    backend: Backend,
    req: &HoldRequest,
    wakeups: &Wakeups,
    watched: Option<&ExitWatch>,
) -> Result<Option<(Answer, Lost)>, String> {
    let failed = fault(req, "wait for the lock");
    let requester =
        rustix::process::getppid().and_then(|p| ExitWatch::open(p.as_raw_nonzero().get()));
    let (done_rx, done_tx) = UnixStream::pair().map_err(failed)?;
    let (lost_rx, lost_tx) = UnixStream::pair().map_err(failed)?;
    let lost = Lost {
        _open: lost_tx.try_clone().map_err(failed)?,
        rx: lost_rx,
    };
    let (result_tx, result_rx) = std::sync::mpsc::channel();
    let lock_req = lock_request(req);
    let span = tracing::Span::current();
    std::thread::spawn(move || {
        let _span = span.entered();
        let result = backend.acquire(&[lock_req], move || {
            let _ = (&lost_tx).write_all(b"x");
        });
        let _ = result_tx.send(result);
        drop(done_tx); // wakes the poll below with end-of-file
    });
    loop {
        let mut fds = vec![
            PollFd::new(&done_rx, PollFlags::IN),
            PollFd::new(&wakeups.stop, PollFlags::IN),
            PollFd::new(&wakeups.release, PollFlags::IN),
        ];
        fds.extend(watched.map(|w| PollFd::new(w, PollFlags::IN)));
        fds.extend(requester.as_ref().map(|r| PollFd::new(r, PollFlags::IN)));
        match rustix::event::poll(&mut fds, None) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(failed(e.into())),
        }
        if fds[0].revents().is_empty() {
            // Asked to stop, or everyone who wanted the lock is gone.
            return Ok(None);
        }
        return Ok(Some((result_rx.recv(), lost)));
    }
}

/// What follows and guards the script while the lock is held for it.
struct Guarded<'a> {
    spec: &'a GuardSpec,
    /// What the script starts from now on: when it dies, that is stopped
    /// before the lock is handed over.
    tree: Option<ProcessTree>,
    /// The script dies with this holder: a guardian follows it too and, if
    /// this process dies (or, on a database, stops proving its session
    /// within the fence), kills it and what it started at once. It keeps
    /// the lock files open meanwhile, so their kernel locks outlive this
    /// process until the script is stopped: the next holder never starts
    /// beside it.
    guardian: Option<TreeGuard>,
}

impl<'a> Guarded<'a> {
    /// Follows the caller's tree and starts its guardian; an error (the
    /// caller releases the lock) if the guardian cannot start.
    fn start(
        req: &HoldRequest,
        guard: &HeldLocks,
        spec: &'a GuardSpec,
        watched: Option<&ExitWatch>,
    ) -> Result<Guarded<'a>, String> {
        let tree = req
            .caller
            .zip(watched)
            .and_then(|((pid, start), _)| ProcessTree::follow(pid, start));
        let guardian = match &tree {
            Some(tree) => {
                guard.vouch_to(&spec.fence);
                match TreeGuard::start(spec, tree, &guard.lock_files()) {
                    Ok(g) => Some(g),
                    Err(e) => {
                        return Err(format!(
                            "lock '{}' was not acquired: the background holder could not start the guardian of the script it holds it for: {e}",
                            req.name
                        ));
                    }
                }
            }
            None => None,
        };
        Ok(Guarded {
            spec,
            tree,
            guardian,
        })
    }

    /// Holds until the hold ends: `--ttl`, a signal, the lost session, a
    /// release request or the caller's exit. Meanwhile it collects what the
    /// script starts, and replaces a guardian that someone killed.
    fn wait_for_end(
        &mut self,
        req: &HoldRequest,
        guard: &HeldLocks,
        wakeups: &Wakeups,
        lost: &Lost,
        watched: Option<&ExitWatch>,
    ) -> End {
        let deadline = req.ttl.map(|ttl| Instant::now() + ttl);
        loop {
            let now = Instant::now();
            if deadline.is_some_and(|d| d <= now) {
                return End::Forced; // ttl elapsed
            }
            // Wake up to collect what the script started, and at the deadline.
            let wake = [
                deadline.map(|d| d.saturating_duration_since(now)),
                self.tree.as_ref().map(|_| FOLLOW_EVERY),
            ]
            .into_iter()
            .flatten()
            .min();
            let timeout = wake.map(|left| Timespec {
                tv_sec: left.as_secs() as i64,
                tv_nsec: i64::from(left.subsec_nanos()),
            });
            let mut fds = vec![
                PollFd::new(&wakeups.stop, PollFlags::IN),
                PollFd::new(&lost.rx, PollFlags::IN),
                PollFd::new(&wakeups.release, PollFlags::IN),
            ];
            fds.extend(watched.map(|w| PollFd::new(w, PollFlags::IN)));
            // Last: the guardian, whose death (someone killed it) is not an end.
            let guardian_at = fds.len();
            let guardian_fd = self.guardian.as_ref().and_then(TreeGuard::exit_fd);
            fds.extend(
                guardian_fd
                    .as_ref()
                    .map(|fd| PollFd::new(fd, PollFlags::IN)),
            );
            let polled = rustix::event::poll(&mut fds, timeout.as_ref());
            let ready = |i: usize| fds.get(i).is_some_and(|fd| !fd.revents().is_empty());
            let guardian_died = guardian_fd.is_some() && ready(guardian_at);
            let forced = ready(0) || ready(1);
            let released = ready(2);
            let caller_ended = watched.is_some() && ready(3);
            drop(fds);
            if guardian_died {
                if !self.replace_guardian(guard) {
                    return End::Forced;
                }
                continue;
            }
            match polled {
                Ok(0) => {
                    if let Some(t) = self.tree.as_mut() {
                        t.refresh();
                    }
                }
                // TERM/INT/HUP, or the lock was lost with its session.
                Ok(_) if forced => return End::Forced,
                Ok(_) if released => return End::Released,
                // The caller ended without `baton lock release`.
                Ok(_) if caller_ended => return End::CallerGone,
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(_) => return End::Forced,
            }
        }
    }

    /// Never unguarded: a new guardian, armed as the first was (with the
    /// members of the script's group recorded when following began).
    /// `false` if none can be started: the hold then ends as forced.
    fn replace_guardian(&mut self, guard: &HeldLocks) -> bool {
        tracing::warn!("the script's guardian exited; starting another");
        let _ = self.guardian.take().map(TreeGuard::disarm);
        match self
            .tree
            .as_ref()
            .map(|t| TreeGuard::start(self.spec, t, &guard.lock_files()))
        {
            Some(Ok(g)) => {
                self.guardian = Some(g);
                true
            }
            Some(Err(e)) => {
                tracing::error!(error = %e, "cannot start another guardian: ending the hold");
                false
            }
            None => true,
        }
    }
}

/// Lets go of the lock the way `end` says, then disarms the guardian: until
/// the locks are let go, the guardian keeps them if this process dies.
fn let_go(
    end: End,
    req: &HoldRequest,
    guard: HeldLocks,
    mut guarded: Guarded<'_>,
    watched: Option<&ExitWatch>,
) -> Result<(), String> {
    let let_go = match end {
        // The script (if still running) was stopped with TERM: the next
        // holder learns `killed:SIGTERM`.
        End::Forced => {
            stop_caller_first(req, watched, guarded.tree.take());
            guard.release_with(Some(baton_lock::HolderOutcome::of_signal(libc::SIGTERM)))
        }
        // Asked to let go: the script must not be killed if this process
        // dies now, so the guardian goes first (the kernel then releases
        // the lock with this process).
        End::Released => {
            if let Some(g) = guarded.guardian.take() {
                g.disarm();
            }
            guard.release()
        }
        // The next holder learns that the script ended under the lock.
        End::CallerGone => {
            stop_caller_first(req, watched, guarded.tree.take());
            guard.abandon()
        }
    };
    if let Some(g) = guarded.guardian {
        g.disarm();
    }
    let_go.map_err(|e| baton_lock::one_line(&e))
}

/// How often the holder collects the processes the script started while it
/// holds the lock for it (a few system calls per process of the script).
const FOLLOW_EVERY: Duration = Duration::from_millis(25);

/// The hold ends while the caller, or what it started, may still be working
/// under the lock (`--ttl` elapsed, `break`, a TERM from anyone, the lost
/// session, the script's own exit or death): stop the caller and everything
/// it started first (TERM, grace, KILL, identity-checked), so that nothing
/// works beside the next holder. If it cannot be stopped (another user's
/// process), the hold lasts until the caller exits by itself.
fn stop_caller_first(
    req: &HoldRequest,
    watched: Option<&ExitWatch>,
    tree: Option<baton_proc::ProcessTree>,
) {
    let (Some(tree), Some(pidfd)) = (tree, watched) else {
        return;
    };
    let grace = req.grace.unwrap_or(Duration::from_secs(10));
    if !tree.terminate(grace) {
        let mut fds = [PollFd::new(pidfd, PollFlags::IN)];
        while matches!(
            rustix::event::poll(&mut fds, None),
            Err(rustix::io::Errno::INTR)
        ) {}
    }
}
