//! What Linux and macOS share: OFD byte-range locks through `fcntl`, file
//! identities, positioned I/O and how lock files are opened.
//!
//! OFD locks belong to an open file description, not to a process or thread:
//! they are released when the last descriptor for it is closed, which the
//! kernel does when the holder dies, even by SIGKILL. They are independent of
//! the file's content, so one lock file carries many lockable bytes.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use super::FileId;
use crate::ofd::{Conflict, Kind};

fn raw(kind: Kind) -> libc::c_short {
    match kind {
        Kind::Read => libc::F_RDLCK as libc::c_short,
        Kind::Write => libc::F_WRLCK as libc::c_short,
    }
}

fn flock_struct(ty: libc::c_short, start: u64, len: u64) -> io::Result<libc::flock> {
    let to_off =
        |v: u64| libc::off_t::try_from(v).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput));
    // SAFETY: `flock` is a plain C struct for which all-zero bytes is a valid value.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = ty;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = to_off(start)?;
    fl.l_len = to_off(len)?;
    fl.l_pid = 0; // required by OFD locks
    Ok(fl)
}

fn fcntl_lock(file: &File, cmd: libc::c_int, fl: &mut libc::flock) -> io::Result<()> {
    // SAFETY: `file` is an open descriptor for the duration of the borrow and
    // `fl` points to a properly initialised `flock` that the kernel may write to.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), cmd, fl as *mut libc::flock) };
    if rc == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Tries to take a lock without waiting; `Ok(false)` if another holder conflicts.
pub(crate) fn try_lock(file: &File, kind: Kind, start: u64, len: u64) -> io::Result<bool> {
    let mut fl = flock_struct(raw(kind), start, len)?;
    match fcntl_lock(file, libc::F_OFD_SETLK, &mut fl) {
        Ok(()) => Ok(true),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EACCES)) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Releases whatever this open file description holds in the range.
pub(crate) fn unlock(file: &File, start: u64, len: u64) -> io::Result<()> {
    let mut fl = flock_struct(libc::F_UNLCK as libc::c_short, start, len)?;
    fcntl_lock(file, libc::F_OFD_SETLK, &mut fl)
}

/// Blocks in the kernel until the lock is taken; `EINTR` when a signal
/// interrupted the wait.
pub(crate) fn lock_blocking(file: &File, kind: Kind, start: u64, len: u64) -> io::Result<()> {
    let mut fl = flock_struct(raw(kind), start, len)?;
    fcntl_lock(file, libc::F_OFD_SETLKW, &mut fl)
}

/// One lock held by another open file description that conflicts with
/// taking `kind` over the range, if any (which one, of several, is up to
/// the kernel).
pub(crate) fn find_conflict(
    file: &File,
    kind: Kind,
    start: u64,
    len: u64,
) -> io::Result<Option<Conflict>> {
    let mut fl = flock_struct(raw(kind), start, len)?;
    fcntl_lock(file, libc::F_OFD_GETLK, &mut fl)?;
    if fl.l_type == libc::F_UNLCK as libc::c_short {
        return Ok(None);
    }
    let kind = if fl.l_type == libc::F_WRLCK as libc::c_short {
        Kind::Write
    } else {
        Kind::Read
    };
    Ok(Some(Conflict {
        start: u64::try_from(fl.l_start).unwrap_or(0),
        len: u64::try_from(fl.l_len).unwrap_or(0),
        kind,
    }))
}

/// The identity of an open file.
pub(crate) fn file_id(file: &File) -> io::Result<FileId> {
    Ok(id_of(&file.metadata()?))
}

/// The identity of the file `path` names (not following a symbolic link).
pub(crate) fn path_id(path: &Path) -> io::Result<FileId> {
    Ok(id_of(&std::fs::symlink_metadata(path)?))
}

fn id_of(meta: &std::fs::Metadata) -> FileId {
    FileId {
        dev: meta.dev(),
        ino: meta.ino(),
    }
}

/// Options to open an existing lock file for locking (read, write, not
/// through a symbolic link, close-on-exec as every std descriptor).
pub(crate) fn lock_file_options() -> OpenOptions {
    let mut options = OpenOptions::new();
    options
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW);
    options
}

