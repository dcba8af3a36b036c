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
//!
//! How it waits differs per platform: `unix.rs` (signals through a
//! self-pipe, pidfds, the caller's process tree) and `windows.rs` (no
//! signals: `lock release` is an exit request on a named event, the caller
//! and requester are watched through process handles, `lock break`
//! terminates the holder).

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use baton_lock::{BatonDir, LockError, LockRequest};
use baton_run::{HeldLocks, RunError};
use serde::{Deserialize, Serialize};

use crate::exit_codes::BATON_FAILED;

mod request;
#[cfg(unix)]
mod unix;
#[cfg(unix)]
use unix::hold;
#[cfg(windows)]
mod windows;
#[cfg(windows)]
use windows::hold;

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
    /// How the holder before this grant ended: `released`,
    /// `failed:<code>`, `killed:<signal>` or `died`; `null` for the first
    /// grant of the lock.
    #[serde(default)]
    pub previous_outcome: Option<baton_lock::HolderOutcome>,
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
    #[cfg(windows)]
    baton_proc::keep_standard_handles_from_children();
    let mut command = Command::new(exe);
    detach(&mut command);
    let mut child = command
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
            let pid = child.id();
            let how = match child.wait() {
                Ok(s) => match (s.code(), signal_of(&s)) {
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

/// The holder leaves the caller's process group (unix), or its console
/// and console process group (Windows: no Ctrl-C of the script's console
/// reaches it, and a console closing does not end it).
#[cfg(unix)]
fn detach(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    command.process_group(0);
}

/// The holder leaves the caller's process group (unix), or its console
/// and console process group (Windows: no Ctrl-C of the script's console
/// reaches it, and a console closing does not end it).
#[cfg(windows)]
fn detach(command: &mut Command) {
    use std::os::windows::process::CommandExt;
    const DETACHED_PROCESS: u32 = 0x0000_0008;
    const CREATE_NEW_PROCESS_GROUP: u32 = 0x0000_0200;
    command.creation_flags(DETACHED_PROCESS | CREATE_NEW_PROCESS_GROUP);
}

/// The signal that ended a process (unix).
#[cfg(unix)]
fn signal_of(s: &std::process::ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    s.signal()
}

/// No signals on Windows.
#[cfg(windows)]
fn signal_of(_: &std::process::ExitStatus) -> Option<i32> {
    None
}

/// Warns, once, when the holders that `lock acquire` leaves are never reaped:
/// pid 1 of this PID namespace is a program that is not an init (a container
/// started without `--init`), so every holder that ends stays defunct. The
/// first defunct holder is the evidence; later calls stay quiet. Only in a
/// PID namespace other than the initial one, whose init reaps.
#[cfg(unix)]
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
pub(crate) fn cmd_hold(dir: &BatonDir) -> u8 {
    let mut out = std::io::stdout();
    // Whether the report reached `acquire` (it may have been killed).
    let report = |out: &mut std::io::Stdout, r: &Report| -> bool {
        let told = match serde_json::to_string(r) {
            Ok(s) => writeln!(out, "{s}").and_then(|()| out.flush()).is_ok(),
            Err(_) => false,
        };
        // The caller has its answer: stop holding its stderr open (see
        // `HoldRequest::share_stderr`); later diagnostics go nowhere.
        #[cfg(unix)]
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

/// Windows: no holder stays defunct (a process that ends is gone once its
/// last handle closes).
#[cfg(windows)]
pub(crate) fn warn_if_holders_stay_defunct() {}

/// How a background hold ended.
enum HoldEnd {
    /// Held, then released (or never granted: busy, reported).
    Done,
    /// Nobody wanted the lock any more before it was granted.
    Abandoned,
}

/// Why a hold ended (every platform's wait ends in one of these).
enum End {
    /// `--ttl`, a signal, a lost session: the caller (and what it started)
    /// is stopped first.
    Forced,
    /// `baton lock release`: just let go.
    Released,
    /// The caller exited without releasing: what it started is stopped,
    /// and the next holder learns it died.
    CallerGone,
}

/// The error of a step of the holder that failed, saying what failed on
/// its own: it is what `lock acquire` prints.
fn fault<'a>(
    req: &'a HoldRequest,
    what: &'static str,
) -> impl Fn(std::io::Error) -> String + Copy + 'a {
    move |e| {
        format!(
            "the background holder of lock '{}' could not {what}: {e}",
            req.name
        )
    }
}

/// The lock request a hold makes for its caller.
fn lock_request(req: &HoldRequest) -> LockRequest {
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
    lock_req
}

/// What the waiting thread brought: the locks, or `None` when the hold ends
/// there (busy: reported to `acquire`); an error is what `acquire` prints.
fn take_grant(
    result: Result<Result<HeldLocks, RunError>, std::sync::mpsc::RecvError>,
    req: &HoldRequest,
    report: &mut dyn FnMut(&Report) -> bool,
) -> Result<Option<HeldLocks>, String> {
    match result {
        Ok(Ok(g)) => Ok(Some(g)),
        Ok(Err(e @ RunError::Lock(LockError::Busy { .. }))) => {
            let _ = report(&Report::Busy {
                message: baton_lock::one_line(&e),
            });
            Ok(None)
        }
        // The same message as `baton run` gives for it (e.g. a mode mismatch).
        Ok(Err(e)) => Err(baton_lock::one_line(&e)),
        Err(_) => Err(format!(
            "the background holder of lock '{}' failed: its waiting thread ended without a result",
            req.name
        )),
    }
}

/// Tells `acquire` the lock is held (token, run id, a holder that died
/// before); whether the report reached it.
fn report_held(
    guard: &HeldLocks,
    req: &HoldRequest,
    report: &mut dyn FnMut(&Report) -> bool,
) -> bool {
    let token = guard.tokens().first().map_or(0, |(_, t)| *t);
    let previous = guard
        .previous_holder_died()
        .map(|r| Box::new(baton_lock::HolderInfo::from_record(r)));
    report(&Report::Held(Held {
        token,
        run_id: guard.run_id().unwrap_or_default(),
        holder_pid: std::process::id() as i32,
        name: req.name.to_string(),
        previous_holder_died: previous.is_some(),
        previous_holder: previous,
        previous_outcome: guard.previous_outcome(),
    }))
}
