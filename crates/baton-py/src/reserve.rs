//! `baton.reserve(...)` and `baton.reservations(...)`: path reservations of
//! a repository (`baton_lock::reserve`), in the baton dir, as `baton reserve`
//! and `baton reservations` take and list them (the same repository
//! identity, from `baton_git`, so that every clone and worktree of one
//! origin meets in one namespace).

use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use baton_lock::reserve::{
    reserve as take, Reservation as Held, ReservationHolder, ReserveError, ReserveRequest, Space,
};
use baton_lock::{BatonDir, CancelToken, Mode, WaitPolicy};
use pyo3::prelude::*;

use crate::errors::{to_py, usage, Failure};

/// How often a waiting caller checks for signals.
const SLICE: Duration = Duration::from_millis(10);

/// A granted reservation of paths (`baton.reserve(...)`): released by
/// `release()`, by leaving `with`, when the object is collected, or by the
/// kernel when this process dies.
#[pyclass(module = "baton", name = "Reservation", frozen)]
pub(crate) struct Reservation {
    held: Mutex<Option<Held>>,
    /// The process that took it: in a child forked from it, the object
    /// holds nothing (the lock belongs to the parent, whose open file the
    /// child shares: releasing there would release the parent's).
    owner: u32,
    token: u64,
    paths: Vec<String>,
    mode: Mode,
    previous: Option<String>,
}

impl Reservation {
    /// The grant, taken out of the object; `None` if released, or in a
    /// forked child (whose copy is forgotten, never released).
    fn take_held(&self) -> Option<Held> {
        let held = self
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if std::process::id() != self.owner {
            std::mem::forget(held);
            return None;
        }
        held
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        // Released by the drop of the grant, except in a forked child.
        let _ = self.take_held();
    }
}

#[pymethods]
impl Reservation {
    /// Releases the reservation; raises `Error` if it was released already.
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        let Some(held) = self.take_held() else {
            return Err(usage(
                py,
                format!("reservation {} is not held (released already)", self.token),
            ));
        };
        py.detach(|| held.release())
            .map_err(|e| to_py(py, Failure::Reserve(e)))
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    /// Releases the reservation if still held.
    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<()> {
        match self.take_held() {
            Some(held) => py
                .detach(|| held.release())
                .map_err(|e| to_py(py, Failure::Reserve(e))),
            None => Ok(()),
        }
    }

    /// Whether it is still held (not released) by this process.
    #[getter]
    fn held(&self) -> bool {
        std::process::id() == self.owner
            && self
                .held
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .is_some()
    }

    /// The fencing token of the grant: larger than every earlier grant's
    /// in the repository.
    #[getter]
    fn token(&self) -> u64 {
        self.token
    }

    /// What it covers, as normalized (repo-relative, `/`-separated).
    #[getter]
    fn paths(&self) -> Vec<String> {
        self.paths.clone()
    }

    /// `"exclusive"` or `"shared"`.
    #[getter]
    fn mode(&self) -> &'static str {
        self.mode.as_str()
    }

    /// Whether the holder of an overlapping reservation before it died
    /// holding it (its work may be half done).
    #[getter]
    fn previous_holder_died(&self) -> bool {
        self.previous.is_some()
    }

    /// That holder's reservation (what `baton reservations --json` lists),
    /// or None.
    #[getter]
    fn previous_holder(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        match &self.previous {
            None => Ok(None),
            Some(text) => Ok(Some(
                py.import("json")?
                    .call_method1("loads", (text.as_str(),))?
                    .unbind(),
            )),
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "<baton.Reservation {:?} {} token={} held={}>",
            self.paths,
            self.mode.as_str(),
            self.token,
            self.held()
        )
    }
}

/// The space of the repository at `repo` (the working directory's).
fn space_of(repo: Option<PathBuf>) -> Result<Space, Failure> {
    let at = repo.unwrap_or_else(|| PathBuf::from("."));
    baton_git::repository_identity(&at)
        .map(|(key, top)| Space::new(key, top))
        .map_err(|e| Failure::Usage(baton_lock::one_line(&e)))
}

fn wait_policy(timeout: Option<f64>) -> Result<WaitPolicy, String> {
    match timeout {
        None => Ok(WaitPolicy::Forever),
        Some(t) if t == f64::INFINITY => Ok(WaitPolicy::Forever),
        Some(0.0) => Ok(WaitPolicy::Immediately),
        Some(t) => Duration::try_from_secs_f64(t)
            .map(WaitPolicy::from)
            .map_err(|_| {
                format!(
                    "invalid timeout {t}: a timeout is a number of seconds, 0 or more, or infinity (None also waits forever)"
                )
            }),
    }
}

