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

#[cfg(windows)]
mod windows;
#[cfg(windows)]
pub(crate) use windows::*;
