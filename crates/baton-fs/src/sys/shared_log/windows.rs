//! Windows: a `LockFileEx` lock on one byte beyond any data.

#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::windows::io::AsRawHandle;

use windows_sys::Win32::Foundation::{ERROR_IO_PENDING, ERROR_LOCK_VIOLATION, HANDLE};
use windows_sys::Win32::Storage::FileSystem::{
    LockFileEx, LOCKFILE_EXCLUSIVE_LOCK, LOCKFILE_FAIL_IMMEDIATELY,
};
use windows_sys::Win32::System::IO::OVERLAPPED;

/// The byte locked: the last but one a file could have, so that the lock
/// never covers data (Windows byte-range locks are mandatory).
const LOCK_OFFSET: u64 = u64::MAX - 1;

pub(crate) fn try_lock_exclusive(file: &File) -> io::Result<bool> {
    // SAFETY: an all-zero OVERLAPPED is valid (no event, offset 0).
    let mut ov: OVERLAPPED = unsafe { std::mem::zeroed() };
    ov.Anonymous.Anonymous.Offset = LOCK_OFFSET as u32;
    ov.Anonymous.Anonymous.OffsetHigh = (LOCK_OFFSET >> 32) as u32;
    let flags = LOCKFILE_EXCLUSIVE_LOCK | LOCKFILE_FAIL_IMMEDIATELY;
    // SAFETY: the handle is open for the borrow of `file`; `ov` outlives the
    // call, which with LOCKFILE_FAIL_IMMEDIATELY completes before returning
    // on a handle opened without FILE_FLAG_OVERLAPPED (std's).
    let ok = unsafe { LockFileEx(file.as_raw_handle() as HANDLE, flags, 0, 1, 0, &mut ov) };
    if ok != 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error().map(|c| c as u32) {
        Some(ERROR_LOCK_VIOLATION | ERROR_IO_PENDING) => Ok(false),
        _ => Err(e),
    }
}
