//! The system side of [`crate::doorbell`], per platform: named bells
//! (`bind_named`, `ring_named`: abstract sockets on Linux, events on
//! Windows) and, on every unix, bells as socket files in a directory
//! (`files`: what macOS uses).

#[cfg(unix)]
mod claim;
#[cfg(unix)]
pub(crate) mod files;
#[cfg(unix)]
mod socket;
#[cfg(unix)]
pub(crate) use socket::{Doorbell, Watcher};

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
pub(crate) use linux::*;

// Events are made, opened, set and waited for through the system's API:
// the SAFETY comments there say why each call is sound.
#[cfg(windows)]
#[allow(unsafe_code)]
mod windows;
#[cfg(windows)]
pub(crate) use windows::*;
