//! The background holder's wait on Windows, which has no signals: every
//! source of an end is a thread sending one event on a channel — the
//! waiting acquisition, `baton lock release` (an exit request, see
//! `baton_ipc::on_exit_request`), the lost database session, and the exit
//! of the caller and of the requester (a handle on the process, checked by
//! its creation time, so a reused pid is never mistaken for it).
//!
//! What differs from unix: `baton lock break` terminates the holder (the
//! kernel releases the lock), there is no TERM to catch; what the caller
//! started is not followed (no process tree is kept), so when the caller
//! has to be stopped first (`--ttl`, a lost session) only its own process
//! is terminated, identity-checked.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use baton_lock::{start_time, BatonDir};
use baton_proc::ProcessId;
use baton_run::Backend;

use super::{fault, lock_request, report_held, take_grant, End, HoldEnd, HoldRequest, Report};

/// What ends a wait of the holder.
enum Event {
    /// The acquisition ended (its result is on its own channel).
    Acquired,
    /// `baton lock release`.
    Release,
    /// The database session holding the lock ended.
    Lost,
    /// The caller exited.
    CallerGone,
    /// The `acquire` process waiting for the report exited.
    RequesterGone,
}

/// Sends `event` on `tx` once process `id` has exited.
fn on_exit(id: ProcessId, tx: mpsc::Sender<Event>, event: Event) {
    let _ = std::thread::Builder::new()
        .name("baton-hold-watch".into())
        .spawn(move || {
            if id.wait_exited(None).unwrap_or(true) {
                let _ = tx.send(event);
            }
        });
}

pub(super) fn hold(
    dir: &BatonDir,
    req: &HoldRequest,
    report: &mut dyn FnMut(&Report) -> bool,
) -> Result<HoldEnd, String> {
    let fault = |what: &'static str| fault(req, what);
    let (tx, rx) = mpsc::channel();
    // The release request first, so that one arriving early is not lost.
    let release = tx.clone();
    let _release = baton_ipc::on_exit_request(move || {
        let _ = release.send(Event::Release);
    })
    .map_err(fault("listen for `baton lock release`"))?;
    if let Some((pid, start)) = req.caller {
        let caller = ProcessId {
            pid,
            start_time: start,
        };
        if !caller.is_running() {
            return Err(format!(
                "lock '{}' was not acquired: the process to hold it for (pid {pid}) has already exited",
                req.name
            ));
        }
        on_exit(caller, tx.clone(), Event::CallerGone);
    }
    // The `acquire` process that started us waits for our report; if it is
    // gone (Ctrl-C, a timeout), nobody wants the lock any more. It is our
    // parent if a process with its pid started before us.
    let me = ProcessId::current();
    let requester = baton_lock::parent_of(std::process::id() as i32)
        .and_then(ProcessId::of)
        .filter(|p| me.is_some_and(|me| p.start_time <= me.start_time));
    if let Some(requester) = requester {
        on_exit(requester, tx.clone(), Event::RequesterGone);
    }
    let backend =
        Backend::open(dir, req.backend.as_deref()).map_err(|e| baton_lock::one_line(&e))?;
    let lock_req = lock_request(req);
    // Wait for the lock in a thread, so that this one can give up when the
    // requester or the caller exits or a release comes: returning ends the
    // process, which takes the waiting thread out of the line.
    let (result_tx, result_rx) = mpsc::channel();
    let (done, lost) = (tx.clone(), tx);
    let span = tracing::Span::current();
    std::thread::spawn(move || {
        let _span = span.entered();
        let result = backend.acquire(&[lock_req], move || {
            let _ = lost.send(Event::Lost);
        });
        let _ = result_tx.send(result);
        let _ = done.send(Event::Acquired);
    });
    loop {
        match rx.recv() {
            Ok(Event::Acquired) => break,
            Ok(Event::Lost) => continue,
            // Released before the grant, or everyone who wanted the lock is
            // gone: the process ends, out of the line.
            Ok(_) | Err(_) => return Ok(HoldEnd::Abandoned),
        }
    }
    let Some(guard) = take_grant(result_rx.recv(), req, report)? else {
        return Ok(HoldEnd::Done);
    };
    let told = report_held(&guard, req, report);
    if !told {
        // `acquire` died before it could print the token: nobody knows the
        // lock is held, so nobody would release it. Let go at once.
        guard.release().map_err(|e| e.to_string())?;
        return Ok(HoldEnd::Abandoned);
    }
    let deadline = req.ttl.map(|ttl| Instant::now() + ttl);
    let end = loop {
        let event = match deadline {
            Some(d) => match rx.recv_timeout(d.saturating_duration_since(Instant::now())) {
                Ok(e) => e,
                Err(mpsc::RecvTimeoutError::Timeout) => break End::Forced, // ttl elapsed
                Err(mpsc::RecvTimeoutError::Disconnected) => break End::Forced,
            },
            None => match rx.recv() {
                Ok(e) => e,
                Err(_) => break End::Forced,
            },
        };
        match event {
            Event::Release => break End::Released,
            Event::Lost => break End::Forced,
            Event::CallerGone => break End::CallerGone,
            // `acquire` exits once it has printed the report.
            Event::RequesterGone | Event::Acquired => continue,
        }
    };
    match end {
        End::Forced => {
            stop_caller_first(req);
            guard.release()
        }
        End::Released => guard.release(),
        End::CallerGone => guard.abandon(),
    }
    .map_err(|e| baton_lock::one_line(&e))?;
    Ok(HoldEnd::Done)
}

/// The hold ends while the caller may still work under the lock (`--ttl`
/// elapsed, the lost session): the caller's process is terminated first
/// (identity-checked; Windows cannot ask it to stop), so that it does not
/// work beside the next holder. What it started is not looked for.
fn stop_caller_first(req: &HoldRequest) {
    let Some((pid, start)) = req.caller else {
        return;
    };
    let grace = req.grace.unwrap_or(Duration::from_secs(10));
    let _ = baton_proc::terminate_verified(pid, grace, || start_time(pid) == Some(start));
}
