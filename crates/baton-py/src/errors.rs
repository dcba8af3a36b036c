//! Errors as Python sees them: `baton.Busy` when a lock was not acquired
//! in time, `baton.Cancelled` when a wait was cancelled, `baton.Error` for
//! everything else (bad input, I/O, a refused
//! request), each with the message the CLI prints after `baton: `.
//!
//! The exception classes are defined in Python (`python/baton/_errors.py`)
//! so that `Busy` can also be a `TimeoutError`, as `filelock.Timeout` is.

use baton_lock::LockError;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyType;

/// What went wrong in a call, before it becomes a Python exception
/// (built while detached from the interpreter).
#[derive(Debug)]
pub(crate) enum Failure {
    /// From the lock engine.
    Lock(LockError),
    /// Encoding a status as JSON.
    Json(serde_json::Error),
    /// Bad input or a misuse of a `Lock` object, said in full.
    Usage(String),
    /// From path reservations.
    Reserve(baton_lock::reserve::ReserveError),
}

impl From<LockError> for Failure {
    fn from(e: LockError) -> Self {
        Failure::Lock(e)
    }
}

impl From<serde_json::Error> for Failure {
    fn from(e: serde_json::Error) -> Self {
        Failure::Json(e)
    }
}

/// The Python exception for `failure`: `baton.Busy` or `baton.Error`.
pub(crate) fn to_py(py: Python<'_>, failure: Failure) -> PyErr {
    let (class, message) = match failure {
        Failure::Lock(e @ LockError::Busy { .. }) => ("Busy", baton_lock::one_line(&e)),
        Failure::Lock(e @ LockError::Cancelled { .. }) => ("Cancelled", baton_lock::one_line(&e)),
        Failure::Lock(e) => ("Error", baton_lock::one_line(&e)),
        Failure::Json(e) => ("Error", format!("cannot encode JSON: {e}")),
        Failure::Usage(m) => ("Error", m),
        Failure::Reserve(e @ baton_lock::reserve::ReserveError::Busy { .. }) => {
            ("Busy", baton_lock::one_line(&e))
        }
        Failure::Reserve(e @ baton_lock::reserve::ReserveError::Cancelled) => {
            ("Cancelled", baton_lock::one_line(&e))
        }
        Failure::Reserve(e) => ("Error", baton_lock::one_line(&e)),
    };
    match class_of(py, class) {
        Ok(ty) => PyErr::from_type(ty, message),
        // The package is broken (its Python half is missing): say so
        // rather than lose the message.
        Err(e) => PyRuntimeError::new_err(format!(
            "{message} (and baton.{class} cannot be found: {e})"
        )),
    }
}

/// `baton.Error` for a misuse, said in full.
pub(crate) fn usage(py: Python<'_>, message: String) -> PyErr {
    to_py(py, Failure::Usage(message))
}

fn class_of<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyType>> {
    Ok(py
        .import("baton._errors")?
        .getattr(name)?
        .cast_into::<PyType>()?)
}
