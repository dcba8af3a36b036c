//! Windows: `LockFileEx`/`UnlockFileEx` byte ranges of a handle, file
//! identities, positioned I/O, processes (`docs/src/design/locking.md`, "Platforms").
//!
//! A lock file is opened for overlapped I/O, so that a wait for a range can
//! be bounded: the `LockFileEx` request is left pending and waited for with
//! `WaitForMultipleObjects` (its event and the cancel token's) until the
//! deadline, then cancelled with `CancelIoEx`. Wine (8) leaves pending lock
//! requests pending forever ("async I/O lock wait not implemented"): under
//! wine, waits poll (`poll.rs`). The document is read and written with
//! overlapped `ReadFile`/`WriteFile` waited for at once.
//!
//! Windows has no `F_OFD_GETLK`: [`find_conflict`] tries a lock over the
//! range with `LOCKFILE_FAIL_IMMEDIATELY` and releases it at once, narrowing
//! the range; why the race this opens is harmless is in `docs/src/design/locking.md`.
//! `UnlockFileEx` must name exactly a locked range; every unlock of this
//! crate does (one byte), and one that finds nothing locked is no error.

// Misfires on the `const` initialiser of `IO_EVENT` (cross-built with -Zbuild-std).
#![allow(clippy::missing_const_for_thread_local)]

use std::cell::RefCell;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::windows::fs::OpenOptionsExt;
use std::os::windows::io::{AsRawHandle, FromRawHandle, OwnedHandle};
use std::path::Path;
use std::sync::OnceLock;
use std::time::Instant;

use windows_sys::Win32::Foundation::{
    ERROR_HANDLE_EOF, ERROR_IO_PENDING, ERROR_LOCK_VIOLATION, ERROR_NOT_LOCKED,
    ERROR_OPERATION_ABORTED, HANDLE, WAIT_OBJECT_0, WAIT_TIMEOUT,
};
use windows_sys::Win32::Storage::FileSystem::{
    GetFileInformationByHandle, LockFileEx, ReadFile, UnlockFileEx, WriteFile,
    BY_HANDLE_FILE_INFORMATION, FILE_FLAG_BACKUP_SEMANTICS, FILE_FLAG_OPEN_REPARSE_POINT,
    FILE_FLAG_OVERLAPPED, FILE_SHARE_DELETE, FILE_SHARE_READ, FILE_SHARE_WRITE,
    LOCKFILE_EXCLUSIVE_LOCK, LOCKFILE_FAIL_IMMEDIATELY,
};
use windows_sys::Win32::System::LibraryLoader::{GetModuleHandleW, GetProcAddress};
use windows_sys::Win32::System::Threading::{
    CreateEventW, ResetEvent, SetEvent, WaitForMultipleObjects, INFINITE,
};
use windows_sys::Win32::System::IO::{CancelIoEx, GetOverlappedResult, OVERLAPPED};

use super::FileId;
use crate::cancel::CancelToken;
use crate::ofd::{cancelled, Conflict, Kind};

mod process;
pub(crate) use process::*;

fn handle(file: &File) -> HANDLE {
    file.as_raw_handle() as HANDLE
}

fn overlapped(offset: u64, event: HANDLE) -> OVERLAPPED {
    // SAFETY: OVERLAPPED is a plain C struct; all-zero bytes is a valid value.
    let mut o: OVERLAPPED = unsafe { std::mem::zeroed() };
    o.Anonymous.Anonymous.Offset = offset as u32;
    o.Anonymous.Anonymous.OffsetHigh = (offset >> 32) as u32;
    o.hEvent = event;
    o
}

