//! The background holder of `baton lock acquire` (`baton __hold`), a
//! process of its own.
//!
//! A script that cannot wrap a command in `baton run` asks for the lock with
//! `baton lock acquire`. That command starts a small background process (the
//! holder: `baton __hold`, detached in its own process group, stdio on
//! /dev/null so `$(baton lock acquire ...)` returns at once) which takes the
//! lock, reports the token on a pipe, and keeps the lock until one of:
//! `baton lock release` (which sends it SIGUSR1), its `--ttl` elapsing, a
//! TERM, or the death of the process that called `acquire` (watched through
//! a pidfd, with the caller's start time checked so a reused pid is never
//! mistaken for it). If the holder itself is killed, its guardian
//! ([`baton_proc::TreeGuard`]) kills the caller and what it started, and
//! keeps the lock until they are gone. Unless the hold ends with `release`, the caller and everything it
//! started are stopped before the lock is let go: the holder follows what
//! the caller starts while it holds the lock ([`baton_proc::ProcessTree`]),
//! because once the caller has died its children cannot be found from it.
//!
//! This module is the holder's whole process: the request it is started
//! with ([`HoldRequest`], JSON in [`HOLD_REQUEST_ENV`]), its signal
//! handling (process-wide, which is why it lives in the binary and not in
//! `baton-run`), its report and its exit code.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use baton_lock::{start_time, BatonDir, LockError, LockRequest};
use baton_run::{Backend, RunError};
use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::process::{pidfd_open, Pid, PidfdFlags};
use serde::{Deserialize, Serialize};

use crate::exit_codes::BATON_FAILED;

mod request;

use request::WireRequest;
pub(crate) use request::{HoldRequest, HOLD_REQUEST_ENV};
/// What the holder reports once it holds the lock.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub(crate) struct Held {
    /// Fencing token of the grant.
    pub token: u64,
    /// Run id recorded in the metadata.
    pub run_id: String,
    /// Pid of the background holder.
    pub holder_pid: i32,
    /// The lock's name.
    pub name: String,
    /// Whether the holder before this grant ended without releasing (died,
    /// or its script did): the work it did under the lock may be half done.
    #[serde(default)]
    pub previous_holder_died: bool,
    /// That holder, when `previous_holder_died`.
    #[serde(default)]
    pub previous_holder: Option<Box<baton_lock::HolderInfo>>,
}

#[derive(Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
enum Report {
    Held(Held),
    Busy { message: String },
    Failed { message: String },
}

/// Starts the background holder (`exe --dir DIR __hold`) and waits until it
/// holds the lock or gives up.
pub(crate) fn start_holder(
    exe: &Path,
    dir: &BatonDir,
    req: &HoldRequest,
) -> Result<Held, RunError> {
    let json = serde_json::to_string(&WireRequest::from(req)).map_err(|e| RunError::Io {
        op: "cannot encode the request for the background lock holder",
        source: e.into(),
    })?;
    let mut child = Command::new(exe)
        .arg("--dir")
        .arg(dir.path())
        .args(&req.holder_args)
        .arg("__hold")
        .env(HOLD_REQUEST_ENV, json)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(if req.share_stderr {
            Stdio::inherit()
        } else {
            Stdio::null()
        })
        .process_group(0)
        .spawn()
        .map_err(|source| RunError::Io {
            op: "cannot start the background lock holder",
            source,
        })?;
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        BufReader::new(out)
            .read_line(&mut line)
            .map_err(|source| RunError::Io {
                op: "cannot read the background lock holder's report",
                source,
            })?;
    }
    match serde_json::from_str::<Report>(line.trim()) {
        Ok(Report::Held(held)) => Ok(held),
        Ok(Report::Busy { message }) => {
            let _ = child.wait();
            Err(RunError::Holder {
                busy: true,
                message,
            })
        }
        Ok(Report::Failed { message }) => {
            let _ = child.wait();
            Err(RunError::Holder {
                busy: false,
                message,
            })
        }
        Err(_) => {
            use std::os::unix::process::ExitStatusExt;
            let pid = child.id();
            let how = match child.wait() {
                Ok(s) => match (s.code(), s.signal()) {
                    (Some(code), _) => format!("exited with code {code}"),
                    (None, Some(sig)) => format!("was killed by signal {sig}"),
                    (None, None) => "ended".to_string(),
                },
                Err(e) => format!("ended (how is unknown: {e})"),
            };
            Err(RunError::Holder {
                busy: false,
                message: format!(
                    "lock '{}' was not acquired: its background holder (pid {pid}) {how} before reporting whether it got the lock",
                    req.name
                ),
            })
        }
    }
}

/// Warns, once, when the holders that `lock acquire` leaves are never reaped:
/// pid 1 of this PID namespace is a program that is not an init (a container
/// started without `--init`), so every holder that ends stays defunct. The
/// first defunct holder is the evidence; later calls stay quiet. Only in a
/// PID namespace other than the initial one, whose init reaps.
pub(crate) fn warn_if_holders_stay_defunct() {
    use baton_proc::pidns::{current_pid_ns, INITIAL_PID_NS};
    if current_pid_ns().is_none_or(|ns| ns == INITIAL_PID_NS) {
        return;
    }
    let me = std::fs::read_to_string("/proc/self/comm").unwrap_or_default();
    let defunct = baton_proc::procfs::unreaped_by_init()
        .into_iter()
        .filter(|(_, comm)| *comm == me.trim())
        .count();
    if defunct == 1 {
        let init = baton_proc::procfs::stat(1).map_or_else(|| "?".into(), |st| st.comm);
        warnln!(
            "baton: warning: pid 1 ({init}) does not reap the processes it adopts: each background holder of `baton lock acquire` stays defunct when it ends; start the container with an init (`docker run --init`, tini), or take the lock with `baton run --lock`, which leaves none"
        );
    }
}

