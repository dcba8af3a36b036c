//! `baton.Lock`: one holder of a named lock.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use baton_lock::{BatonDir, LockName, LockRequest, Mode, WaitPolicy};
use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::errors::{to_py, usage};
use crate::hold::Hold;
use crate::wait::Cancel;

/// The most slots a semaphore may have (the CLI's `--max` range).
const MAX_SLOTS: u32 = 1_000_000;

/// A named lock shared by every process of the user on the machine (and by
/// the `baton` command): exclusive, shared, or a semaphore of `slots`.
///
/// `Lock(name, *, mode="exclusive", slots=None, baton_dir=None, owner=None,
/// operation=None)`. One object is one holder: `acquire()` waits in line
/// (FIFO) and returns the fencing token; `release()` lets go; `with lock:`
/// does both. Threads that want to exclude each other each use their own
/// `Lock` object.
#[pyclass(module = "baton", name = "Lock", frozen, subclass)]
pub(crate) struct Lock {
    name: LockName,
    mode: Mode,
    dir: BatonDir,
    owner: Option<String>,
    operation: Option<String>,
    hold: Arc<Mutex<Hold>>,
}

impl Lock {
    fn hold(&self) -> MutexGuard<'_, Hold> {
        self.hold.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wait_policy(&self, timeout: Option<f64>, blocking: bool) -> Result<WaitPolicy, String> {
        match (blocking, timeout) {
            (false, None) => Ok(WaitPolicy::Immediately),
            (false, Some(_)) => Err(format!(
                "lock '{}': a timeout cannot be given with blocking=False (which does not wait)",
                self.name
            )),
            (true, None) => Ok(WaitPolicy::Forever),
            (true, Some(t)) if t == f64::INFINITY => Ok(WaitPolicy::Forever),
            (true, Some(t)) => Duration::try_from_secs_f64(t)
                .map(WaitPolicy::from)
                .map_err(|_| {
                    format!(
                        "invalid timeout {t}: a timeout is a number of seconds, 0 or more, or infinity (None also waits forever)"
                    )
                }),
        }
    }
}

#[pymethods]
impl Lock {
    #[new]
    #[pyo3(signature = (name, *, mode="exclusive", slots=None, baton_dir=None, owner=None, operation=None))]
    fn new(
        py: Python<'_>,
        name: &Bound<'_, PyString>,
        mode: &str,
        slots: Option<i64>,
        baton_dir: Option<PathBuf>,
        owner: Option<String>,
        operation: Option<String>,
    ) -> PyResult<Lock> {
        let name = crate::parse_name(py, name)?;
        let mode = match (mode, slots) {
            ("exclusive", None) => Mode::Exclusive,
            ("exclusive", Some(n)) => match u32::try_from(n) {
                Ok(n) if (1..=MAX_SLOTS).contains(&n) => Mode::Semaphore(n).normalized(),
                _ => {
                    return Err(usage(
                        py,
                        format!("invalid slots {n}: a semaphore has 1 to {MAX_SLOTS} slots"),
                    ))
                }
            },
            ("shared", None) => Mode::Shared,
            ("shared", Some(_)) => {
                return Err(usage(
                    py,
                    format!("lock '{name}': slots cannot be given with mode=\"shared\" (a semaphore's holders are exclusive, each in its slot)"),
                ))
            }
            (other, _) => {
                return Err(usage(
                    py,
                    format!("invalid mode {other:?}: a mode is \"exclusive\" or \"shared\""),
                ))
            }
        };
        let dir = py
            .detach(|| BatonDir::resolve(baton_dir.as_deref()))
            .map_err(|e| to_py(py, e.into()))?;
        Ok(Lock {
            name,
            mode,
            dir,
            owner,
            operation,
            hold: Arc::default(),
        })
    }

