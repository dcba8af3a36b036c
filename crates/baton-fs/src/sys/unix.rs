//! baton-fs on unix (Linux and macOS): file names are bytes, new files get
//! mode bits, and a rename is made durable by flushing its directory.

use std::ffi::{OsStr, OsString};
use std::fs::{self, File, FileType, Metadata, OpenOptions};
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
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

/// `fsync(2)` of the directory at `dir` (macOS: see [`sync_dir`]).
pub(crate) fn flush_dir(dir: &Path) -> io::Result<()> {
    File::open(dir).and_then(|d| sync_dir(&d))
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

/// `open(2)` with `O_NOFOLLOW | O_NONBLOCK`, and `mode` for a new file.
pub(crate) fn open_no_follow(
    options: &mut OpenOptions,
    path: &Path,
    mode: u32,
) -> io::Result<File> {
    options
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .mode(mode)
        .open(path)
}

/// `pread(2)` until `buf` is full.
pub(crate) fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
}

/// `ftruncate(2)`: any writable descriptor, an appending one too.
pub(crate) fn set_len(file: &File, len: u64) -> io::Result<()> {
    file.set_len(len)
}

/// `faccessat(2)` with `W_OK` and `AT_EACCESS`.
pub(crate) fn check_write_access(path: &Path) -> io::Result<()> {
    use rustix::fs::{Access, AtFlags};
    rustix::fs::accessat(rustix::fs::CWD, path, Access::WRITE_OK, AtFlags::EACCESS)
        .map_err(io::Error::from)
}

/// Owner (as root), group (as root or a member) and mode bits of `like`
/// onto `file`; see `baton_fs::copy_owner_and_mode`.
pub(crate) fn copy_owner_and_mode(file: &File, like: &Metadata, mask: u32) -> io::Result<()> {
    use rustix::fs::{Gid, Uid};
    let ours = file.metadata()?;
    let root = rustix::process::geteuid().is_root();
    let (uid, gid) = (Uid::from_raw(like.uid()), Gid::from_raw(like.gid()));
    let owner_kept =
        like.uid() == ours.uid() || (root && rustix::fs::fchown(file, Some(uid), None).is_ok());
    let group_kept = like.gid() == ours.gid()
        || ((root || is_member(gid)) && rustix::fs::fchown(file, None, Some(gid)).is_ok());
    let mut mode = like.mode() & mask & 0o7777;
    if !owner_kept {
        mode &= !0o4000;
    }
    if !group_kept {
        let others = mode & 0o007;
        mode &= !(0o2000 | (0o070 & !(others << 3)));
    }
    // std's `set_permissions` is `fchmod(2)`, with the width of `mode_t`
    // of each system (32 bits on Linux, 16 on macOS).
    file.set_permissions(fs::Permissions::from_mode(mode))
}

/// Whether the calling process is in group `gid` (effective or supplementary).
fn is_member(gid: rustix::fs::Gid) -> bool {
    rustix::process::getegid() == gid
        || rustix::process::getgroups().is_ok_and(|groups| groups.contains(&gid))
}

/// FIFOs, sockets and devices.
pub(crate) fn describe_special(file_type: &FileType) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    if file_type.is_fifo() {
        Some("a FIFO")
    } else if file_type.is_socket() {
        Some("a socket")
    } else if file_type.is_block_device() || file_type.is_char_device() {
        Some("a device")
    } else {
        None
    }
}

/// `ENOTEMPTY`.
pub(crate) const NOT_EMPTY: i32 = libc::ENOTEMPTY;

/// The `errno`s of each cause of `crate::ErrorCause` (`cause.rs` tells
/// them apart with these): denied, read-only, not empty, busy.
pub(crate) const DENIED: &[i32] = &[libc::EACCES, libc::EPERM];
pub(crate) const READ_ONLY: &[i32] = &[libc::EROFS];
pub(crate) const NOT_EMPTY_CODES: &[i32] = &[libc::ENOTEMPTY, libc::EEXIST];
pub(crate) const BUSY: &[i32] = &[libc::EBUSY];

/// Device and inode (`crate::FileId`).
pub(crate) fn metadata_id(meta: &Metadata) -> Option<(u64, u64)> {
    Some((meta.dev(), meta.ino()))
}

/// Device and inode of the open `file`.
pub(crate) fn file_id(file: &File) -> io::Result<(u64, u64)> {
    let meta = file.metadata()?;
    Ok((meta.dev(), meta.ino()))
}

/// Device and inode of the file at `path` (a symbolic link followed).
pub(crate) fn path_id(path: &Path) -> io::Result<(u64, u64)> {
    let meta = std::fs::metadata(path)?;
    Ok((meta.dev(), meta.ino()))
}

/// 512-byte blocks allocated.
pub(crate) fn allocated_bytes(meta: &Metadata) -> u64 {
    meta.blocks().saturating_mul(512)
}
