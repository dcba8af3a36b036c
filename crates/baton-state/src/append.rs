//! Appending whole records, and repairing the torn line a dead appender
//! leaves, for a caller that holds the file's lock.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use baton_lock::LockGuard;
use serde::de::IgnoredAny;

use crate::atomic::{self, complete_len};
use crate::error::StateError;
use crate::file::{Format, StateFile};
use crate::version::Version;
use baton_fs::IoResultExt;

/// A torn last line found at the end of a file and moved out of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Torn {
    /// How many bytes the torn line had.
    pub bytes: u64,
    /// Where they were appended (followed by a newline): `FILE.torn`.
    pub saved_to: PathBuf,
}

/// What an append did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Appended {
    /// The real file appended to.
    pub path: PathBuf,
    /// How many records were appended.
    pub records: usize,
    /// How many bytes were appended: records and their newlines, and the
    /// newline that ended a whole last record lacking it.
    pub bytes: u64,
    /// A torn last line that was moved to `FILE.torn` first.
    pub torn: Option<Torn>,
}

/// Appends `records` to `file`, each followed by a newline, while the caller
/// holds a lock that covers it (see [`edit_locked`](crate::edit_locked) for
/// what `held` means).
///
/// A `.json` file (one JSON document) is refused with
/// [`StateError::AppendToJson`]: change it with [`edit_locked`](crate::edit_locked).
/// Every record is checked before anything is written: none may contain a
/// newline, and for a `.jsonl` file each must be one JSON value. If the file
/// ends in a torn line (bytes after the last newline, left by a writer that
/// died mid-append), those bytes are first appended to `FILE.torn` (followed
/// by a newline, and flushed) and the file is cut back to its last complete
/// line. A `.jsonl` file's last line that is a whole record, only missing
/// its newline, is not torn: it is kept and the newline written before the
/// records (see [`Snapshot::content`](crate::Snapshot::content)). Then all
/// records are written with one `write` and flushed with `fdatasync`. The
/// file is created (mode 0666 minus the umask) if missing.
///
/// With `if_version`, the append happens only if the file's version (of its
/// complete lines) is still that, else [`StateError::VersionMismatch`].
/// With no records, no record is written, but a torn line is still repaired
/// and a missing final newline added.
pub fn append_locked<R: AsRef<[u8]>>(
    file: &StateFile,
    held: &LockGuard,
    if_version: Option<&Version>,
    records: &[R],
) -> Result<Appended, StateError> {
    let _ = held;
    if file.format() == Format::Json {
        return Err(StateError::AppendToJson {
            path: file.path().to_path_buf(),
        });
    }
    let mut data = encode(file, records)?;
    let path = file.path();
    let (f, created) = match open(path, false) {
        Ok(f) => (f, false),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            check_version(file, if_version, &Version::absent())?;
            if records.is_empty() {
                return Ok(appended(file, 0, 0, None));
            }
            match open(path, true) {
                Ok(f) => (f, true),
                Err(e) => return Err(e).context("cannot create", path).map_err(Into::into),
            }
        }
        Err(e) => return Err(e).context("cannot open", path).map_err(Into::into),
    };
    let meta = f.metadata().context("cannot inspect", path)?;
    atomic::require_regular(&meta, path)?;
    if !created {
        // A file someone made read-only is respected, as by an edit: the
        // open refuses it already, except where the caller may write any
        // file (root; wine run as root, for Windows' read-only attribute).
        baton_fs::check_write_access(path).context("cannot write", path)?;
    }
    let size = meta.len();
    let lines_end = complete_len(&f, size, path)?;
    let tail = if lines_end < size {
        let mut bytes = vec![0u8; usize::try_from(size - lines_end).unwrap_or(usize::MAX)];
        baton_fs::read_exact_at(&f, &mut bytes, lines_end).context("cannot read", path)?;
        bytes
    } else {
        Vec::new()
    };
    // A whole record that only lacks its newline is kept and gets it.
    let unterminated = !tail.is_empty() && atomic::is_whole_record(&tail, file.format());
    let keep = if unterminated { size } else { lines_end };
    if if_version.is_some() && !created {
        let mut bytes = vec![0u8; usize::try_from(keep).unwrap_or(usize::MAX)];
        baton_fs::read_exact_at(&f, &mut bytes, 0).context("cannot read", path)?;
        if unterminated {
            bytes.push(b'\n');
        }
        check_version(file, if_version, &Version::of(Some(&bytes)))?;
    }
    let torn = if keep < size {
        let saved_to = atomic::save_torn(file, &tail, Some(&meta))?;
        baton_fs::set_len(&f, keep).context("cannot cut the torn line off", path)?;
        Some(Torn {
            bytes: size - keep,
            saved_to,
        })
    } else {
        None
    };
    if unterminated {
        data.insert(0, b'\n');
    }
    if !data.is_empty() {
        if let Err(e) = write_all_or_nothing(&f, &data, keep, path) {
            if created && !e.changed() {
                // Leave no empty file behind: "absent" stays the version.
                // Under the lock nobody else can have opened it as ours;
                // if the removal fails, an empty file (no record) remains.
                let _ = std::fs::remove_file(path);
            }
            return Err(e);
        }
    }
    // The records are in the file: a failure now is not "nothing appended".
    if !data.is_empty() || torn.is_some() {
        f.sync_data()
            .context("cannot flush", path)
            .map_err(|e| StateError::from(e).after_change(path))?;
    }
    if created {
        baton_fs::flush_entry(&f, path).map_err(|e| StateError::from(e).after_change(path))?;
    }
    Ok(appended(file, records.len(), data.len() as u64, torn))
}