/// Opens a lock file to read its state (`status`), not through a symbolic link.
pub(crate) fn open_for_status(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// Reads at `offset`; the number of bytes read (short at the end of the file).
pub(crate) fn read_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    file.read_at(buf, offset)
}

/// Writes all of `buf` at `offset`.
pub(crate) fn write_all_at(file: &File, buf: &[u8], offset: u64) -> io::Result<()> {
    file.write_all_at(buf, offset)
}

/// Creates `path` and its missing parents, mode 0700.
pub(crate) fn create_private_dir_all(path: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
}

/// Sets the mode bits of `path`.
pub(crate) fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// What names this user's default baton dir: the effective uid.
pub(crate) fn user_tag() -> String {
    rustix::process::geteuid().as_raw().to_string()
}

/// Refuses a baton dir that another user could tamper with (writable by
/// all, or not ours unless shared with a group we are in); says whether
/// it is shared with a group.
pub(crate) fn vet_owner(meta: &std::fs::Metadata) -> Result<crate::dir::Sharing, String> {
    use crate::dir::Sharing;
    if meta.permissions().mode() & 0o002 != 0 {
        return Err(
            "is writable by every user; run `chmod o-w` on it or choose another directory".into(),
        );
    }
    let shared = meta.mode() & crate::sharing::SHARED_DIR_BITS == crate::sharing::SHARED_DIR_BITS;
    let uid = rustix::process::geteuid().as_raw();
    if shared {
        if crate::sharing::is_member(meta.gid()) || meta.uid() == uid || uid == 0 {
            return Ok(Sharing::Group { gid: meta.gid() });
        }
        return Err(format!(
            "is shared with group {group}, and you (uid {uid}) are not in it; ask an administrator to add you (`usermod -aG {name} $USER`, then log in again), or use a baton dir of your own (--dir or BATON_DIR)",
            group = crate::sharing::describe_group(meta.gid()),
            name = crate::sharing::group_name(meta.gid()).unwrap_or_else(|| meta.gid().to_string()),
        ));
    }
    if meta.uid() != uid {
        return Err(format!(
            "is owned by uid {}, not by you (uid {uid}); to share a baton dir between users, its owner runs `baton init --shared GROUP DIR`",
            meta.uid()
        ));
    }
    Ok(Sharing::Private)
}

/// The `statfs(2)` type of the filesystem under `path` (its magic number).
pub(crate) fn filesystem_magic(path: &Path) -> io::Result<u64> {
    let st = rustix::fs::statfs(path)?;
    // `f_type` is a C long (or narrower) holding a 32-bit magic number;
    // widening through i64 keeps it whatever the architecture's type.
    #[allow(clippy::unnecessary_cast)] // the field's type differs per architecture
    Ok(st.f_type as i64 as u64)
}

/// Free space on the filesystem of `path` (`statvfs(2)`).
pub(crate) fn free_space(path: &Path) -> io::Result<crate::diagnose::Space> {
    let st = rustix::fs::statvfs(path)?;
    Ok(crate::diagnose::Space {
        available_bytes: st.f_bavail.saturating_mul(st.f_frsize),
        total_bytes: st.f_blocks.saturating_mul(st.f_frsize),
        available_inodes: st.f_favail,
    })
}

/// Options for the probe files of `baton doctor` (0600, not through a link).
pub(crate) fn probe_file_options() -> OpenOptions {
    let mut options = OpenOptions::new();
    options
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW);
    options
}

extern "C" fn fork_child_handler() {
    crate::fork_safe::after_fork_in_child();
}

/// Has libc's `fork` call `fork_safe::after_fork_in_child` in every child,
/// before the child runs any code of its own (`pthread_atfork`).
pub(crate) fn call_after_fork_in_child() {
    // SAFETY: registers a plain function with no prepare or parent handler;
    // the handler does one atomic add, which is async-signal-safe, as a
    // handler run in a child of a multi-threaded process must be.
    let rc = unsafe { libc::pthread_atfork(None, None, Some(fork_child_handler)) };
    if rc != 0 {
        // Only ENOMEM: a child is then told apart by its pid alone.
        tracing::debug!(rc, "pthread_atfork failed");
    }
}
