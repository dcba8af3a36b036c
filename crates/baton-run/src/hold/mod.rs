//! Holding a lock on behalf of a shell script: `baton lock acquire/release`.
//!
//! A script that cannot wrap a command in `baton run` asks for the lock with
//! `baton lock acquire`. That command starts a small background process (the
//! holder: `baton __hold`, detached in its own process group, stdio on
//! /dev/null so `$(baton lock acquire ...)` returns at once) which takes the
//! lock, reports the token on a pipe, and keeps the lock until one of:
//! `baton lock release` (which sends it SIGTERM), its `--ttl` elapsing, or the
//! death of the process that called `acquire` (watched through a pidfd, with
//! the caller's start time checked so a reused pid is never mistaken for it).
//! The kernel releases the lock if the holder itself is killed.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use baton_lock::{start_time, BatonDir, LockError, LockName, LockRequest, Mode, WaitPolicy};
use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::process::{pidfd_open, Pid, PidfdFlags};
use serde::{Deserialize, Serialize};

use crate::backend::Backend;
use crate::error::RunError;

mod stop;
pub use stop::{BreakReport, BrokenHolder, ReleaseReport};

/// Environment variable carrying the request to the background holder.
pub const HOLD_REQUEST_ENV: &str = "BATON_HOLD_REQUEST";

/// What the background holder should take and for how long.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HoldRequest {
    /// The lock.
    pub name: String,
    /// Take it shared.
    pub shared: bool,
    /// Number of semaphore slots (1 = exclusive/shared lock).
    pub max: u32,
    /// How long to wait: `None` forever, `Some(0)` not at all.
    pub wait_ms: Option<u64>,
    /// Release after this long.
    pub ttl_ms: Option<u64>,
    /// Recorded owner.
    pub owner: Option<String>,
    /// Recorded operation.
    pub operation: Option<String>,
    /// Release when this process (the caller of `acquire`) exits.
    pub watch_pid: Option<i32>,
    /// Start time of `watch_pid`, to tell a reused pid apart.
    pub watch_start_time: Option<u64>,
    /// Time between TERM and KILL when the caller must be stopped before the
    /// hold ends (ttl, break); 10 s when absent.
    #[serde(default)]
    pub grace_ms: Option<u64>,
    /// The run id to record; a new one when absent.
    #[serde(default)]
    pub run_id: Option<String>,
    /// Let the holder write its diagnostics (`-v`) to the caller's stderr
    /// until it reports; after the report its stderr is /dev/null, so that
    /// `$(baton lock acquire ...)` and pipes on stderr do not wait for it.
    #[serde(default)]
    pub share_stderr: bool,
    /// Global arguments given to the holder before `__hold`, such as the
    /// caller's `-vv --log-format json`.
    #[serde(default)]
    pub holder_args: Vec<String>,
    /// The PostgreSQL URL the lock lives in (`--backend`); the baton dir when absent.
    #[serde(default)]
    pub backend: Option<String>,
}

/// The process whose exit should release a lock taken by `baton lock
/// acquire`, with its start time: the caller, i.e. the parent process —
/// except inside a command substitution such as `T=$(baton lock acquire x ||
/// exit 1)` or `T=$(baton lock acquire x --json | jq -r .token)`, where the
/// parent is a short-lived subshell. A subshell of a command substitution
/// is a fork of the script's shell (same command line, no exec) that writes
/// into a pipe its parent reads, so we walk up past every such ancestor. A
/// program whose output its parent captures (`OUT=$(./step.sh)`, an agent's
/// `subprocess.run(..., capture_output=True)`) is a program of its own, not
/// a subshell, and is watched; so is a script piped elsewhere (`| tee`).
/// Wrappers that fork the command and wait for it (`timeout`, `xargs`) are
/// walked past too: they end with `acquire`, not with the script.
pub fn caller_to_watch() -> Option<(i32, u64)> {
    let mut pid = rustix::process::getppid()?.as_raw_nonzero().get();
    for _ in 0..16 {
        let Some(parent) = baton_lock::parent_of(pid).filter(|p| *p > 1) else {
            break;
        };
        if !(is_substitution_subshell(pid, parent) || is_forking_wrapper(pid)) {
            break;
        }
        pid = parent;
    }
    Some((pid, start_time(pid)?))
}

/// `pid` is a forked subshell of `parent` writing into a pipe that `parent` reads.
fn is_substitution_subshell(pid: i32, parent: i32) -> bool {
    let Some(out) = std::fs::read_link(format!("/proc/{pid}/fd/1")).ok() else {
        return false;
    };
    let cmdline = |p: i32| std::fs::read(format!("/proc/{p}/cmdline")).ok();
    out.to_string_lossy().starts_with("pipe:")
        && cmdline(pid).is_some_and(|c| Some(c) == cmdline(parent))
        && reads(parent, &out)
}

/// `pid` runs a tool that starts the command as its child and exits with it.
fn is_forking_wrapper(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .is_ok_and(|c| matches!(c.trim(), "timeout" | "xargs" | "time"))
}