/// A new manual-reset event, not signalled.
fn new_event() -> io::Result<OwnedHandle> {
    // SAFETY: null security attributes and name are allowed; the handle
    // returned is ours to own and close.
    let h = unsafe { CreateEventW(std::ptr::null(), 1, 0, std::ptr::null()) };
    if h.is_null() {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `h` is a new, valid handle that nothing else owns.
    Ok(unsafe { OwnedHandle::from_raw_handle(h) })
}

// The event of this thread's short requests (tries, unlocks, reads,
// writes): each is waited for before the next one starts.
thread_local! {
    static IO_EVENT: RefCell<Option<OwnedHandle>> = const { RefCell::new(None) };
}

/// Runs `f` with this thread's I/O event, reset.
fn with_io_event<R>(f: impl FnOnce(HANDLE) -> io::Result<R>) -> io::Result<R> {
    IO_EVENT.with(|cell| {
        let mut cell = cell.borrow_mut();
        if cell.is_none() {
            *cell = Some(new_event()?);
        }
        let event = cell
            .as_ref()
            .map_or(std::ptr::null_mut(), |h| h.as_raw_handle() as HANDLE);
        // SAFETY: `event` is a live event handle owned by this thread.
        unsafe { ResetEvent(event) };
        f(event)
    })
}

/// Waits for the request `o` on `file` to end; its byte count.
fn finish(file: &File, o: &OVERLAPPED) -> io::Result<u32> {
    let mut n = 0u32;
    // SAFETY: `o` is the OVERLAPPED of a request started on this handle, alive
    // until the request has ended, which this call (bWait = TRUE) waits for.
    let ok = unsafe { GetOverlappedResult(handle(file), o, &mut n, 1) };
    if ok == 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n)
}

fn is(e: &io::Error, code: u32) -> bool {
    e.raw_os_error() == Some(code as i32)
}

fn flags(kind: Kind) -> u32 {
    match kind {
        Kind::Read => 0,
        Kind::Write => LOCKFILE_EXCLUSIVE_LOCK,
    }
}

/// Tries to take a lock without waiting; `Ok(false)` if another holder conflicts.
pub(crate) fn try_lock(file: &File, kind: Kind, start: u64, len: u64) -> io::Result<bool> {
    with_io_event(|event| {
        let mut o = overlapped(start, event);
        // SAFETY: a live handle and an OVERLAPPED that outlives the request
        // (a pending one is waited for by `finish` before `o` goes away).
        let ok = unsafe {
            LockFileEx(
                handle(file),
                flags(kind) | LOCKFILE_FAIL_IMMEDIATELY,
                0,
                len as u32,
                (len >> 32) as u32,
                &mut o,
            )
        };
        let result = if ok != 0 {
            Ok(())
        } else {
            let e = io::Error::last_os_error();
            if is(&e, ERROR_IO_PENDING) {
                finish(file, &o).map(drop)
            } else {
                Err(e)
            }
        };
        match result {
            Ok(()) => Ok(true),
            Err(e) if is(&e, ERROR_LOCK_VIOLATION) => Ok(false),
            Err(e) => Err(e),
        }
    })
}

/// Releases this handle's lock of exactly this range; nothing locked there
/// is no error (`ERROR_NOT_LOCKED`; wine says `ERROR_LOCK_VIOLATION`).
pub(crate) fn unlock(file: &File, start: u64, len: u64) -> io::Result<()> {
    with_io_event(|event| {
        let mut o = overlapped(start, event);
        // SAFETY: as in `try_lock`; an unlock does not stay pending.
        let ok = unsafe { UnlockFileEx(handle(file), 0, len as u32, (len >> 32) as u32, &mut o) };
        if ok != 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if is(&e, ERROR_NOT_LOCKED) || is(&e, ERROR_LOCK_VIOLATION) {
            return Ok(());
        }
        Err(e)
    })
}

/// Whether this handle could take `kind` over the range now (tried and
/// released at once).
fn free(file: &File, kind: Kind, start: u64, len: u64) -> io::Result<bool> {
    if try_lock(file, kind, start, len)? {
        unlock(file, start, len)?;
        return Ok(true);
    }
    Ok(false)
}