/// Appends `data` to `f` (opened with `O_APPEND`, `base` bytes long) with
/// one `write`, or not at all: a failed or short write (no space left, a
/// file size limit) is cut back to `base`. A short write is not continued,
/// as a second write would only report the error (or, beyond a file size
/// limit, kill the process with SIGXFSZ before it could clean up).
fn write_all_or_nothing(f: &File, data: &[u8], base: u64, path: &Path) -> Result<(), StateError> {
    let (written, cause) = loop {
        match (&*f).write(data) {
            Ok(n) if n == data.len() => return Ok(()),
            Ok(n) => {
                let short = format!(
                    "only {n} of {} bytes could be written (disk full, or a file size limit?)",
                    data.len()
                );
                break (n as u64, io::Error::new(io::ErrorKind::WriteZero, short));
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // A write that wrote something returns its count, not an error.
            Err(e) => break (0, e),
        }
    };
    let undone = match f.metadata().map(|m| m.len()) {
        Ok(len) if len == base => Ok(()),
        // Only our bytes follow `base`: cut them off.
        Ok(len) if len == base + written => baton_fs::set_len(f, base),
        // Someone not using the lock wrote too; cutting would lose their bytes.
        Ok(_) => Err(io::Error::other(
            "the file changed meanwhile (a writer not using the lock?)",
        )),
        Err(e) => Err(e),
    };
    match undone {
        Ok(()) => Err(cause)
            .context("cannot append to", path)
            .map_err(Into::into),
        Err(source) => Err(StateError::PartlyAppended {
            path: path.to_path_buf(),
            written,
            cause,
            source,
        }),
    }
}

fn appended(file: &StateFile, records: usize, bytes: u64, torn: Option<Torn>) -> Appended {
    Appended {
        path: file.path().to_path_buf(),
        records,
        bytes,
        torn,
    }
}

/// Opens the file for reading and appending, refusing a symbolic link and
/// never blocking on a FIFO (see [`baton_fs::open_no_follow`]).
fn open(path: &Path, create: bool) -> io::Result<File> {
    let mut o = OpenOptions::new();
    o.read(true).append(true).create_new(create);
    baton_fs::open_no_follow(&mut o, path, 0o666)
}

/// Checks every record and joins them, each with its newline.
fn encode<R: AsRef<[u8]>>(file: &StateFile, records: &[R]) -> Result<Vec<u8>, StateError> {
    let total: usize = records.iter().map(|r| r.as_ref().len() + 1).sum();
    let mut out = Vec::with_capacity(total);
    for (i, record) in records.iter().enumerate() {
        let record = record.as_ref();
        let refuse = |reason, source| StateError::InvalidRecord {
            path: file.path().to_path_buf(),
            record: i + 1,
            reason,
            source,
        };
        if record.contains(&b'\n') {
            return Err(refuse("contains a newline; a record is one line", None));
        }
        if file.format() == Format::JsonLines {
            serde_json::from_slice::<IgnoredAny>(record)
                .map_err(|e| refuse("is not one JSON value", Some(e)))?;
        }
        out.extend_from_slice(record);
        out.push(b'\n');
    }
    Ok(out)
}

/// `Ok` unless the caller expected another version than `actual`
/// (`--if-version`): then [`StateError::VersionMismatch`].
pub(crate) fn check_version(
    file: &StateFile,
    expected: Option<&Version>,
    actual: &Version,
) -> Result<(), StateError> {
    match expected {
        Some(expected) if expected != actual => Err(StateError::VersionMismatch {
            path: file.path().to_path_buf(),
            expected: expected.clone(),
            actual: actual.clone(),
        }),
        _ => Ok(()),
    }
}
