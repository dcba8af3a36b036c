//! The platform seam: every call into the operating system that differs
//! between the systems baton runs on is made here, behind safe functions;
//! the rest of the crate calls these and nothing else of the platform.
//! The modules that call the system through `libc` or `windows-sys` may
//! use `unsafe` (the crate denies it elsewhere), each call with its
//! `SAFETY` comment.
//!
//! - `unix.rs`: what Linux and macOS share: open-file-description (OFD)
//!   byte-range locks (`F_OFD_SETLK`, `F_OFD_SETLKW`, `F_OFD_GETLK`), file
//!   identities (device, inode), positioned reads and writes, the modes and
//!   groups of shared baton dirs;
//! - `linux.rs`: waits with a deadline (a per-thread POSIX timer signal),
//!   inotify for semaphore waiters, and `/proc/locks` to find holders
//!   through deleted lock files (Linux only);
//! - `macos.rs`: the run-time check that OFD locks work (a private XNU
//!   interface there), and deadline waits by polling;
//! - `windows.rs`: `LockFileEx`/`UnlockFileEx` byte ranges on handles
//!   opened for overlapped I/O, deadline waits with an `OVERLAPPED` request,
//!   `WaitForMultipleObjects` and `CancelIoEx` (polling under wine, which
//!   does not complete pending lock requests), file identities from
//!   `GetFileInformationByHandle`;
//! - `poll.rs`: the bounded poll of non-blocking attempts (1 ms doubling to
//!   50 ms) used where the kernel cannot wait with a deadline.
//!
//! What each system keeps of the crate's promises is in `docs/src/design/locking.md`
//! ("Platforms").

#[cfg(unix)]
#[allow(unsafe_code)]
mod unix;
#[cfg(unix)]
pub(crate) use unix::*;

#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
mod linux;
#[cfg(target_os = "linux")]
pub(crate) use linux::*;

#[cfg(target_os = "macos")]
mod macos;
#[cfg(target_os = "macos")]
pub(crate) use macos::*;

#[cfg(windows)]
#[allow(unsafe_code)]
mod windows;
#[cfg(windows)]
pub(crate) use windows::*;

#[cfg(unix)]
#[allow(unsafe_code)]
#[path = "sharing_unix.rs"]
pub(crate) mod sharing;
#[cfg(windows)]
#[path = "sharing_windows.rs"]
pub(crate) mod sharing;

mod poll;
pub(crate) use poll::until as poll_until;

#[cfg(not(any(target_os = "linux", target_os = "macos", windows)))]
compile_error!("baton-lock supports Linux, macOS and Windows");

/// Device and inode of a file (on Windows: volume serial number and file
/// index), which tell one file from another whatever its path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FileId {
    pub dev: u64,
    pub ino: u64,
}