/// The highest byte of the range held by another handle in a way that
/// conflicts with `kind` (a shared try finds exclusive locks, an exclusive
/// one finds any), found by trying locks over parts of the range: first
/// growing windows from its start (tickets and slots sit near the start of
/// their ranges), then halves.
pub(crate) fn find_conflict(
    file: &File,
    kind: Kind,
    start: u64,
    len: u64,
) -> io::Result<Option<Conflict>> {
    if len == 0 || free(file, kind, start, len)? {
        return Ok(None);
    }
    let end = start.saturating_add(len);
    // A conflict lies in [lo, hi).
    let (mut lo, mut hi) = (start, end);
    let mut width: u64 = 16;
    while lo.saturating_add(width) < hi {
        let above = lo + width;
        if free(file, kind, above, hi - above)? {
            hi = above;
            break;
        }
        lo = above;
        width = width.saturating_mul(16);
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if free(file, kind, mid, hi - mid)? {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    let found = match kind {
        Kind::Read => Kind::Write,
        Kind::Write if free(file, Kind::Read, lo, 1)? => Kind::Read,
        Kind::Write => Kind::Write,
    };
    Ok(Some(Conflict {
        start: lo,
        len: 1,
        kind: found,
    }))
}

/// Whether this process runs under wine, whose pending lock requests never
/// complete.
fn under_wine() -> bool {
    static WINE: OnceLock<bool> = OnceLock::new();
    *WINE.get_or_init(|| {
        let ntdll: Vec<u16> = "ntdll.dll\0".encode_utf16().collect();
        // SAFETY: a NUL-terminated name; the module handle is not owned (no close).
        let module = unsafe { GetModuleHandleW(ntdll.as_ptr()) };
        if module.is_null() {
            return false;
        }
        // SAFETY: a valid module handle and a NUL-terminated name.
        unsafe { GetProcAddress(module, c"wine_get_version".as_ptr().cast()) }.is_some()
    })
}

/// Waits for the lock until `deadline`, or a cancel (see the module docs).
pub(crate) fn lock_wait(
    file: &File,
    kind: Kind,
    start: u64,
    len: u64,
    deadline: Option<Instant>,
    cancel: Option<&CancelToken>,
) -> io::Result<bool> {
    if under_wine() {
        return super::poll_until(deadline, cancel, || try_lock(file, kind, start, len));
    }
    let done = new_event()?;
    let stop = new_event()?;
    let _attached = match cancel {
        Some(token) => {
            let raw = stop.as_raw_handle() as usize;
            // SAFETY: the event stays open until after `detach` below, which
            // the token runs under the same lock as this callback.
            let fire = move || unsafe {
                SetEvent(raw as HANDLE);
            };
            if token.attach(Box::new(fire)) {
                token.detach();
                return Err(cancelled());
            }
            Some(Detach(token))
        }
        None => None,
    };
    let mut o = overlapped(start, done.as_raw_handle() as HANDLE);
    // SAFETY: a live handle; `o` lives until the request has ended: every
    // path below that leaves while it may be pending cancels it and waits.
    let ok = unsafe {
        LockFileEx(
            handle(file),
            flags(kind),
            0,
            len as u32,
            (len >> 32) as u32,
            &mut o,
        )
    };
    if ok != 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    if !is(&e, ERROR_IO_PENDING) {
        return Err(e);
    }
    let handles = [
        done.as_raw_handle() as HANDLE,
        stop.as_raw_handle() as HANDLE,
    ];
    loop {
        let timeout = deadline.map_or(INFINITE, |d| {
            let left = d.saturating_duration_since(Instant::now());
            // Rounded up, so the wait does not end a little early.
            u32::try_from(left.as_micros().div_ceil(1000)).unwrap_or(INFINITE - 1)
        });
        // SAFETY: two live event handles.
        let r = unsafe { WaitForMultipleObjects(2, handles.as_ptr(), 0, timeout) };
        if r == WAIT_OBJECT_0 {
            return finish(file, &o).map(|_| true);
        }
        if r == WAIT_TIMEOUT && deadline.is_some_and(|d| Instant::now() < d) {
            continue;
        }
        // The deadline, a cancel, or a failed wait: withdraw the request.
        let failed = (r != WAIT_TIMEOUT && r != WAIT_OBJECT_0 + 1).then(io::Error::last_os_error);
        // SAFETY: `o` is the OVERLAPPED of the pending request on this handle.
        unsafe { CancelIoEx(handle(file), &o) };
        return match finish(file, &o) {
            // Granted just before the cancel took effect: it is ours.
            Ok(_) => Ok(true),
            Err(e) if is(&e, ERROR_OPERATION_ABORTED) => match failed {
                Some(f) => Err(f),
                None if cancel.is_some_and(CancelToken::is_cancelled) => Err(cancelled()),
                None => Ok(false),
            },
            Err(e) => Err(e),
        };
    }
}

/// Forgets the waiter registered with a token when the wait ends.
struct Detach<'a>(&'a CancelToken);

impl Drop for Detach<'_> {
    fn drop(&mut self) {
        self.0.detach();
    }
}

