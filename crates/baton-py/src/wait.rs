//! Waiting for a lock while the caller stays interruptible.
//!
//! A wait runs detached from the interpreter (other threads run). Python
//! runs signal handlers only in the main thread, and only when that thread
//! executes Python code; a thread blocked in the kernel for a lock would
//! deliver Ctrl-C only after the grant. So a wait that has to block runs in
//! a helper thread, and the calling thread waits for its answer in slices
//! of [`SLICE`] (10 ms), between which it checks for signals
//! (`Python::check_signals`: the handlers run, and `KeyboardInterrupt` or
//! any exception a handler raises ends the wait). Ending a wait cancels the
//! helper's request ([`CancelToken`]: the helper leaves the line within
//! milliseconds) and waits for the helper's answer: a grant that raced the
//! cancel is released before the exception propagates, so nothing is held
//! afterwards. A cancel token given by the caller (`Cancel`) ends the wait
//! the same way, from any thread (how the asyncio adapter cancels).
//!
//! The uncontended path makes no thread: the lock is first tried without
//! waiting on the calling thread; only a busy lock is waited for.

use std::sync::mpsc;
use std::time::Duration;

use baton_lock::{BatonDir, Caller, CancelToken, LockError, LockGuard, LockRequest, WaitPolicy};
use pyo3::prelude::*;

use crate::errors::{to_py, Failure};

/// How often a waiting caller checks for signals and cancellation.
const SLICE: Duration = Duration::from_millis(10);

/// A cancel handle for `Lock.acquire(cancel=...)`: `cancel()` makes the
/// wait using it raise `baton.Cancelled`, from any thread, now or later.
#[pyclass(module = "baton", name = "Cancel", frozen)]
#[derive(Default)]
pub(crate) struct Cancel {
    token: CancelToken,
}

#[pymethods]
impl Cancel {
    #[new]
    fn new() -> Cancel {
        Cancel::default()
    }

    /// Cancels every wait using this handle (idempotent).
    fn cancel(&self, py: Python<'_>) {
        py.detach(|| self.token.cancel());
    }

    /// Whether `cancel()` was called.
    #[getter]
    fn cancelled(&self) -> bool {
        self.token.is_cancelled()
    }
}

/// Acquires `req` (its wait policy) in `dir`, interruptible by signals and
/// by `cancel`.
pub(crate) fn acquire(
    py: Python<'_>,
    dir: &BatonDir,
    req: LockRequest,
    cancel: Option<&Cancel>,
) -> PyResult<LockGuard> {
    let user = cancel.map(|c| c.token.clone());
    if user.as_ref().is_some_and(CancelToken::is_cancelled) {
        return Err(to_py(
            py,
            LockError::Cancelled {
                name: req.name.to_string(),
            }
            .into(),
        ));
    }
    if req.wait == WaitPolicy::Immediately {
        return py
            .detach(|| baton_lock::acquire(dir, &req))
            .map_err(|e| to_py(py, e.into()));
    }
    // The fast path: free now, no thread.
    let now = req.clone().wait(WaitPolicy::Immediately);
    match py.detach(|| baton_lock::acquire(dir, &now)) {
        Ok(guard) => return Ok(guard),
        Err(LockError::Busy { .. }) => {}
        Err(e) => return Err(to_py(py, e.into())),
    }
    let name = req.name.to_string();
    let token = CancelToken::new();
    let req = req.cancel(token.clone()).caller(Caller::current());
    let (tx, rx) = mpsc::sync_channel::<Result<LockGuard, LockError>>(1);
    let helper_dir = dir.clone();
    let spawned = std::thread::Builder::new()
        .name("baton-wait".into())
        .spawn(move || {
            // A send to a caller that is gone drops the guard: released.
            let _ = tx.send(baton_lock::acquire(&helper_dir, &req));
        });
    if let Err(e) = spawned {
        return Err(to_py(
            py,
            Failure::Usage(format!("cannot start a thread to wait for the lock: {e}")),
        ));
    }
    let mut rx = rx;
    loop {
        // The receiver moves in and out: it is not Sync.
        let (answer, back) = py.detach(move || (rx.recv_timeout(SLICE), rx));
        rx = back;
        match answer {
            Ok(answer) => return answer.map_err(|e| to_py(py, e.into())),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(to_py(
                    py,
                    Failure::Usage(
                        "the thread waiting for the lock ended without an answer".into(),
                    ),
                ))
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        let stop = match py.check_signals() {
            Err(e) => Some(e),
            Ok(()) if user.as_ref().is_some_and(CancelToken::is_cancelled) => None,
            Ok(()) => continue,
        };
        token.cancel();
        // The helper leaves the line at once; a grant that won the race is
        // dropped here, which releases it.
        let late = py.detach(move || rx.recv());
        return Err(match (stop, late) {
            (Some(e), _) => e,
            (None, Ok(Err(e))) => to_py(py, e.into()),
            (None, _) => to_py(py, LockError::Cancelled { name }.into()),
        });
    }
}
