//! Opening, reading, cutting and setting up a file the same way on every
//! platform, for the crates above that edit files in place (baton-state):
//! each function says what it does per platform; the calls are in `sys`.

use std::ffi::{OsStr, OsString};
use std::fs::{File, FileType, Metadata, OpenOptions};
use std::io;
use std::path::Path;

use crate::error::PathError;
use crate::sys;

/// Opens `path` as `options` say, refusing a symbolic link as its last
/// component rather than following it, and never blocking on a FIFO; a file
/// it creates gets permission bits `mode` minus the umask.
///
/// - unix: `O_NOFOLLOW | O_NONBLOCK` (a link is the error `ELOOP`), and
///   `mode` for a new file;
/// - Windows: `FILE_FLAG_OPEN_REPARSE_POINT`, so a symbolic link or
///   junction is opened itself, and refused (an `InvalidInput` error) once
///   open; there are no FIFOs in the file system, and `mode` is ignored
///   (a new file inherits its directory's ACL).
pub fn open_no_follow(options: &mut OpenOptions, path: &Path, mode: u32) -> io::Result<File> {
    sys::open_no_follow(options, path, mode)
}

/// Reads exactly `buf.len()` bytes of `file` at `offset`: `pread(2)` on unix
/// (the file position is unchanged), `ReadFile` at an offset on Windows
/// (the file position moves, which does not matter to a file opened for
/// appending, whose writes go to its end). Fails with `UnexpectedEof` when
/// the file ends first.
pub fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    sys::read_exact_at(file, buf, offset)
}

/// Cuts `file` to `len` bytes (or extends it with zeros), also when it was
/// opened only for appending: on unix `ftruncate(2)`, which needs nothing
/// more; on Windows, where a handle opened for appending has no right to
/// change the file's size, through a second handle of the same open file
/// (`ReOpenFile` with `GENERIC_WRITE`), never through its path, which
/// might name another file by then.
pub fn set_len(file: &File, len: u64) -> io::Result<()> {
    sys::set_len(file, len)
}

/// Fails, with the system's "permission denied", if the calling process may
/// not write `path`: for a directory, create files in it.
///
/// - unix: `faccessat(2)` with `W_OK` and `AT_EACCESS` (the effective ids:
///   a read-only file system is `EROFS`);
/// - Windows: a file with the read-only attribute is refused; anything else
///   passes (access is decided by ACLs when the file is opened, and a
///   directory's read-only attribute does not forbid creating files), so
///   the write itself may still be denied.
pub fn check_write_access(path: &Path) -> io::Result<()> {
    sys::check_write_access(path)
}

/// Gives `file`, new and ours, the owner, group and permission bits (within
/// `mask`) of `like`, the metadata of the file it is to replace, as far as
/// the caller may. Not atomic with the file's creation: call it before
/// writing and renaming.
///
/// On unix:
///
/// - the owner only as root (an unprivileged caller cannot give a file
///   away), else the file stays ours and loses a set-user-ID bit;
/// - the group whenever we may set it: as root, or as a member of it
///   (group and owner are set separately, so one refusal does not cost the
///   other). Otherwise the file keeps our group, loses a set-group-ID bit,
///   and that group gets no more access than `like` gave to others, so our
///   group gains nothing the old file did not give it already;
/// - the permission bits with `fchmod(2)` after the owner and group
///   (changing those clears set-ID bits), so the umask does not apply.
///
/// On Windows nothing is done: a file has no owner, group or permission
/// bits to copy; the new file has the ACL it inherited from its directory
/// (an ACL set on the old file itself is not copied, as extended
/// attributes and ACLs are not on unix).
pub fn copy_owner_and_mode(file: &File, like: &Metadata, mask: u32) -> io::Result<()> {
    sys::copy_owner_and_mode(file, like, mask)
}

/// Makes the directory entry of `file`, just created (or renamed) at
/// `path`, durable, as [`Durability::DataAndDir`](crate::Durability::DataAndDir)
/// does after a rename: on unix `fsync(2)` of its directory (macOS:
/// `F_FULLFSYNC`, plain `fsync` where refused); on Windows
/// `FlushFileBuffers` of the file itself, which writes its metadata, its
/// name included, through the NTFS journal (no directory is flushed).
/// The file's data is not flushed on unix: do that first.
pub fn flush_entry(file: &File, path: &Path) -> Result<(), PathError> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    sys::flush_rename(file, path, dir)
}

/// Makes the entries created in or removed from directory `dir` durable:
/// on unix `fsync(2)` of the directory (macOS: `F_FULLFSYNC`, plain
/// `fsync` where refused). On Windows nothing is done and `Ok` returned:
/// Windows documents no flush of a directory (a directory handle cannot be
/// flushed without administrator rights), and NTFS journals each change
/// of a directory's entries; where a file is at hand, [`flush_entry`]
/// flushes it with its name.
pub fn flush_dir(dir: &Path) -> io::Result<()> {
    sys::flush_dir(dir)
}

