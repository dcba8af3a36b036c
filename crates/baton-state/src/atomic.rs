//! Reading a state file, replacing it atomically, and the files a dead
//! writer leaves behind.
//!
//! Replacement follows docs/src/design/architecture.md decision 8: write a temp file in the same
//! directory, fsync it, rename it over the target, fsync the directory. The
//! rename is the commit point; everything before it can be lost to a crash
//! without harm, and the temp file it leaves is removed by the next edit.

use std::borrow::Cow;
use std::fs::{self, File, Metadata, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use serde::de::IgnoredAny;

use baton_fs::IoResultExt;
use baton_fs::{Durability, TempFile, WriteError};

use crate::error::StateError;
use crate::file::{Format, StateFile};

/// A file's bytes and metadata, or nothing if it does not exist.
pub(crate) struct Current {
    pub(crate) bytes: Option<Vec<u8>>,
    pub(crate) meta: Option<Metadata>,
}

/// Reads the whole file. A missing file is `None`; a directory or other
/// non-regular file is an error.
pub(crate) fn read(file: &StateFile) -> Result<Current, StateError> {
    let path = file.path();
    // A FIFO swapped in must not block us; a link swapped in is refused.
    let f = match baton_fs::open_no_follow(OpenOptions::new().read(true), path, 0o666) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Ok(Current {
                bytes: None,
                meta: None,
            })
        }
        Err(e) => return Err(e).context("cannot open", path).map_err(Into::into),
    };
    let meta = f.metadata().context("cannot inspect", path)?;
    require_regular(&meta, path)?;
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    (&f).read_to_end(&mut bytes).context("cannot read", path)?;
    Ok(Current {
        bytes: Some(bytes),
        meta: Some(meta),
    })
}

pub(crate) fn require_regular(meta: &Metadata, path: &Path) -> Result<(), StateError> {
    if meta.is_file() {
        return Ok(());
    }
    Err(StateError::NotAFile {
        path: path.to_path_buf(),
        what: if meta.is_dir() {
            "a directory"
        } else {
            "not a regular file"
        },
    })
}

/// Fails early, before any work, if the file could not be replaced: its
/// directory must be writable (this also reports a read-only file system)
/// and an existing file must be writable by us (a file someone made
/// read-only is respected, not silently replaced).
pub(crate) fn check_writable(file: &StateFile, exists: bool) -> Result<(), StateError> {
    let check = |p: &Path, op| baton_fs::check_write_access(p).context(op, p);
    check(file.dir(), "cannot create files in directory")?;
    if exists {
        check(file.path(), "cannot write")?;
    }
    Ok(())
}

/// Removes the temp files of `file` left by writers that died before their
/// rename. Called under the file's lock, so no live writer owns one.
/// Best effort: a file that cannot be removed is left for the next time.
/// Returns how many were removed.
pub(crate) fn remove_stale_temps(file: &StateFile) -> usize {
    let Ok(entries) = fs::read_dir(file.dir()) else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| file.is_temp_name(&e.file_name()))
        .filter(|e| fs::remove_file(e.path()).is_ok())
        .count()
}

/// Replaces `file` with `content` atomically and durably. An error after
/// the rename is [`StateError::NotDurable`].
///
/// `like` is the metadata of the file being replaced: the new file gets its
/// owner, group and permission bits as far as we may (see
/// [`copy_ownership`]). A new file gets mode 0666 minus the umask.
pub(crate) fn replace(
    file: &StateFile,
    content: &[u8],
    like: Option<&Metadata>,
) -> Result<(), StateError> {
    let temp = TempFile::create(
        file.dir(),
        &file.temp_prefix(),
        if like.is_some() { 0o600 } else { 0o666 },
    )?;
    if let Some(meta) = like {
        copy_ownership(temp.file(), meta, 0o7777, temp.path())?;
    }
    temp.file()
        .write_all(content)
        .context("cannot write", temp.path())?;
    // The rename is the commit point: a failure after it (flushing the
    // directory) is not "nothing written".
    temp.persist(file.path(), Durability::DataAndDir)
        .map_err(|e| match e {
            WriteError::NotWritten(e) => StateError::from(e),
            WriteError::NotDurable(e) => StateError::from(e).after_change(file.path()),
        })
}

/// Gives the new file `file` (at `path`, ours, just created) the owner,
/// group and permission bits (within `mask`) of `like`, as far as we may
/// (see [`baton_fs::copy_owner_and_mode`]: the owner only as root, the
/// group as root or a member of it, else the group gets no more than
/// others; on Windows nothing, the file has its directory's ACL).
fn copy_ownership(file: &File, like: &Metadata, mask: u32, path: &Path) -> Result<(), StateError> {
    baton_fs::copy_owner_and_mode(file, like, mask)
        .context("cannot set permissions of", path)
        .map_err(Into::into)
}

/// Length of the part of `bytes` that ends in a newline (all of it if it is
/// empty or ends in `\n`); what follows is a torn line.
pub(crate) fn complete_prefix(bytes: &[u8]) -> usize {
    match bytes.last() {
        None | Some(b'\n') => bytes.len(),
        Some(_) => bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1),
    }
}

/// Whether `tail`, the bytes after the last newline of a file in `format`,
/// is a whole record that only lacks its newline, rather than a torn one.
///
/// Only a `.jsonl` file can tell: the tail must parse as one JSON value
/// that no longer record could start with. That rules out a bare number
/// (`12` may be `123` torn between digits); an object, array, string,
/// `true`, `false` or `null` cut short does not parse. In other formats
/// any tail may be torn.
pub(crate) fn is_whole_record(tail: &[u8], format: Format) -> bool {
    format == Format::JsonLines
        && !tail.trim_ascii_end().last().is_some_and(u8::is_ascii_digit)
        && serde_json::from_slice::<IgnoredAny>(tail).is_ok()
}