/// `reserve(paths, *, mode="exclusive", timeout=None, reason=None,
/// repo=None, agent=None, baton_dir=None) -> Reservation`.
#[pyfunction]
#[pyo3(signature = (paths, *, mode="exclusive", timeout=None, reason=None, repo=None, agent=None, baton_dir=None))]
#[allow(clippy::too_many_arguments)] // Python keyword arguments
pub(crate) fn reserve(
    py: Python<'_>,
    paths: Vec<String>,
    mode: &str,
    timeout: Option<f64>,
    reason: Option<String>,
    repo: Option<PathBuf>,
    agent: Option<String>,
    baton_dir: Option<PathBuf>,
) -> PyResult<Reservation> {
    let mode = match mode {
        "exclusive" => Mode::Exclusive,
        "shared" => Mode::Shared,
        other => {
            return Err(usage(
                py,
                format!("invalid mode {other:?}: a mode is \"exclusive\" or \"shared\""),
            ))
        }
    };
    if paths.is_empty() {
        return Err(usage(py, "reserve: no path given (paths is empty)".into()));
    }
    let wait = wait_policy(timeout).map_err(|m| usage(py, m))?;
    let (dir, space, patterns) = py
        .detach(|| -> Result<_, Failure> {
            let dir = BatonDir::resolve(baton_dir.as_deref())?;
            let space = space_of(repo)?;
            let patterns = paths
                .iter()
                .map(|p| space.pattern(p))
                .collect::<Result<Vec<_>, _>>()
                .map_err(Failure::Reserve)?;
            Ok((dir, space, patterns))
        })
        .map_err(|e| to_py(py, e))?;
    let agent = agent
        .or_else(|| std::env::var("BATON_AGENT").ok().filter(|a| !a.is_empty()))
        .unwrap_or_else(|| baton_lock::default_owner().to_string());
    let mut holder = ReservationHolder::current(agent, format!("py-{}", baton_lock::new_run_id()));
    holder.reason = reason.filter(|r| !r.is_empty());
    let req = ReserveRequest {
        patterns,
        mode,
        wait,
        holder,
        cancel: None,
    };
    let held = interruptible(py, dir, space, req)?;
    let previous = held
        .previous_holder_died()
        .and_then(|r| serde_json::to_string(r).ok());
    Ok(Reservation {
        token: held.token(),
        paths: held.patterns().iter().map(ToString::to_string).collect(),
        mode: held.mode(),
        previous,
        owner: std::process::id(),
        held: Mutex::new(Some(held)),
    })
}

/// Reserves, interruptible by signals: a request that has to wait waits in
/// a helper thread while the caller checks for signals every [`SLICE`]
/// (as `wait.rs` does for locks); ending the wait cancels the helper's
/// request, and a grant that raced it is released.
fn interruptible(
    py: Python<'_>,
    dir: BatonDir,
    space: Space,
    req: ReserveRequest,
) -> PyResult<Held> {
    let reserve_error = |py: Python<'_>, e: ReserveError| to_py(py, Failure::Reserve(e));
    if req.wait == WaitPolicy::Immediately {
        return py
            .detach(|| take(&dir, &space, &req))
            .map_err(|e| reserve_error(py, e));
    }
    let token = CancelToken::new();
    let mut req = req;
    req.cancel = Some(token.clone());
    let (tx, rx) = mpsc::sync_channel::<Result<Held, ReserveError>>(1);
    let spawned = std::thread::Builder::new()
        .name("baton-wait".into())
        .spawn(move || {
            // A send to a caller that is gone drops the grant: released.
            let _ = tx.send(take(&dir, &space, &req));
        });
    if let Err(e) = spawned {
        return Err(usage(
            py,
            format!("cannot start a thread to wait for the reservation: {e}"),
        ));
    }
    let mut rx = rx;
    loop {
        let (answer, back) = py.detach(move || (rx.recv_timeout(SLICE), rx));
        rx = back;
        match answer {
            Ok(answer) => return answer.map_err(|e| reserve_error(py, e)),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(usage(
                    py,
                    "the thread waiting for the reservation ended without an answer".into(),
                ))
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        if let Err(e) = py.check_signals() {
            token.cancel();
            let _late = py.detach(move || rx.recv());
            return Err(e);
        }
    }
}

/// `reservations(repo=None, path=None, baton_dir=None) -> list[dict]`:
/// what `baton reservations [PATH] --json` prints.
#[pyfunction]
#[pyo3(signature = (repo=None, path=None, baton_dir=None))]
pub(crate) fn reservations(
    py: Python<'_>,
    repo: Option<PathBuf>,
    path: Option<String>,
    baton_dir: Option<PathBuf>,
) -> PyResult<Py<PyAny>> {
    let text = py
        .detach(|| -> Result<String, Failure> {
            let dir = BatonDir::resolve(baton_dir.as_deref())?;
            let space = space_of(repo)?;
            let filter = match &path {
                Some(p) => Some(space.pattern(p).map_err(Failure::Reserve)?),
                None => None,
            };
            let rows = baton_lock::reserve::reservations(&dir, &space, filter.as_ref())
                .map_err(Failure::Reserve)?;
            Ok(serde_json::to_string(&rows)?)
        })
        .map_err(|e| to_py(py, e))?;
    Ok(py.import("json")?.call_method1("loads", (text,))?.unbind())
}
