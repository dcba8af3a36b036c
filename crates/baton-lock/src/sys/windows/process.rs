//! Processes on Windows: identity is the pid and the creation time
//! (`baton_proc::ProcessId`); the parent from a Toolhelp snapshot. There
//! are no PID namespaces, no boot id (creation times are absolute, so a pid
//! from before a reboot never matches) and no process groups.

use std::os::windows::io::{FromRawHandle, OwnedHandle};

use windows_sys::Win32::Foundation::INVALID_HANDLE_VALUE;
use windows_sys::Win32::System::Diagnostics::ToolHelp::{
    CreateToolhelp32Snapshot, Process32FirstW, Process32NextW, PROCESSENTRY32W, TH32CS_SNAPPROCESS,
};

/// The start (creation) time of `pid`, if it runs.
pub(crate) fn process_start_time(pid: i32) -> Option<u64> {
    baton_proc::ProcessId::of(pid).map(|p| p.start_time)
}

/// The parent pid of `pid`, if it runs and its parent was created before it
/// (a parent that exited leaves its pid to be reused by a younger process).
pub(crate) fn process_parent(pid: i32) -> Option<i32> {
    let wanted = u32::try_from(pid).ok()?;
    // SAFETY: a snapshot of the processes; the handle is ours to close.
    let snap = unsafe { CreateToolhelp32Snapshot(TH32CS_SNAPPROCESS, 0) };
    if snap == INVALID_HANDLE_VALUE || snap.is_null() {
        return None;
    }
    // SAFETY: a new, valid handle that nothing else owns (closed on drop).
    let snap = unsafe { OwnedHandle::from_raw_handle(snap) };
    let raw = std::os::windows::io::AsRawHandle::as_raw_handle(&snap);
    // SAFETY: all-zero bytes is a valid PROCESSENTRY32W; dwSize is set below.
    let mut entry: PROCESSENTRY32W = unsafe { std::mem::zeroed() };
    entry.dwSize = std::mem::size_of::<PROCESSENTRY32W>() as u32;
    // SAFETY: a live snapshot handle and a properly sized entry.
    let mut more = unsafe { Process32FirstW(raw, &mut entry) } != 0;
    while more {
        if entry.th32ProcessID == wanted {
            let parent = i32::try_from(entry.th32ParentProcessID).ok()?;
            let (me, them) = (process_start_time(pid)?, process_start_time(parent)?);
            return (them <= me).then_some(parent);
        }
        // SAFETY: as above.
        more = unsafe { Process32NextW(raw, &mut entry) } != 0;
    }
    None
}

/// The host name (`COMPUTERNAME`).
pub(crate) fn host_name() -> String {
    std::env::var("COMPUTERNAME").unwrap_or_else(|_| "localhost".into())
}

/// The user's name (`USERNAME`), if set.
pub(crate) fn user_name() -> Option<String> {
    std::env::var("USERNAME").ok().filter(|u| !u.is_empty())
}