/// Byte-range locks work on every Windows file system baton is used on
/// (local volumes; SMB forwards them): nothing to check.
pub(crate) fn locks_work(_dir: &Path) -> Result<(), String> {
    Ok(())
}

/// Semaphore waiters poll on Windows.
pub(crate) fn watch_slots(
    _path: &Path,
    _deadline: Option<Instant>,
    _cancel: Option<&CancelToken>,
    _attempt: &mut dyn FnMut() -> io::Result<Option<u32>>,
) -> Option<io::Result<Option<u32>>> {
    None
}

/// inotify is Linux-only.
pub(crate) fn try_inotify(_dir: &Path) -> Result<(), String> {
    Err("inotify is Linux-only: semaphore waiters poll (1 ms doubling to 50 ms)".into())
}

/// A held lock file cannot be deleted or renamed on Windows (it is open
/// without `FILE_SHARE_DELETE`): there is never a holder through another file.
pub(crate) fn holders_elsewhere(_mark: u64, _ours: Option<FileId>) -> Option<Vec<String>> {
    Some(Vec::new())
}

/// The processes holding a lock's slots cannot be listed on Windows.
pub(crate) fn kernel_holders(_file: FileId, _max: u32) -> Vec<crate::kernel_holders::KernelHolder> {
    Vec::new()
}

/// The identity of an open file: volume serial number and file index.
pub(crate) fn file_id(file: &File) -> io::Result<FileId> {
    // SAFETY: all-zero bytes is a valid BY_HANDLE_FILE_INFORMATION.
    let mut info: BY_HANDLE_FILE_INFORMATION = unsafe { std::mem::zeroed() };
    // SAFETY: a live handle and a properly sized out-structure.
    if unsafe { GetFileInformationByHandle(handle(file), &mut info) } == 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(FileId {
        dev: u64::from(info.dwVolumeSerialNumber),
        ino: (u64::from(info.nFileIndexHigh) << 32) | u64::from(info.nFileIndexLow),
    })
}

/// The identity of the file `path` names (not following a symbolic link),
/// opened without access, sharing everything.
pub(crate) fn path_id(path: &Path) -> io::Result<FileId> {
    let file = OpenOptions::new()
        .access_mode(0)
        .share_mode(FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE)
        .custom_flags(FILE_FLAG_OPEN_REPARSE_POINT | FILE_FLAG_BACKUP_SEMANTICS)
        .open(path)?;
    file_id(&file)
}

/// Options to open a lock file for locking: read and write, overlapped,
/// shared for reading and writing but not deleting (so Windows refuses to
/// delete or rename it while it is open).
pub(crate) fn lock_file_options() -> OpenOptions {
    let mut options = OpenOptions::new();
    options
        .read(true)
        .write(true)
        .share_mode(FILE_SHARE_READ | FILE_SHARE_WRITE)
        .custom_flags(FILE_FLAG_OVERLAPPED);
    options
}

/// Opens a lock file to read its state (`status`).
pub(crate) fn open_for_status(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .share_mode(FILE_SHARE_READ | FILE_SHARE_WRITE)
        .custom_flags(FILE_FLAG_OVERLAPPED)
        .open(path)
}

