//! The platform seam: every call into the operating system that differs
//! between the systems baton runs on is made here, behind safe functions;
//! the rest of the crate calls these. `linux.rs`, `macos.rs` and
//! `windows.rs` may use `unsafe` (the crate denies it elsewhere), each
//! call with its `SAFETY` comment.
//!
//! - `stat.rs`: what is read of a process on Linux and macOS alike;
//! - `unix.rs`: what Linux and macOS share, and the choice between them;
//! - `linux.rs`: pidfds, eventfd, `/proc`, the parent-death signal and the
//!   child subreaper (Linux only);
//! - `macos.rs`: their macOS replacements (kqueue `EVFILT_PROC` for pidfds,
//!   a pipe for the eventfd, `proc_pidinfo` for `/proc`), or a typed
//!   [`ProcError::Unsupported`](crate::ProcError::Unsupported) where there is none;
//! - `windows.rs`: process handles and creation times, Job Objects,
//!   console control events, events and pipes.
//!
//! What each system keeps of the crate's promises is listed in `docs/src/design/signals.md`
//! ("Platforms").

#[cfg(unix)]
mod stat;
#[cfg(unix)]
mod unix;
#[cfg(unix)]
pub use stat::ProcStat;
#[cfg(unix)]
pub(crate) use unix::*;

#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
mod linux;
#[cfg(target_os = "macos")]
#[allow(unsafe_code)]
mod macos;

#[cfg(windows)]
#[allow(unsafe_code)]
mod windows;
#[cfg(windows)]
pub(crate) use windows::*;

#[cfg(not(any(target_os = "linux", target_os = "macos", windows)))]
compile_error!("baton-proc supports Linux, macOS and Windows");
