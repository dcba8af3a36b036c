//! Windows: volume serial number and file index; a `LockFileEx` lock on one
//! byte beyond any data.

#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::windows::io::AsRawHandle;
use std::path::Path;

use windows_sys::Win32::Foundation::{ERROR_IO_PENDING, ERROR_LOCK_VIOLATION, HANDLE};
use windows_sys::Win32::Storage::FileSystem::{
    GetFileInformationByHandle, LockFileEx, BY_HANDLE_FILE_INFORMATION, LOCKFILE_EXCLUSIVE_LOCK,
    LOCKFILE_FAIL_IMMEDIATELY,
};
use windows_sys::Win32::System::IO::OVERLAPPED;

/// The byte locked: the last but one a file could have, so that the lock
/// never covers data (Windows byte-range locks are mandatory).
const LOCK_OFFSET: u64 = u64::MAX - 1;

pub(crate) fn file_id(file: &File) -> io::Result<(u64, u64)> {
    // SAFETY: an all-zero BY_HANDLE_FILE_INFORMATION is valid (plain integers).
    let mut info: BY_HANDLE_FILE_INFORMATION = unsafe { std::mem::zeroed() };
    // SAFETY: the handle is open for the borrow of `file`; `info` is a valid
    // out-pointer for the call.
    let ok = unsafe { GetFileInformationByHandle(file.as_raw_handle() as HANDLE, &mut info) };
    if ok == 0 {
        return Err(io::Error::last_os_error());
    }
    let index = (u64::from(info.nFileIndexHigh) << 32) | u64::from(info.nFileIndexLow);
    Ok((u64::from(info.dwVolumeSerialNumber), index))
}

pub(crate) fn path_id(path: &Path) -> io::Result<(u64, u64)> {
    // std opens with reading, writing and deleting shared: a rename of the
    // file by another process is not hindered.
    file_id(&File::open(path)?)
}

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
