//! The native module of baton's Python package, `baton._baton`: baton's
//! named locks in the calling process, over [`baton_lock`] (no subprocess
//! per call). The package (`python/baton`) re-exports it as `baton.Lock`,
//! `baton.status`, `baton.Busy` and `baton.Error`; what it does to the
//! host process (threads, descriptors, signals, fork) is said once, in the
//! package's docstring (`python/baton/__init__.py`).
//!
//! Same semantics as the CLI: the same baton dir resolution
//! ([`baton_lock::BatonDir::resolve`]: an explicit dir, else `BATON_DIR`,
//! else this user's dir on the machine), the same lock engine, and errors
//! with the CLI's messages ([`baton_lock::one_line`]). `status` returns
//! what `baton lock status NAME --json` prints: the same type through the
//! same serializer, decoded by Python's `json`.
//!
//! Locking discipline of this crate: a `Lock`'s state mutex is only ever
//! taken with the GIL held and never across a wait (waits run detached from
//! the interpreter), so a `fork()` (which Python performs with the GIL held)
//! never copies it locked; see `fork.rs`. What baton-lock keeps for the
//! whole process (the re-entrancy table, the cached identity) is taken
//! without the GIL from any thread, so it is fork-safe in baton-lock itself
//! (`fork_safe.rs` there): a child forked while another thread is inside
//! never finds it held.

#![forbid(unsafe_code)]

mod errors;
mod fork;
mod hold;
mod lock;
mod reserve;
mod wait;

use std::path::PathBuf;

use baton_lock::{BatonDir, LockName};
use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::errors::to_py;

/// `status(name, baton_dir=None) -> dict`: what `baton lock status NAME
/// --json` prints.
#[pyfunction]
#[pyo3(signature = (name, baton_dir=None))]
fn status(
    py: Python<'_>,
    name: &Bound<'_, PyString>,
    baton_dir: Option<PathBuf>,
) -> PyResult<Py<PyAny>> {
    let name = parse_name(py, name)?;
    let text = py
        .detach(|| -> Result<String, errors::Failure> {
            let dir = BatonDir::resolve(baton_dir.as_deref())?;
            let st = baton_lock::status(&dir, &name)?;
            Ok(serde_json::to_string(&st)?)
        })
        .map_err(|e| to_py(py, e))?;
    Ok(py.import("json")?.call_method1("loads", (text,))?.unbind())
}

/// A lock name, or `baton.Error` with the CLI's message (a name that is
/// not valid Unicode, such as one with a lone surrogate, included).
fn parse_name(py: Python<'_>, name: &Bound<'_, PyString>) -> PyResult<LockName> {
    let text = name.to_cow().map_err(|_| {
        errors::usage(
            py,
            format!(
                "invalid lock name {}: not valid Unicode (it has a lone surrogate)",
                name.repr().map_or_else(|_| "?".into(), |r| r.to_string())
            ),
        )
    })?;
    LockName::new(text.as_ref()).map_err(|e| to_py(py, e.into()))
}

/// The module: `Lock`, `status`, `reserve`, `reservations`, and the hook the package registers with
/// `os.register_at_fork`.
#[pymodule]
fn _baton(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<lock::Lock>()?;
    m.add_class::<wait::Cancel>()?;
    m.add_class::<reserve::Reservation>()?;
    m.add_function(wrap_pyfunction!(reserve::reserve, m)?)?;
    m.add_function(wrap_pyfunction!(reserve::reservations, m)?)?;
    m.add_function(wrap_pyfunction!(status, m)?)?;
    m.add_function(wrap_pyfunction!(fork::after_fork_in_child, m)?)?;
    Ok(())
}
