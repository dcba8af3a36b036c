//! Who holds a lock according to the kernel, whatever the metadata says.
//!
//! `/proc/locks` lists OFD locks with pid -1, so it cannot name a holder. The
//! `lock:` lines of `/proc/<pid>/fdinfo/<fd>` list the locks of that open file
//! (as `lslocks` reads them): a process whose descriptor refers to the lock
//! file (same device and inode) and whose fdinfo shows a lock on a slot byte
//! holds the lock, or shares the open file of the one that does (a fork that
//! did not exec). Only processes visible from here, and that we may inspect
//! (our own, or any as root), are found.

use serde::Serialize;

use crate::replaced::FileId;

/// A process that holds a lock's slot, found in `/proc`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct KernelHolder {
    /// Its pid, as seen from here.
    pub pid: i32,
    /// Its command name (at most 15 bytes, as the kernel keeps it).
    pub command: String,
    /// Its start time in clock ticks since boot.
    pub start_time: u64,
    /// The slots it holds.
    pub slots: Vec<u32>,
}

/// Processes whose open files hold slots `0..max` of the lock file `file`
/// (Linux only: empty elsewhere).
pub(crate) fn kernel_holders(file: FileId, max: u32) -> Vec<KernelHolder> {
    crate::sys::kernel_holders(file, max)
}
