//! Why an I/O operation failed, in the terms a caller's advice depends on,
//! the same on every platform (std's `ErrorKind` has these only from Rust
//! 1.83 on, and names no busy directory on Windows).

use std::io;

use crate::sys;

/// What an I/O error means for what to do next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCause {
    /// Not allowed: `EACCES`, `EPERM`; Windows `ERROR_ACCESS_DENIED`.
    Denied,
    /// The file system is read-only: `EROFS`; Windows `ERROR_WRITE_PROTECT`.
    ReadOnly,
    /// A directory to remove is not empty (something wrote into it):
    /// `ENOTEMPTY`, `EEXIST`; Windows `ERROR_DIR_NOT_EMPTY`.
    NotEmpty,
    /// In use: `EBUSY` (a mount point); on Windows a file open in another
    /// process (`ERROR_SHARING_VIOLATION`, `ERROR_LOCK_VIOLATION`,
    /// `ERROR_BUSY`).
    Busy,
    /// Anything else.
    Other,
}

/// The [`ErrorCause`] of `e`, from its system error code.
pub fn error_cause(e: &io::Error) -> ErrorCause {
    let Some(code) = e.raw_os_error() else {
        return ErrorCause::Other;
    };
    [
        (sys::DENIED, ErrorCause::Denied),
        (sys::READ_ONLY, ErrorCause::ReadOnly),
        (sys::NOT_EMPTY_CODES, ErrorCause::NotEmpty),
        (sys::BUSY, ErrorCause::Busy),
    ]
    .into_iter()
    .find(|(codes, _)| codes.contains(&code))
    .map_or(ErrorCause::Other, |(_, cause)| cause)
}

/// The system's "directory not empty" error (`ENOTEMPTY`; Windows
/// `ERROR_DIR_NOT_EMPTY`), for a directory found again after its removal.
pub fn not_empty_error() -> io::Error {
    io::Error::from_raw_os_error(sys::NOT_EMPTY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_errors_have_their_cause() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), b"x").unwrap();
        let err = std::fs::remove_dir(dir.path()).unwrap_err();
        assert_eq!(error_cause(&err), ErrorCause::NotEmpty, "{err}");
        assert_eq!(error_cause(&not_empty_error()), ErrorCause::NotEmpty);
        let missing = std::fs::read(dir.path().join("missing")).unwrap_err();
        assert_eq!(error_cause(&missing), ErrorCause::Other);
        assert_eq!(error_cause(&io::Error::other("x")), ErrorCause::Other);
    }
}