/// The body of the background holder; returns its exit code.
pub(crate) fn serve_hold(dir: &BatonDir) -> u8 {
    let mut out = std::io::stdout();
    // Whether the report reached `acquire` (it may have been killed).
    let report = |out: &mut std::io::Stdout, r: &Report| -> bool {
        let told = match serde_json::to_string(r) {
            Ok(s) => writeln!(out, "{s}").and_then(|()| out.flush()).is_ok(),
            Err(_) => false,
        };
        // The caller has its answer: stop holding its stderr open (see
        // `HoldRequest::share_stderr`); later diagnostics go nowhere.
        if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
            let _ = rustix::stdio::dup2_stderr(&null);
        }
        told
    };
    let req: HoldRequest = match std::env::var(HOLD_REQUEST_ENV)
        .ok()
        .and_then(|s| serde_json::from_str::<WireRequest>(&s).ok())
        .and_then(|w| HoldRequest::try_from(w).ok())
    {
        Some(r) => r,
        None => {
            let _ = report(
                &mut out,
                &Report::Failed {
                    message: format!(
                        "the background lock holder got no valid request in {HOLD_REQUEST_ENV} (it is started by `baton lock acquire`)"
                    ),
                },
            );
            return BATON_FAILED;
        }
    };
    let run_id = req.run_id.clone().unwrap_or_else(baton_lock::new_run_id);
    let _span = tracing::info_span!("baton", run_id = %run_id).entered();
    tracing::debug!(lock = %req.name, pid = std::process::id(), "background holder started");
    let req = HoldRequest {
        run_id: Some(run_id),
        ..req
    };
    match hold(dir, &req, &mut |r| report(&mut out, r)) {
        Ok(HoldEnd::Done) => 0,
        Ok(HoldEnd::Abandoned) => 1,
        Err(message) => {
            let _ = report(&mut out, &Report::Failed { message });
            BATON_FAILED
        }
    }
}

/// How a background hold ended.
enum HoldEnd {
    /// Held, then released (or never granted: busy, reported).
    Done,
    /// Nobody wanted the lock any more before it was granted.
    Abandoned,
}

fn hold(
    dir: &BatonDir,
    req: &HoldRequest,
    report: &mut dyn FnMut(&Report) -> bool,
) -> Result<HoldEnd, String> {
    // Every error says what failed, on its own: it is what `lock acquire` prints.
    let fault = |what: &'static str| {
        move |e: std::io::Error| {
            format!(
                "the background holder of lock '{}' could not {what}: {e}",
                req.name
            )
        }
    };
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
            let pidfd = Pid::from_raw(pid).and_then(|p| pidfd_open(p, PidfdFlags::empty()).ok());
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
    let mut lock_req = LockRequest::new(req.name.clone())
        .mode(req.mode)
        .wait(req.wait)
        .kind(baton_lock::HolderKind::Hold);
    lock_req.owner = req.owner.clone();
    lock_req.operation = req.operation.clone();
    lock_req.run_id = req.run_id.clone();
    lock_req.acquired_for = req
        .caller
        .and_then(|(pid, _)| baton_lock::ProcessIdentity::of_pid(pid));
    // The `acquire` process that started us waits for our report; if it is
    // gone (Ctrl-C, `timeout`), nobody wants the lock any more.
    let requester =
        rustix::process::getppid().and_then(|p| pidfd_open(p, PidfdFlags::empty()).ok());
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
    let guard = match result_rx.recv() {
        Ok(Ok(g)) => g,
        Ok(Err(e @ RunError::Lock(LockError::Busy { .. }))) => {
            let _ = report(&Report::Busy {
                message: baton_lock::one_line(&e),
            });
            return Ok(HoldEnd::Done);
        }
        // The same message as `baton run` gives for it (e.g. a mode mismatch).
        Ok(Err(e)) => return Err(baton_lock::one_line(&e)),
        Err(_) => {
            let what = "failed: its waiting thread ended without a result";
            return Err(format!(
                "the background holder of lock '{}' {what}",
                req.name
            ));
        }
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
    let guardian = match &tree {
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
    let token = guard.tokens().first().map_or(0, |(_, t)| *t);
    let previous = guard
        .previous_holder_died()
        .map(|r| Box::new(baton_lock::HolderInfo::from_record(r)));
    let told = report(&Report::Held(Held {
        token,
        run_id: guard.run_id().unwrap_or_default(),
        holder_pid: std::process::id() as i32,
        name: req.name.to_string(),
        previous_holder_died: previous.is_some(),
        previous_holder: previous,
    }));
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
    /// Why the hold ended.
    enum End {
        /// `--ttl`, a signal, a lost session: the caller (and what it
        /// started) is stopped first.
        Forced,
        /// `baton lock release`: just let go.
        Released,
        /// The caller exited without releasing: what it started is
        /// stopped, and the next holder learns it died.
        CallerGone,
    }
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
        match rustix::event::poll(&mut fds, timeout.as_ref()) {
            Ok(0) => {
                if let Some(t) = tree.as_mut() {
                    t.refresh();
                }
            }
            // TERM/INT/HUP, or the lock was lost with its session: forced
            Ok(_) if !fds[0].revents().is_empty() || !fds[1].revents().is_empty() => {
                break End::Forced
            }
            Ok(_) if !fds[2].revents().is_empty() => break End::Released,
            // The caller ended without `baton lock release`.
            Ok(_) => break End::CallerGone,
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => break End::Forced,
        }
    };
    let let_go = match end {
        End::Forced => {
            stop_caller_first(req, watched.as_ref(), tree);
            guard.release()
        }
        End::Released => guard.release(),
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
    watched: Option<&rustix::fd::OwnedFd>,
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
