//! Read-modify-write of a whole file, for a caller that holds its lock.

use std::borrow::Cow;
use std::path::PathBuf;

use baton_lock::LockGuard;
use serde::de::IgnoredAny;

use crate::append::{check_version, Torn};
use crate::atomic;
use crate::error::{EditError, StateError};
use crate::file::{Format, StateFile};
use crate::filter::Filter;
use crate::version::Version;

/// What an edit did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Edited {
    /// The real file that was edited.
    pub path: PathBuf,
    /// The version before the edit.
    pub previous: Version,
    /// The version now (equal to `previous` if nothing changed).
    pub version: Version,
    /// Whether the file was replaced. `false` when the edit function returned
    /// `None` or the same content.
    pub changed: bool,
    /// A torn last line of a `.jsonl` file, moved to `FILE.torn` because the
    /// new content replaced the file.
    pub torn: Option<Torn>,
    /// How many temp files of dead writers were removed.
    pub removed_temps: usize,
}

/// Edits `file` while the caller holds a lock that covers it: reads the
/// current content (`None` if the file does not exist), passes it to `f`,
/// and if `f` returns `Some(new)`, checks `new` against the file's
/// [`Format`] and replaces the file atomically. `f` returning `None` or an
/// error leaves the file alone.
///
/// With `if_version`, the edit is a compare-and-swap: if the file's current
/// version differs, `f` is not called, nothing is written and the error is
/// [`StateError::VersionMismatch`].
///
/// `held` is the caller's evidence that it holds the lock all writers of
/// this file use (by default [`StateFile::default_lock_name`]; any lock,
/// e.g. one covering a whole directory, if all writers agree on it). This
/// function cannot check that the lock covers the file; writers that use
/// different locks for one file are not serialised.
///
/// For a `.jsonl` file, `f` sees only complete lines; a torn last line left
/// by a dead appender is moved to `FILE.torn` if the file is replaced.
pub fn edit_locked<F, E>(
    file: &StateFile,
    held: &LockGuard,
    if_version: Option<&Version>,
    f: F,
) -> Result<Edited, EditError<E>>
where
    F: FnOnce(Option<&[u8]>) -> Result<Option<Vec<u8>>, E>,
{
    let _ = held;
    let removed_temps = atomic::remove_stale_temps(file);
    let current = atomic::read(file)?;
    let (content, torn) = match (&current.bytes, file.format()) {
        (Some(b), Format::JsonLines) => {
            let (lines, torn) = atomic::counted_lines(b);
            (Some(lines), torn)
        }
        (Some(b), _) => (Some(Cow::Borrowed(&b[..])), &b[..0]),
        (None, _) => (None, &[][..]),
    };
    let content = content.as_deref();
    let previous = Version::of(content);
    check_version(file, if_version, &previous)?;
    atomic::check_writable(file, current.bytes.is_some())?;
    let unchanged = || Edited {
        path: file.path().to_path_buf(),
        previous: previous.clone(),
        version: previous.clone(),
        changed: false,
        torn: None,
        removed_temps,
    };
    let Some(mut new) = f(content).map_err(EditError::Aborted)? else {
        return Ok(unchanged());
    };
    check_content(file, &mut new)?;
    if content == Some(&new[..]) && torn.is_empty() {
        return Ok(unchanged());
    }
    let torn = match torn {
        [] => None,
        bytes => {
            let saved_to = atomic::save_torn(file, bytes, current.meta.as_ref())?;
            Some(Torn {
                bytes: bytes.len() as u64,
                saved_to,
            })
        }
    };
    atomic::replace(file, &new, current.meta.as_ref())?;
    Ok(Edited {
        path: file.path().to_path_buf(),
        previous,
        version: Version::of(Some(&new)),
        changed: true,
        torn,
        removed_temps,
    })
}

/// [`edit_locked`] with an external [`Filter`] as the edit function: the
/// filter gets the current content on stdin (empty if the file does not
/// exist) and its stdout becomes the new content if it exits 0. A filter
/// that fails leaves the file alone and its exit code is in
/// [`StateError::FilterFailed`].
pub fn edit_with_filter_locked(
    file: &StateFile,
    held: &LockGuard,
    if_version: Option<&Version>,
    filter: &Filter,
) -> Result<Edited, StateError> {
    let env = [
        ("BATON_LOCK", held.name().to_string()),
        ("BATON_FENCING_TOKEN", held.token().to_string()),
    ];
    edit_locked(file, held, if_version, |old| {
        filter
            .run(old.unwrap_or_default(), file.path(), held, &env)
            .map(Some)
    })
    .map_err(|e| match e {
        EditError::State(e) | EditError::Aborted(e) => e,
    })
}

/// Checks new content against the file's format. A `.jsonl` file's content
/// gets its missing final newline.
fn check_content(file: &StateFile, new: &mut Vec<u8>) -> Result<(), StateError> {
    let path = || file.path().to_path_buf();
    match file.format() {
        Format::Text => Ok(()),
        Format::Json => serde_json::from_slice::<IgnoredAny>(new)
            .map(drop)
            .map_err(|source| StateError::InvalidJson {
                path: path(),
                source,
            }),
        Format::JsonLines => {
            if new.last().is_some_and(|&b| b != b'\n') {
                new.push(b'\n');
            }
            let body = new.strip_suffix(b"\n").unwrap_or(new);
            if new.is_empty() {
                return Ok(());
            }
            for (i, line) in body.split(|&b| b == b'\n').enumerate() {
                serde_json::from_slice::<IgnoredAny>(line).map_err(|source| {
                    StateError::InvalidJsonLine {
                        path: path(),
                        line: i + 1,
                        source,
                    }
                })?;
            }
            Ok(())
        }
    }
}