/// Reads at `offset`; the number of bytes read (short at the end of the file).
pub(crate) fn read_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let len = u32::try_from(buf.len()).unwrap_or(u32::MAX);
    with_io_event(|event| {
        let mut o = overlapped(offset, event);
        // SAFETY: `buf` is valid for `len` bytes and outlives the request,
        // which `finish` waits for.
        let ok = unsafe {
            ReadFile(
                handle(file),
                buf.as_mut_ptr(),
                len,
                std::ptr::null_mut(),
                &mut o,
            )
        };
        if ok == 0 {
            let e = io::Error::last_os_error();
            if is(&e, ERROR_HANDLE_EOF) {
                return Ok(0);
            }
            if !is(&e, ERROR_IO_PENDING) {
                return Err(e);
            }
        }
        match finish(file, &o) {
            Ok(n) => Ok(n as usize),
            Err(e) if is(&e, ERROR_HANDLE_EOF) => Ok(0),
            Err(e) => Err(e),
        }
    })
}

/// Writes all of `buf` at `offset`.
pub(crate) fn write_all_at(file: &File, mut buf: &[u8], mut offset: u64) -> io::Result<()> {
    while !buf.is_empty() {
        let len = u32::try_from(buf.len()).unwrap_or(u32::MAX);
        let n = with_io_event(|event| {
            let mut o = overlapped(offset, event);
            // SAFETY: `buf` is valid for `len` bytes and outlives the
            // request, which `finish` waits for.
            let ok = unsafe {
                WriteFile(
                    handle(file),
                    buf.as_ptr(),
                    len,
                    std::ptr::null_mut(),
                    &mut o,
                )
            };
            if ok == 0 {
                let e = io::Error::last_os_error();
                if !is(&e, ERROR_IO_PENDING) {
                    return Err(e);
                }
            }
            finish(file, &o)
        })?;
        if n == 0 {
            return Err(io::Error::from(io::ErrorKind::WriteZero));
        }
        buf = &buf[n as usize..];
        offset += u64::from(n);
    }
    Ok(())
}

/// Creates `path` and its missing parents (their ACL inherited).
pub(crate) fn create_private_dir_all(path: &Path) -> io::Result<()> {
    std::fs::create_dir_all(path)
}

/// Windows has no mode bits: nothing to set.
pub(crate) fn set_mode(_path: &Path, _mode: u32) -> io::Result<()> {
    Ok(())
}

/// What names this user's default baton dir: the user name, reduced to
/// `[A-Za-z0-9._-]` (the temporary dir is the user's own already).
pub(crate) fn user_tag() -> String {
    user_name()
        .unwrap_or_else(|| "user".into())
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Windows: who may use a directory is its ACL, which baton leaves alone:
/// every baton dir is private to whoever the ACL admits.
pub(crate) fn vet_owner(_meta: &std::fs::Metadata) -> Result<crate::dir::Sharing, String> {
    Ok(crate::dir::Sharing::Private)
}

/// Windows has no filesystem magic numbers: 0 ("unknown" to the table).
pub(crate) fn filesystem_magic(_path: &Path) -> io::Result<u64> {
    Ok(0)
}

/// Free space on the volume of `path` (`GetDiskFreeSpaceExW`); inodes are
/// not counted on Windows (reported as `u64::MAX`).
pub(crate) fn free_space(path: &Path) -> io::Result<crate::diagnose::Space> {
    use std::os::windows::ffi::OsStrExt;
    use windows_sys::Win32::Storage::FileSystem::GetDiskFreeSpaceExW;
    let wide: Vec<u16> = path.as_os_str().encode_wide().chain(Some(0)).collect();
    let (mut avail, mut total, mut free) = (0u64, 0u64, 0u64);
    // SAFETY: a NUL-terminated path and three valid out-pointers.
    if unsafe { GetDiskFreeSpaceExW(wide.as_ptr(), &mut avail, &mut total, &mut free) } == 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(crate::diagnose::Space {
        available_bytes: avail,
        total_bytes: total,
        available_inodes: u64::MAX,
    })
}

/// Options for the probe files of `baton doctor`: as lock files, but
/// deletable while open (the probe removes its file at once).
pub(crate) fn probe_file_options() -> OpenOptions {
    let mut options = OpenOptions::new();
    options
        .read(true)
        .write(true)
        .share_mode(FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE)
        .custom_flags(FILE_FLAG_OVERLAPPED);
    options
}

/// Windows has no `fork`: nothing to register.
pub(crate) fn call_after_fork_in_child() {}
