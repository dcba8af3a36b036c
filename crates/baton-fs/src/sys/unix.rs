//! baton-fs on unix (Linux and macOS): file names are bytes, new files get
//! mode bits, and a rename is made durable by flushing its directory.

use std::ffi::{OsStr, OsString};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::error::{IoResultExt, PathError};

/// `name` unchanged if it has at most `max` bytes, else its first `keep`
/// bytes and `~`. Exact bytes: a name need not be UTF-8 on unix.
pub(crate) fn shorten_name(name: &OsStr, max: usize, keep: usize) -> OsString {
    let bytes = name.as_bytes();
    if bytes.len() <= max {
        return name.to_os_string();
    }
    let mut out = Vec::with_capacity(keep + 1);
    out.extend_from_slice(&bytes[..keep.min(bytes.len())]);
    out.push(b'~');
    OsString::from_vec(out)
}

/// Creates `path` exclusively (`O_CREAT | O_EXCL`: it clobbers nothing, not
/// even through a symbolic link), writable, with permission bits `mode`
/// minus the umask.
pub(crate) fn create_new(path: &Path, mode: u32) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
}

/// `rename(2)` of `from` over `to`: atomic, replacing a file even while
/// others have it open (they keep reading the old one). `durable` asks for
/// nothing more here: the directory is flushed by [`flush_rename`].
pub(crate) fn rename(from: &Path, to: &Path, durable: bool) -> io::Result<()> {
    let _ = durable;
    fs::rename(from, to)
}

/// Makes a rename into `dir` durable: `fsync(2)` of the directory (on
/// macOS `F_FULLFSYNC`, see [`sync_dir`]). The renamed file (`_file`, at
/// `_target`) needs nothing more.
pub(crate) fn flush_rename(_file: &File, _target: &Path, dir: &Path) -> Result<(), PathError> {
    File::open(dir)
        .and_then(|d| sync_dir(&d))
        .context("cannot flush directory", dir)
}

/// `fsync(2)` of an open directory (std's `sync_all`).
#[cfg(not(target_vendor = "apple"))]
fn sync_dir(dir: &File) -> io::Result<()> {
    dir.sync_all()
}

/// std's `sync_all` is `fcntl(F_FULLFSYNC)` on macOS, which flushes the
/// drive's cache too; where a file system refuses it for a directory
/// (`ENOTSUP`, `EINVAL`), plain `fsync(2)`, as SQLite does.
#[cfg(target_vendor = "apple")]
fn sync_dir(dir: &File) -> io::Result<()> {
    use rustix::io::Errno;
    match dir.sync_all() {
        Err(e) if matches!(Errno::from_io_error(&e), Some(Errno::NOTSUP | Errno::INVAL)) => {
            rustix::fs::fsync(dir).map_err(io::Error::from)
        }
        done => done,
    }
}

/// 64 bits from the system's random source (`getentropy(2)` on macOS, via
/// the getrandom crate), or `None` if it did not answer.
#[cfg(not(target_os = "linux"))]
pub(crate) fn random_u64() -> Option<u64> {
    let mut buf = [0u8; 8];
    getrandom::fill(&mut buf).ok()?;
    Some(u64::from_ne_bytes(buf))
}

/// For the crates above that call rustix: its error gets a path like an
/// `io::Error` does.
impl<T> IoResultExt<T> for Result<T, rustix::io::Errno> {
    fn context(self, op: &'static str, path: impl AsRef<Path>) -> Result<T, PathError> {
        self.map_err(io::Error::from).context(op, path)
    }
}
