//! The background holder's wait on unix: signals through a self-pipe
//! (`SIGUSR1` is `baton lock release`), the caller and the requester
//! through pidfds, and what the caller starts followed in its process tree.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use baton_lock::{start_time, BatonDir};
use baton_proc::ExitWatch;
use baton_run::Backend;
use rustix::event::{PollFd, PollFlags, Timespec};

use super::{fault, lock_request, report_held, take_grant, End, HoldEnd, HoldRequest, Report};

pub(super) fn hold(
    dir: &BatonDir,
    req: &HoldRequest,
    report: &mut dyn FnMut(&Report) -> bool,
) -> Result<HoldEnd, String> {
    let fault = |what: &'static str| fault(req, what);
    let signals = fault("set up its signal handling");
    // Signals first, so a release request that arrives early is not lost.
    let (sig_rx, sig_tx) = UnixStream::pair().map_err(signals)?;
    sig_rx.set_nonblocking(true).map_err(signals)?;
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        let tx = sig_tx.try_clone().map_err(signals)?;
        signal_hook::low_level::pipe::register(sig, tx).map_err(signals)?;
    }
    // SIGUSR1 is `baton lock release`: the caller is done, just let go.
    let (release_rx, release_tx) = UnixStream::pair().map_err(signals)?;
    release_rx.set_nonblocking(true).map_err(signals)?;
    signal_hook::low_level::pipe::register(libc::SIGUSR1, release_tx).map_err(signals)?;
    let watched = match req.caller {
        Some((pid, start)) => {
            let pidfd = ExitWatch::open(pid);
            // Checked after opening: the pidfd now pins the process we verified.
            match pidfd {
                Some(fd) if start_time(pid) == Some(start) => Some(fd),
                _ => {
                    return Err(format!(
                        "lock '{}' was not acquired: the process to hold it for (pid {pid}) has already exited",
                        req.name
                    ))
                }
            }
        }
        None => None,
    };
    let backend =
        Backend::open(dir, req.backend.as_deref()).map_err(|e| baton_lock::one_line(&e))?;
    let guard_spec = backend.hold_guard();
    let lock_req = lock_request(req);
    // The `acquire` process that started us waits for our report; if it is
    // gone (Ctrl-C, `timeout`), nobody wants the lock any more.
    let requester =
        rustix::process::getppid().and_then(|p| ExitWatch::open(p.as_raw_nonzero().get()));
    // Wait for the lock in a thread, so that this thread can give up when the
    // requester or the caller dies or a signal asks us to stop: exiting the
    // process is what takes us out of the line.
    let (done_rx, done_tx) = UnixStream::pair().map_err(fault("wait for the lock"))?;
    // Written to when the database session holding the lock ends.
    let (lost_rx, lost_tx) = UnixStream::pair().map_err(fault("wait for the lock"))?;
    // Kept open here, so that the read end never sees a hang-up when the
    // local backend drops its (unused) callback: only a written byte counts.
    let _lost_open = lost_tx.try_clone().map_err(fault("wait for the lock"))?;
    let (result_tx, result_rx) = std::sync::mpsc::channel();
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
            PollFd::new(&sig_rx, PollFlags::IN),
            PollFd::new(&release_rx, PollFlags::IN),
        ];
        if let Some(w) = &watched {
            fds.push(PollFd::new(w, PollFlags::IN));
        }
        if let Some(r) = &requester {
            fds.push(PollFd::new(r, PollFlags::IN));
        }
        match rustix::event::poll(&mut fds, None) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(fault("wait for the lock")(e.into())),
        }
        if fds[0].revents().is_empty() {
            // Asked to stop, or everyone who wanted the lock is gone: return,
            // and the process ends (with the waiting thread, out of the line).
            return Ok(HoldEnd::Abandoned);
        }
        break;
    }
    let Some(guard) = take_grant(result_rx.recv(), req, report)? else {
        return Ok(HoldEnd::Done);
    };
    // Follow what the script starts from now on: when it dies, that is
    // stopped before the lock is handed over (see `ProcessTree`).
    let mut tree = req
        .caller
        .zip(watched.as_ref())
        .and_then(|((pid, start), _)| baton_proc::ProcessTree::follow(pid, start));
    // The script dies with this holder: a guardian follows it too and, if
    // this process dies (or, on a database, stops proving its session
    // within the fence), kills it and what it started at once. It keeps the
    // lock files open meanwhile, so their kernel locks outlive this process
    // until the script is stopped: the next holder never starts beside it.
    let mut guardian = match &tree {
        Some(tree) => {
            guard.vouch_to(&guard_spec.fence);
            match baton_proc::TreeGuard::start(&guard_spec, tree, &guard.lock_files()) {
                Ok(g) => Some(g),
                Err(e) => {
                    let _ = guard.release();
                    return Err(format!(
                        "lock '{}' was not acquired: the background holder could not start the guardian of the script it holds it for: {e}",
                        req.name
                    ));
                }
            }
        }
        None => None,
    };
    let told = report_held(&guard, req, report);
    if !told {
        // `acquire` died before it could print the token: nobody knows the
        // lock is held, so nobody would release it. Let go at once.
        guard.release().map_err(|e| e.to_string())?;
        if let Some(g) = guardian {
            g.disarm();
        }
        return Ok(HoldEnd::Abandoned);
    }
    let deadline = req.ttl.map(|ttl| Instant::now() + ttl);
    let end = loop {
        let now = Instant::now();
        if deadline.is_some_and(|d| d <= now) {
            break End::Forced; // ttl elapsed
        }
        // Wake up to collect what the script started, and at the deadline.
        let wake = [
            deadline.map(|d| d.saturating_duration_since(now)),
            tree.as_ref().map(|_| FOLLOW_EVERY),
        ]
        .into_iter()
        .flatten()
        .min();
        let timeout = wake.map(|left| Timespec {
            tv_sec: left.as_secs() as i64,
            tv_nsec: i64::from(left.subsec_nanos()),
        });
        let mut fds = vec![
            PollFd::new(&sig_rx, PollFlags::IN),
            PollFd::new(&lost_rx, PollFlags::IN),
            PollFd::new(&release_rx, PollFlags::IN),
        ];
        if let Some(w) = &watched {
            fds.push(PollFd::new(w, PollFlags::IN));
        }
        // Last: the guardian, whose death (someone killed it) is not an end.
        let guardian_at = fds.len();
        let guardian_fd = guardian.as_ref().and_then(baton_proc::TreeGuard::exit_fd);
        if let Some(fd) = &guardian_fd {
            fds.push(PollFd::new(fd, PollFlags::IN));
        }
        let polled = rustix::event::poll(&mut fds, timeout.as_ref());
        let guardian_died = fds
            .get(guardian_at)
            .is_some_and(|fd| !fd.revents().is_empty());
        let forced = !fds[0].revents().is_empty() || !fds[1].revents().is_empty();
        let released = !fds[2].revents().is_empty();
        let caller_ended = guardian_at > 3 && !fds[3].revents().is_empty();
        drop(fds);
        if guardian_died {
            // Never unguarded: a new guardian, armed as the first was (with
            // the members of the script's group recorded when following
            // began). If none can be started, the hold ends as forced.
            tracing::warn!("the script's guardian exited; starting another");
            let _ = guardian.take().map(baton_proc::TreeGuard::disarm);
            match tree
                .as_ref()
                .map(|t| baton_proc::TreeGuard::start(&guard_spec, t, &guard.lock_files()))
            {
                Some(Ok(g)) => guardian = Some(g),
                Some(Err(e)) => {
                    tracing::error!(error = %e, "cannot start another guardian: ending the hold");
                    break End::Forced;
                }
                None => {}
            }
            continue;
        }
        match polled {
            Ok(0) => {
                if let Some(t) = tree.as_mut() {
                    t.refresh();
                }
            }
            // TERM/INT/HUP, or the lock was lost with its session: forced
            Ok(_) if forced => break End::Forced,
            Ok(_) if released => break End::Released,
            // The caller ended without `baton lock release`.
            Ok(_) if caller_ended => break End::CallerGone,
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => break End::Forced,
        }
    };
    let let_go = match end {
        // The script (if still running) was stopped with TERM: the next
        // holder learns `killed:SIGTERM`.
        End::Forced => {
            stop_caller_first(req, watched.as_ref(), tree);
            guard.release_with(Some(baton_lock::HolderOutcome::of_signal(libc::SIGTERM)))
        }
        // Asked to let go: the script must not be killed if this process
        // dies now, so the guardian goes first (the kernel then releases
        // the lock with this process).
        End::Released => {
            if let Some(g) = guardian.take() {
                g.disarm();
            }
            guard.release()
        }
        // The next holder learns that the script ended under the lock.
        End::CallerGone => {
            stop_caller_first(req, watched.as_ref(), tree);
            guard.abandon()
        }
    };
    // Only now: until the locks are let go, the guardian keeps them if this
    // process dies.
    if let Some(g) = guardian {
        g.disarm();
    }
    let_go.map_err(|e| baton_lock::one_line(&e))?;
    Ok(HoldEnd::Done)
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
