//! An I/O error with the operation and the path it concerns.

use std::io;
use std::path::{Path, PathBuf};

/// An I/O error, with what was being done and the path it concerns.
///
/// Displays as `{op} '{path}'`; the cause is the [`source`](std::error::Error::source),
/// so a caller that prints the chain shows `cannot flush '/x': Input/output error`.
#[derive(Debug, thiserror::Error)]
#[error("{op} '{}'", path.display())]
pub struct PathError {
    /// What was being done, as a phrase that reads before the path
    /// (`cannot create a temporary file`).
    pub op: &'static str,
    /// The path concerned.
    pub path: PathBuf,
    /// The underlying error.
    #[source]
    pub source: io::Error,
}

impl PathError {
    /// The path concerned.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Attaches an operation and a path to the error of an I/O result: of
/// `std::io`, and on unix also of rustix (`rustix::io::Errno`).
pub trait IoResultExt<T> {
    /// `Err(e)` becomes `Err(PathError { op, path, source: e })`.
    fn context(self, op: &'static str, path: impl AsRef<Path>) -> Result<T, PathError>;
}

impl<T> IoResultExt<T> for io::Result<T> {
    fn context(self, op: &'static str, path: impl AsRef<Path>) -> Result<T, PathError> {
        self.map_err(|source| PathError {
            op,
            path: path.as_ref().to_path_buf(),
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_names_the_operation_and_the_path_and_keeps_the_cause() {
        let err = std::fs::read("/nonexistent/baton-fs")
            .context("cannot read", "/nonexistent/baton-fs")
            .unwrap_err();
        assert_eq!(err.to_string(), "cannot read '/nonexistent/baton-fs'");
        let source = std::error::Error::source(&err).map(|s| s.to_string());
        assert_eq!(source, Some(err.source.to_string()));
        assert_eq!(err.source.kind(), io::ErrorKind::NotFound);
        // The system's own words (Windows: ERROR_PATH_NOT_FOUND, whose text
        // differs between Windows and wine).
        if cfg!(windows) {
            assert_eq!(err.source.raw_os_error(), Some(3), "{err:?}");
        } else {
            assert!(source.is_some_and(|s| s.contains("No such file")));
        }
    }
}