/// Whether process `pid` has the read end of pipe `link` (`pipe:[1234]`)
/// open. Both ends have the same link; the access mode in `fdinfo` tells
/// them apart (a parent that merely shares the child's stdout holds the
/// write end).
fn reads(pid: i32, link: &Path) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path()).is_ok_and(|l| l == link) && {
            let info = format!("/proc/{pid}/fdinfo/{}", fd.file_name().to_string_lossy());
            std::fs::read_to_string(info).is_ok_and(|text| {
                text.lines()
                    .find_map(|l| l.strip_prefix("flags:"))
                    .and_then(|f| u32::from_str_radix(f.trim(), 8).ok())
                    .is_some_and(|flags| flags & 0o3 != 0o1) // not O_WRONLY
            })
        }
    })
}

/// What the holder reports once it holds the lock.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Held {
    /// Fencing token of the grant.
    pub token: u64,
    /// Run id recorded in the metadata.
    pub run_id: String,
    /// Pid of the background holder.
    pub holder_pid: i32,
    /// The lock's name.
    pub name: String,
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
pub fn start_holder(exe: &Path, dir: &BatonDir, req: &HoldRequest) -> Result<Held, RunError> {
    let json = serde_json::to_string(req).map_err(|e| RunError::Io {
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

/// The body of the background holder; returns its exit code.
pub fn serve_hold(dir: &BatonDir) -> i32 {
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
        .and_then(|s| serde_json::from_str(&s).ok())
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
            return 125;
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
            125
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
    let watched = match (req.watch_pid, req.watch_start_time) {
        (Some(pid), Some(start)) => {
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
        _ => None,
    };
    let name = LockName::new(req.name.clone()).map_err(|e| baton_lock::one_line(&e))?;
    let mode = if req.shared {
        Mode::Shared
    } else {
        Mode::Semaphore(req.max)
    };
    let wait = match req.wait_ms {
        None => WaitPolicy::Forever,
        Some(ms) => WaitPolicy::from(Duration::from_millis(ms)),
    };
    let backend =
        Backend::open(dir, req.backend.as_deref()).map_err(|e| baton_lock::one_line(&e))?;
    let mut lock_req = LockRequest::new(name.clone())
        .mode(mode)
        .wait(wait)
        .kind(baton_lock::HolderKind::Hold);
    lock_req.owner = req.owner.clone();
    lock_req.operation = req.operation.clone();
    lock_req.run_id = req.run_id.clone();
    lock_req.acquired_for = req.watch_pid.and_then(baton_lock::ProcessIdentity::of_pid);
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
    let token = guard.tokens().first().map_or(0, |(_, t)| *t);
    let told = report(&Report::Held(Held {
        token,
        run_id: guard.run_id().unwrap_or_default(),
        holder_pid: std::process::id() as i32,
        name: name.to_string(),
    }));
    if !told {
        // `acquire` died before it could print the token: nobody knows the
        // lock is held, so nobody would release it. Let go at once.
        guard.release().map_err(|e| e.to_string())?;
        return Ok(HoldEnd::Abandoned);
    }
    let deadline = req
        .ttl_ms
        .map(|ms| Instant::now() + Duration::from_millis(ms));
    // Why the hold ends: only `release` and the caller's own exit end it
    // while the caller may still work under the lock.
    let forced = loop {
        let timeout = deadline.map(|d| {
            let left = d.saturating_duration_since(Instant::now());
            Timespec {
                tv_sec: left.as_secs() as i64,
                tv_nsec: i64::from(left.subsec_nanos()),
            }
        });
        if timeout.is_some_and(|t| t.tv_sec == 0 && t.tv_nsec == 0) {
            break true; // ttl elapsed
        }
        let mut fds = vec![
            PollFd::new(&sig_rx, PollFlags::IN),
            PollFd::new(&lost_rx, PollFlags::IN),
            PollFd::new(&release_rx, PollFlags::IN),
        ];
        if let Some(w) = &watched {
            fds.push(PollFd::new(w, PollFlags::IN));
        }
        match rustix::event::poll(&mut fds, timeout.as_ref()) {
            Ok(0) => break true, // ttl elapsed
            // TERM/INT/HUP, or the lock was lost with its session: forced
            Ok(_) => break !fds[0].revents().is_empty() || !fds[1].revents().is_empty(),
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => break true,
        }
    };
    if forced {
        stop_caller_first(req, watched.as_ref());
    }
    guard.release().map_err(|e| baton_lock::one_line(&e))?;
    Ok(HoldEnd::Done)
}

/// The hold ends while the caller may still be working under the lock
/// (`--ttl` elapsed, `break`, a TERM from anyone): stop the caller first
/// (TERM, grace, KILL, identity-checked), so that it never works beside the
/// next holder. If it cannot be stopped (another user's process), the hold
/// lasts until it exits by itself.
fn stop_caller_first(req: &HoldRequest, watched: Option<&rustix::fd::OwnedFd>) {
    let (Some(pid), Some(start), Some(pidfd)) = (req.watch_pid, req.watch_start_time, watched)
    else {
        return;
    };
    let grace = Duration::from_millis(req.grace_ms.unwrap_or(10_000));
    // The script and everything it started: its children work under the lock too.
    if !baton_proc::terminate_tree(pid, start, grace) {
        let mut fds = [PollFd::new(pidfd, PollFlags::IN)];
        while matches!(
            rustix::event::poll(&mut fds, None),
            Err(rustix::io::Errno::INTR)
        ) {}
    }
}
