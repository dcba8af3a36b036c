//! Who holds a lock according to the kernel, whatever the metadata says.
//!
//! `/proc/locks` lists OFD locks with pid -1, so it cannot name a holder. The
//! `lock:` lines of `/proc/<pid>/fdinfo/<fd>` list the locks of that open file
//! (as `lslocks` reads them): a process whose descriptor refers to the lock
//! file (same device and inode) and whose fdinfo shows a lock on a slot byte
//! holds the lock, or shares the open file of the one that does (a fork that
//! did not exec). Only processes visible from here, and that we may inspect
//! (our own, or any as root), are found.

use std::os::unix::fs::MetadataExt;

use serde::Serialize;

use crate::layout::SLOT_BASE;
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

/// Processes whose open files hold slots `0..max` of the lock file `file`.
pub(crate) fn kernel_holders(file: FileId, max: u32) -> Vec<KernelHolder> {
    let me = std::process::id() as i32;
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found: Vec<KernelHolder> = Vec::new();
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        let mut slots: Vec<u32> = Vec::new();
        for fd in fds.flatten() {
            // Following the link stats the open file itself.
            let same = std::fs::metadata(fd.path())
                .is_ok_and(|m| m.dev() == file.dev && m.ino() == file.ino);
            if !same {
                continue;
            }
            let info = format!("/proc/{pid}/fdinfo/{}", fd.file_name().to_string_lossy());
            if let Ok(text) = std::fs::read_to_string(info) {
                for s in held_slots_in(&text, max) {
                    if !slots.contains(&s) {
                        slots.push(s);
                    }
                }
            }
        }
        if slots.is_empty() {
            continue;
        }
        let Some(st) = baton_proc::procfs::stat(pid).filter(|st| !st.exited) else {
            continue;
        };
        slots.sort_unstable();
        found.push(KernelHolder {
            pid,
            command: st.comm,
            start_time: st.start_time,
            slots,
        });
    }
    found.sort_by_key(|h| h.pid);
    found
}

/// Slots below `max` covered by the OFD locks of one fdinfo text.
fn held_slots_in(text: &str, max: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("lock:") else {
            continue;
        };
        // `1: OFDLCK ADVISORY WRITE -1 08:02:1234 <start> <end|EOF>`
        let f: Vec<&str> = rest.split_whitespace().collect();
        if f.len() < 8 || f[1] != "OFDLCK" {
            continue;
        }
        let Ok(start) = f[6].parse::<u64>() else {
            continue;
        };
        let end = if f[7] == "EOF" {
            u64::MAX
        } else {
            match f[7].parse::<u64>() {
                Ok(e) => e,
                Err(_) => continue,
            }
        };
        for slot in 0..max {
            let byte = SLOT_BASE + u64::from(slot);
            if (start..=end).contains(&byte) && !out.contains(&slot) {
                out.push(slot);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_slot_locks_from_fdinfo_lines() {
        let slot0 = SLOT_BASE;
        let text = format!(
            "pos:\t0\nflags:\t02100002\nlock:\t1: OFDLCK  ADVISORY  READ -1 08:02:77 {m} {m}\nlock:\t2: OFDLCK  ADVISORY  WRITE -1 08:02:77 {s} {e}\n",
            m = 1u64 << 48,
            s = slot0 + 1,
            e = slot0 + 1
        );
        assert_eq!(held_slots_in(&text, 4), vec![1]);
        assert_eq!(held_slots_in(&text, 1), Vec::<u32>::new());
        let posix = format!("lock:\t1: POSIX  ADVISORY  WRITE 42 08:02:77 {slot0} {slot0}\n");
        assert!(held_slots_in(&posix, 1).is_empty());
    }
}