/// `name` unchanged if it has at most `max` units, else its first `keep`
/// units and `~`: bytes on unix (exact, a name need not be UTF-8), UTF-16
/// code units on Windows (what NTFS counts; a surrogate pair is never
/// split, so the cut may be one unit shorter). [`temp_prefix`](crate::temp_prefix)
/// shortens names this way.
pub fn shorten_name(name: &OsStr, max: usize, keep: usize) -> OsString {
    sys::shorten_name(name, max, keep)
}

/// The bytes a file takes on disk: on unix its 512-byte blocks (less than
/// its length when sparse, more for the last block's slack); on Windows its
/// length, 0 for a directory (std's `Metadata` has no allocation size
/// there).
pub fn allocated_bytes(meta: &Metadata) -> u64 {
    sys::allocated_bytes(meta)
}

/// What a file that is not a regular file is, for messages: `a directory`,
/// `a FIFO`, `a socket`, `a device` (the last three on unix only), else
/// `not a regular file`.
pub fn describe_file_type(file_type: &FileType) -> &'static str {
    if file_type.is_dir() {
        "a directory"
    } else {
        sys::describe_special(file_type).unwrap_or("not a regular file")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::io::Write;

    #[test]
    fn reads_at_an_offset_and_cuts_an_append_only_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        fs::write(&path, b"one\ntwo\ntorn").unwrap();
        let mut f =
            open_no_follow(OpenOptions::new().read(true).append(true), &path, 0o666).unwrap();
        let mut buf = [0u8; 3];
        read_exact_at(&f, &mut buf, 4).unwrap();
        assert_eq!(&buf, b"two");
        let err = read_exact_at(&f, &mut buf, 11).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
        set_len(&f, 8).unwrap();
        // Writes still go to the (new) end.
        f.write_all(b"three\n").unwrap();
        drop(f);
        assert_eq!(fs::read(&path).unwrap(), b"one\ntwo\nthree\n");
    }

    #[test]
    fn open_no_follow_creates_and_refuses_what_is_not_there() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("new");
        let f = open_no_follow(
            OpenOptions::new().append(true).create_new(true),
            &path,
            0o600,
        );
        drop(f.unwrap());
        assert!(path.is_file());
        let again = open_no_follow(
            OpenOptions::new().append(true).create_new(true),
            &path,
            0o600,
        );
        assert_eq!(again.unwrap_err().kind(), io::ErrorKind::AlreadyExists);
        let missing = open_no_follow(OpenOptions::new().read(true), &dir.path().join("x"), 0);
        assert_eq!(missing.unwrap_err().kind(), io::ErrorKind::NotFound);
        // A symbolic link is refused, not followed. Unix only: Windows needs
        // a privilege to make one, and wine's read back as something else.
        #[cfg(unix)]
        {
            let link = dir.path().join("link");
            std::os::unix::fs::symlink("new", &link).unwrap();
            let err = open_no_follow(OpenOptions::new().read(true), &link, 0).unwrap_err();
            assert_ne!(err.kind(), io::ErrorKind::NotFound, "{err}");
        }
    }

    #[test]
    fn write_access_refuses_a_read_only_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        fs::write(&path, b"x").unwrap();
        check_write_access(&path).unwrap();
        check_write_access(dir.path()).unwrap();
        let mut perms = fs::metadata(&path).unwrap().permissions();
        perms.set_readonly(true);
        fs::set_permissions(&path, perms).unwrap();
        // Root may write anything on unix: only an ordinary user is refused.
        if cfg!(windows) || !is_root() {
            let err = check_write_access(&path).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::PermissionDenied, "{err}");
        }
        assert_eq!(
            check_write_access(&dir.path().join("missing"))
                .unwrap_err()
                .kind(),
            io::ErrorKind::NotFound
        );
        // Writable again, or Windows could not remove the temp dir.
        let mut perms = fs::metadata(&path).unwrap().permissions();
        #[allow(clippy::permissions_set_readonly_false)]
        perms.set_readonly(false);
        fs::set_permissions(&path, perms).unwrap();
    }

    #[cfg(unix)]
    fn is_root() -> bool {
        rustix::process::geteuid().is_root()
    }

    #[cfg(windows)]
    fn is_root() -> bool {
        false
    }

    #[test]
    fn directories_and_new_entries_are_flushed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("new");
        let f = open_no_follow(
            OpenOptions::new().write(true).create_new(true),
            &path,
            0o600,
        );
        flush_entry(&f.unwrap(), &path).unwrap();
        flush_dir(dir.path()).unwrap();
        if cfg!(unix) {
            let err = flush_dir(&dir.path().join("missing")).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::NotFound);
        }
    }

    #[test]
    fn long_names_are_cut_and_marked() {
        let name = OsStr::new("abcdef");
        assert_eq!(shorten_name(name, 6, 3), "abcdef");
        assert_eq!(shorten_name(name, 5, 3), "abc~");
    }

    #[test]
    fn file_types_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let ft = fs::metadata(dir.path()).unwrap().file_type();
        assert_eq!(describe_file_type(&ft), "a directory");
        #[cfg(unix)]
        {
            let sock = dir.path().join("sock");
            let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
            let ft = fs::metadata(&sock).unwrap().file_type();
            assert_eq!(describe_file_type(&ft), "a socket");
        }
    }
}