/// The part of a `.jsonl` file's content that counts: its complete lines,
/// and a whole last record lacking its newline, which gets it here (so
/// the content, and its version, are what the next append will leave).
/// What follows, a torn line, is returned second.
pub(crate) fn counted_lines(bytes: &[u8]) -> (Cow<'_, [u8]>, &[u8]) {
    let end = complete_prefix(bytes);
    if end < bytes.len() && is_whole_record(&bytes[end..], Format::JsonLines) {
        let mut whole = Vec::with_capacity(bytes.len() + 1);
        whole.extend_from_slice(bytes);
        whole.push(b'\n');
        (Cow::Owned(whole), &[])
    } else {
        (Cow::Borrowed(&bytes[..end]), &bytes[end..])
    }
}

/// Like [`complete_prefix`], for an open file of `size` bytes, reading only
/// its end.
pub(crate) fn complete_len(f: &File, size: u64, path: &Path) -> Result<u64, StateError> {
    const CHUNK: u64 = 64 * 1024;
    if size == 0 {
        return Ok(0);
    }
    let mut last = [0u8];
    baton_fs::read_exact_at(f, &mut last, size - 1).context("cannot read", path)?;
    if last[0] == b'\n' {
        return Ok(size);
    }
    let mut end = size;
    let mut buf = vec![0u8; CHUNK as usize];
    while end > 0 {
        let start = end.saturating_sub(CHUNK);
        let chunk = &mut buf[..(end - start) as usize];
        baton_fs::read_exact_at(f, chunk, start).context("cannot read", path)?;
        if let Some(i) = chunk.iter().rposition(|&b| b == b'\n') {
            return Ok(start + i as u64 + 1);
        }
        end = start;
    }
    Ok(0)
}

/// Appends `torn` and a newline to `FILE.torn`, durably. A new `FILE.torn`
/// gets the owner, group and permission bits (without execute or set-ID
/// bits) of the state file, whose metadata is `like`, as far as we may
/// (see [`copy_ownership`]). Returns the path.
pub(crate) fn save_torn(
    file: &StateFile,
    torn: &[u8],
    like: Option<&Metadata>,
) -> Result<PathBuf, StateError> {
    let path = file.torn_path();
    let open = |create: bool| {
        let mut o = OpenOptions::new();
        o.append(true).create_new(create);
        baton_fs::open_no_follow(&mut o, &path, if like.is_some() { 0o600 } else { 0o666 })
    };
    let (mut f, created) = match open(true) {
        Ok(f) => (f, true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            (open(false).context("cannot open", &path)?, false)
        }
        Err(e) => return Err(e).context("cannot create", &path).map_err(Into::into),
    };
    if let (true, Some(like)) = (created, like) {
        copy_ownership(&f, like, 0o666, &path)?;
    }
    let mut buf = Vec::with_capacity(torn.len() + 1);
    buf.extend_from_slice(torn);
    buf.push(b'\n');
    f.write_all(&buf).context("cannot write", &path)?;
    f.sync_all().context("cannot flush", &path)?;
    if created {
        baton_fs::flush_entry(&f, &path)?;
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn complete_prefix_cuts_after_the_last_newline() {
        assert_eq!(complete_prefix(b""), 0);
        assert_eq!(complete_prefix(b"a\n"), 2);
        assert_eq!(complete_prefix(b"a\nb"), 2);
        assert_eq!(complete_prefix(b"torn"), 0);
        assert_eq!(complete_prefix(b"a\nb\ncc"), 4);
    }

    #[test]
    fn only_a_jsonl_value_that_cannot_be_cut_short_is_a_whole_record() {
        let whole = |t: &[u8]| is_whole_record(t, Format::JsonLines);
        for t in [
            &b"{\"a\":1}"[..],
            b"[1,2]",
            b"\"s\"",
            b"true",
            b"null",
            b"{} ",
        ] {
            assert!(whole(t), "{}", String::from_utf8_lossy(t));
        }
        for t in [
            &b"{\"a\":1"[..],
            b"{\"a\"",
            b"[1,",
            b"\"s",
            b"tru",
            b"12",
            b"-1.5e3 ",
            b" ",
        ] {
            assert!(!whole(t), "{}", String::from_utf8_lossy(t));
        }
        assert!(!is_whole_record(b"{}", Format::Text));
        assert!(!is_whole_record(b"{}", Format::Json));
        let (lines, torn) = counted_lines(b"{}\n[1]");
        assert_eq!((&lines[..], torn), (&b"{}\n[1]\n"[..], &b""[..]));
        let (lines, torn) = counted_lines(b"{}\n[1");
        assert_eq!((&lines[..], torn), (&b"{}\n"[..], &b"[1"[..]));
    }

    #[test]
    fn complete_len_agrees_with_complete_prefix_across_chunks() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("f");
        let mut long = vec![b'x'; 200 * 1024];
        long[10] = b'\n';
        for content in [
            b"".to_vec(),
            b"a\n".to_vec(),
            b"a\nbc".to_vec(),
            b"abc".to_vec(),
            long,
        ] {
            fs::write(&p, &content).unwrap();
            let f = File::open(&p).unwrap();
            assert_eq!(
                complete_len(&f, content.len() as u64, &p).unwrap(),
                complete_prefix(&content) as u64
            );
        }
    }
}
