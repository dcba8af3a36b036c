//! Who a process is: (boot id, pid, process start time) plus hostname.
//!
//! A pid alone is reused by the kernel; the start time (in clock ticks since
//! boot, from `/proc/<pid>/stat`) tells a reused pid apart, and the boot id
//! tells a pid from before a reboot apart.

use std::fs;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

/// The identity of a process, as recorded in lock metadata.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessIdentity {
    /// Process id.
    pub pid: i32,
    /// Start time in clock ticks since boot (field 22 of `/proc/<pid>/stat`).
    pub start_time: u64,
    /// `/proc/sys/kernel/random/boot_id` of the machine it runs on.
    pub boot_id: String,
    /// Host name of the machine it runs on.
    pub host: String,
}

/// Whether a recorded process still runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Liveness {
    /// Same host and boot, and a process with that pid and start time exists.
    Alive,
    /// Same host and boot, and no such process exists (or the pid was reused).
    Dead,
    /// Recorded on another host or before a reboot of this one: cannot tell from here.
    Unknown,
}

impl ProcessIdentity {
    /// The identity of the calling process (cached; recomputed after a fork).
    pub fn current() -> ProcessIdentity {
        static CURRENT: std::sync::Mutex<Option<ProcessIdentity>> = std::sync::Mutex::new(None);
        let pid = std::process::id() as i32;
        let mut cached = CURRENT.lock().unwrap_or_else(|p| p.into_inner());
        match &*cached {
            Some(me) if me.pid == pid => me.clone(),
            _ => {
                let me = ProcessIdentity {
                    pid,
                    start_time: start_time(pid).unwrap_or(0),
                    boot_id: boot_id().to_string(),
                    host: hostname().to_string(),
                };
                *cached = Some(me.clone());
                me
            }
        }
    }

    /// The identity of another process on this machine, if it exists.
    pub fn of_pid(pid: i32) -> Option<ProcessIdentity> {
        Some(ProcessIdentity {
            pid,
            start_time: start_time(pid)?,
            boot_id: boot_id().to_string(),
            host: hostname().to_string(),
        })
    }

    /// Whether this identity names a process that runs on this machine now.
    pub fn is_local(&self) -> bool {
        self.host == hostname()
    }

    /// Checks whether the process still runs.
    pub fn liveness(&self) -> Liveness {
        if self.host != hostname() || self.boot_id != boot_id() {
            // Another host, or this host before a reboot (then it is certainly
            // gone, but only if we know it is this host).
            if self.host == hostname() {
                return Liveness::Dead;
            }
            return Liveness::Unknown;
        }
        match start_time(self.pid) {
            Some(t) if t == self.start_time => Liveness::Alive,
            _ => Liveness::Dead,
        }
    }
}

/// Start time of `pid` in clock ticks since boot, if the process exists and
/// has not exited. A zombie (exited, not yet reaped) counts as gone: it holds
/// no files and so no locks.
pub fn start_time(pid: i32) -> Option<u64> {
    let st = proc_stat(pid)?;
    (!st.exited).then_some(st.start_time)
}

fn proc_stat(pid: i32) -> Option<baton_proc::procfs::ProcStat> {
    baton_proc::procfs::stat(pid)
}

/// The (pid, start time) of every ancestor of this process, parent first,
/// up to (not including) pid 1.
pub fn ancestors() -> Vec<(i32, u64)> {
    let mut out = Vec::new();
    let Some(mut parent) = parent_of(std::process::id() as i32) else {
        return out;
    };
    for _ in 0..128 {
        if parent <= 1 {
            break;
        }
        match proc_stat(parent) {
            Some(st) if !st.exited => {
                out.push((parent, st.start_time));
                parent = st.ppid;
            }
            _ => break,
        }
    }
    out
}

/// The parent pid of `pid`, from `/proc/<pid>/stat` (field 4).
pub fn parent_of(pid: i32) -> Option<i32> {
    proc_stat(pid).map(|st| st.ppid)
}

/// This machine's boot id.
pub fn boot_id() -> &'static str {
    static BOOT: OnceLock<String> = OnceLock::new();
    BOOT.get_or_init(|| {
        fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    })
}

/// This machine's host name.
pub fn hostname() -> &'static str {
    static HOST: OnceLock<String> = OnceLock::new();
    HOST.get_or_init(|| {
        rustix::system::uname()
            .nodename()
            .to_string_lossy()
            .into_owned()
    })
}

/// The default owner of a lock: `user@host` (`$USER`, else `uid<N>`).
pub fn default_owner() -> &'static str {
    static OWNER: OnceLock<String> = OnceLock::new();
    OWNER.get_or_init(|| {
        let user = std::env::var("USER")
            .ok()
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| format!("uid{}", rustix::process::getuid().as_raw()));
        format!("{user}@{}", hostname())
    })
}

/// A new run id: 16 hex digits from the kernel's random source.
pub fn new_run_id() -> String {
    let mut buf = [0u8; 8];
    let filled =
        rustix::rand::getrandom(&mut buf, rustix::rand::GetRandomFlags::empty()).unwrap_or(0);
    if filled < buf.len() {
        // Fall back to time and pid; uniqueness matters, secrecy does not.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        buf = (nanos ^ (u64::from(std::process::id()) << 40)).to_le_bytes();
    }
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn current_process_is_alive_and_a_dead_pid_is_dead() {
        let me = ProcessIdentity::current();
        assert!(me.start_time > 0);
        assert_eq!(me.liveness(), Liveness::Alive);
        let reused = ProcessIdentity {
            start_time: me.start_time + 1,
            ..me.clone()
        };
        assert_eq!(reused.liveness(), Liveness::Dead);
        let elsewhere = ProcessIdentity {
            host: "some-other-host.invalid".into(),
            ..me
        };
        assert_eq!(elsewhere.liveness(), Liveness::Unknown);
    }

    #[test]
    fn start_time_parses_names_with_parentheses() {
        // Our own name may be anything; the parser must cope with ") (" in it.
        assert!(start_time(std::process::id() as i32).is_some());
        assert!(start_time(i32::MAX).is_none());
    }
}