    /// Waits in line for the lock (forever, at most `timeout` seconds, or
    /// not at all with `blocking=False`) and returns the fencing token;
    /// raises `Busy` if not acquired in time, `Cancelled` if `cancel` was
    /// cancelled, and whatever a signal handler raises (`KeyboardInterrupt`)
    /// within milliseconds of the signal, holding nothing (see `wait.rs`).
    #[pyo3(signature = (timeout=None, blocking=true, *, cancel=None))]
    fn acquire(
        &self,
        py: Python<'_>,
        timeout: Option<f64>,
        blocking: bool,
        cancel: Option<PyRef<'_, Cancel>>,
    ) -> PyResult<u64> {
        let wait = self
            .wait_policy(timeout, blocking)
            .map_err(|m| usage(py, m))?;
        let me = std::process::id();
        {
            let mut hold = self.hold();
            hold.forget_if_inherited();
            if hold.guard.is_some() || hold.waiting.is_some() {
                return Err(usage(
                    py,
                    format!(
                        "lock '{}' is already {} through this Lock object; each holder (each thread) uses its own Lock object",
                        self.name,
                        if hold.guard.is_some() { "held" } else { "being acquired" }
                    ),
                ));
            }
            hold.waiting = Some(me);
        }
        let mut req = LockRequest::new(self.name.clone())
            .mode(self.mode)
            .wait(wait);
        req.owner.clone_from(&self.owner);
        req.operation.clone_from(&self.operation);
        let granted = crate::wait::acquire(py, &self.dir, req, cancel.as_deref());
        let mut hold = self.hold();
        hold.waiting = None;
        let guard = granted?;
        let token = guard.token();
        hold.previous = guard
            .previous_holder_died()
            .and_then(|h| serde_json::to_string(h).ok());
        hold.previous_outcome = guard.previous_outcome().map(ToString::to_string);
        hold.token = Some(token);
        hold.pid = me;
        hold.guard = Some(guard);
        drop(hold);
        crate::fork::register(&self.hold);
        Ok(token)
    }

    /// Releases the lock; raises `Error` if this process does not hold it
    /// through this object.
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        let guard = {
            let mut hold = self.hold();
            hold.forget_if_inherited();
            hold.token = None;
            hold.previous = None;
            hold.previous_outcome = None;
            hold.guard.take()
        };
        let Some(guard) = guard else {
            return Err(usage(
                py,
                format!(
                    "lock '{}' is not held through this Lock object in this process",
                    self.name
                ),
            ));
        };
        py.detach(|| guard.release())
            .map_err(|e| to_py(py, e.into()))
    }

    fn __enter__<'py>(slf: Bound<'py, Self>) -> PyResult<Bound<'py, Self>> {
        slf.get().acquire(slf.py(), None, true, None)?;
        Ok(slf)
    }

    /// Releases the lock if this process holds it (in a forked child, which
    /// never holds its parent's lock, it does nothing).
    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<()> {
        if self.hold().held_here() {
            self.release(py)?;
        } else {
            self.hold().forget_if_inherited();
        }
        Ok(())
    }

    /// Whether this process holds the lock through this object.
    #[getter]
    fn held(&self) -> bool {
        self.hold().held_here()
    }

    /// The fencing token of the current grant (larger than every earlier
    /// grant's), or None when not held.
    #[getter]
    fn token(&self) -> Option<u64> {
        let hold = self.hold();
        hold.held_here().then_some(hold.token).flatten()
    }

    /// The holder before the current grant when it ended without
    /// releasing (its work may be half done), as a dict; else None.
    #[getter]
    fn previous_holder(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        let text = {
            let hold = self.hold();
            match (&hold.previous, hold.held_here()) {
                (Some(t), true) => t.clone(),
                _ => return Ok(None),
            }
        };
        Ok(Some(
            py.import("json")?.call_method1("loads", (text,))?.unbind(),
        ))
    }

    /// How the holder before the current grant ended: `released`,
    /// `failed:<code>`, `killed:<signal>` or `died`; None when not held, or
    /// for the first grant of the lock.
    #[getter]
    fn previous_outcome(&self) -> Option<String> {
        let hold = self.hold();
        hold.held_here()
            .then(|| hold.previous_outcome.clone())
            .flatten()
    }

    /// The lock's name.
    #[getter]
    fn name(&self) -> &str {
        self.name.as_str()
    }

    /// "exclusive" or "shared" (a semaphore is "exclusive" with `slots`).
    #[getter]
    fn mode(&self) -> &'static str {
        match self.mode {
            Mode::Shared => "shared",
            _ => "exclusive",
        }
    }

    /// The number of slots of a semaphore, else None.
    #[getter]
    fn slots(&self) -> Option<u32> {
        match self.mode {
            Mode::Semaphore(n) => Some(n),
            _ => None,
        }
    }

    /// The baton dir (resolved when the object was made).
    #[getter]
    fn baton_dir(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }

    fn __repr__(&self) -> String {
        let hold = self.hold();
        let held = match (hold.held_here(), hold.token) {
            (true, Some(t)) => format!("held, token {t}"),
            _ => "not held".into(),
        };
        let slots = match self.mode {
            Mode::Semaphore(n) => format!(", slots={n}"),
            _ => String::new(),
        };
        format!(
            "<baton.Lock {:?} mode={:?}{slots}, {held}>",
            self.name.as_str(),
            self.mode()
        )
    }
}
