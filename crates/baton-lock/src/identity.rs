//! Who a process is: (boot id, PID namespace, pid, process start time) plus
//! hostname.
//!
//! A pid alone is reused by the kernel; the start time (in clock ticks since
//! boot, from `/proc/<pid>/stat`) tells a reused pid apart, and the boot id
//! tells a pid from before a reboot apart. The boot id is the kernel's, shared
//! by every container on it (a container's host name is its own): equal boot
//! ids mean the same running kernel. A pid is only meaningful in its PID
//! namespace (a container's pid 1 is not the host's), so the namespace is
//! recorded too, and a reader elsewhere finds the process through
//! [`baton_proc::pidns`]: from the host, a container's holder is alive and has
//! a pid here; from a sibling container it is "not visible from here".

use once_cell::race::OnceBox;
use std::fs;

use crate::fork_safe::ForkSafe;

use serde::{Deserialize, Serialize};

/// The identity of a process, as recorded in lock metadata.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ProcessIdentity {
    /// Process id.
    pub pid: i32,
    /// Start time in clock ticks since boot (field 22 of `/proc/<pid>/stat`).
    pub start_time: u64,
    /// `/proc/sys/kernel/random/boot_id` of the machine it runs on.
    pub boot_id: String,
    /// Host name of the machine it runs on.
    pub host: String,
    /// The PID namespace `pid` belongs to (inode of `/proc/<pid>/ns/pid`);
    /// absent in records of older versions (then the reader's is assumed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(with = "u64"))]
    pub pid_ns: Option<u64>,
    /// Start time of pid 1 of that namespace: the kernel reuses the inodes of
    /// dead namespaces, and this tells a restarted container's new namespace
    /// from its predecessor's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(with = "u64"))]
    pub pid_ns_init: Option<u64>,
}

/// Whether a recorded process still runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Liveness {
    /// Same host and boot, and a process with that pid and start time exists.
    Alive,
    /// Same host and boot, and no such process exists (or the pid was reused).
    Dead,
    /// Recorded on another host or before a reboot of this one: cannot tell from here.
    Unknown,
    /// Same kernel, in a PID namespace that cannot be seen from here (the
    /// host's, or another container's): alive as far as anyone here can tell.
    NotVisible,
    /// Only for a lock's holder: the recorded process is gone, but the kernel
    /// lock is still held through the lock file it had open, by a process that
    /// inherited it (see `kernel_holders` of the lock's status).
    Inherited,
}

impl Liveness {
    /// The word used in messages and `--json`.
    pub fn as_str(self) -> &'static str {
        match self {
            Liveness::Alive => "alive",
            Liveness::Dead => "dead",
            Liveness::Unknown => "unknown",
            Liveness::NotVisible => "not_visible",
            Liveness::Inherited => "inherited",
        }
    }
}

/// Where a recorded process is, seen from this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sighting {
    /// Whether it runs.
    pub liveness: Liveness,
    /// Its pid here, when it runs and can be seen from here (it differs from
    /// the recorded pid when it runs in another PID namespace).
    pub local_pid: Option<i32>,
}

impl ProcessIdentity {
    /// The identity of the calling process (cached; recomputed after a fork).
    pub fn current() -> ProcessIdentity {
        // Fork-safe (see `fork_safe`): a child forked while another thread
        // filled the cache must not hang on it. Computed outside the lock.
        static CURRENT: ForkSafe<Option<ProcessIdentity>> = ForkSafe::new(None);
        let pid = std::process::id() as i32;
        if let Some(me) = CURRENT.lock().as_ref().filter(|me| me.pid == pid) {
            return me.clone();
        }
        let (pid_ns, pid_ns_init) = current_ns();
        let me = ProcessIdentity {
            pid,
            start_time: start_time(pid).unwrap_or(0),
            boot_id: boot_id().to_string(),
            host: hostname().to_string(),
            pid_ns,
            pid_ns_init,
        };
        *CURRENT.lock() = Some(me.clone());
        me
    }

    /// The identity of another process on this machine (`pid` as seen from
    /// here), if it exists.
    pub fn of_pid(pid: i32) -> Option<ProcessIdentity> {
        let (pid_ns, pid_ns_init) = current_ns();
        Some(ProcessIdentity {
            pid,
            start_time: start_time(pid)?,
            boot_id: boot_id().to_string(),
            host: hostname().to_string(),
            pid_ns,
            pid_ns_init,
        })
    }

    /// The PID namespace the pid was recorded in, if recorded.
    #[cfg(unix)]
    pub fn ns_id(&self) -> Option<baton_proc::pidns::NsId> {
        Some(baton_proc::pidns::NsId {
            inode: self.pid_ns?,
            init_start: self.pid_ns_init,
        })
    }

    /// Whether this identity was recorded under the running kernel (this
    /// machine since its last boot, in any container on it).
    pub fn is_local(&self) -> bool {
        self.same_kernel()
    }

    fn same_kernel(&self) -> bool {
        if boot_id().is_empty() || self.boot_id.is_empty() {
            return self.host == hostname();
        }
        self.boot_id == boot_id()
    }

    /// Whether the pid was recorded in this process's PID namespace (records
    /// without a namespace are taken to be).
    #[cfg(windows)]
    pub fn in_my_pid_ns(&self) -> bool {
        true
    }

    /// Whether the pid was recorded in this process's PID namespace (records
    /// without a namespace are taken to be).
    #[cfg(unix)]
    pub fn in_my_pid_ns(&self) -> bool {
        let Some(ns) = self.ns_id() else {
            return true;
        };
        baton_proc::pidns::current_ns_id().is_some_and(|here| {
            here.inode == ns.inode
                && (ns.init_start.is_none()
                    || here.init_start.is_none()
                    || ns.init_start == here.init_start)
        })
    }

    /// Checks whether the process still runs.
    pub fn liveness(&self) -> Liveness {
        self.sighting().liveness
    }

    /// Checks whether the process still runs and finds its pid here.
    pub fn sighting(&self) -> Sighting {
        let gone = |liveness| Sighting {
            liveness,
            local_pid: None,
        };
        if !self.same_kernel() {
            // Another host, or this host before a reboot (then it is certainly
            // gone, but only if we know it is this host).
            return gone(if self.host == hostname() {
                Liveness::Dead
            } else {
                Liveness::Unknown
            });
        }
        #[cfg(windows)]
        return match start_time(self.pid) {
            Some(t) if t == self.start_time => Sighting {
                liveness: Liveness::Alive,
                local_pid: Some(self.pid),
            },
            _ => gone(Liveness::Dead),
        };
        #[cfg(unix)]
        match baton_proc::pidns::locate(self.ns_id(), self.pid, self.start_time) {
            baton_proc::pidns::Sighting::Here(pid) => Sighting {
                liveness: Liveness::Alive,
                local_pid: Some(pid),
            },
            baton_proc::pidns::Sighting::Gone => gone(Liveness::Dead),
            baton_proc::pidns::Sighting::NotVisible => gone(Liveness::NotVisible),
        }
    }
}

/// Start time of `pid` in clock ticks since boot, if the process exists and
/// has not exited. A zombie (exited, not yet reaped) counts as gone: it holds
/// no files and so no locks.
pub fn start_time(pid: i32) -> Option<u64> {
    #[cfg(windows)]
    return crate::sys::process_start_time(pid);
    #[cfg(unix)]
    {
        let st = proc_stat(pid)?;
        (!st.exited).then_some(st.start_time)
    }
}

#[cfg(unix)]
fn proc_stat(pid: i32) -> Option<baton_proc::procfs::ProcStat> {
    baton_proc::procfs::stat(pid)
}

/// This process's PID namespace: its inode and the start time of its pid 1.
#[cfg(unix)]
fn current_ns() -> (Option<u64>, Option<u64>) {
    let ns = baton_proc::pidns::current_ns_id();
    (ns.map(|n| n.inode), ns.and_then(|n| n.init_start))
}

/// Windows has no PID namespaces.
#[cfg(windows)]
fn current_ns() -> (Option<u64>, Option<u64>) {
    (None, None)
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
        #[cfg(unix)]
        match proc_stat(parent) {
            Some(st) if !st.exited => {
                out.push((parent, st.start_time));
                parent = st.ppid;
            }
            _ => break,
        }
        #[cfg(windows)]
        match (start_time(parent), crate::sys::process_parent(parent)) {
            (Some(t), next) => {
                out.push((parent, t));
                match next {
                    Some(p) => parent = p,
                    None => break,
                }
            }
            _ => break,
        }
    }
    out
}

/// The thread of ancestor `pid` that this process descends from: the thread
/// whose children (`/proc/<pid>/task/<tid>/children`) include this process
/// or its ancestor below `pid`. `None` when `pid` is not an ancestor or the
/// kernel does not tell.
pub fn thread_of_ancestor(pid: i32) -> Option<i32> {
    let me = std::process::id() as i32;
    let chain = ancestors();
    let i = chain.iter().position(|(p, _)| *p == pid)?;
    let below = if i == 0 { me } else { chain[i - 1].0 };
    let tasks = fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    tasks.flatten().find_map(|task| {
        let tid: i32 = task.file_name().to_str()?.parse().ok()?;
        let children = fs::read_to_string(task.path().join("children")).ok()?;
        children
            .split_whitespace()
            .any(|c| c.parse::<i32>() == Ok(below))
            .then_some(tid)
    })
}

/// The number of threads of process `pid` (`Threads:` of its status).
pub fn thread_count(pid: i32) -> Option<u32> {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
}

/// The parent pid of `pid`, from `/proc/<pid>/stat` (field 4).
pub fn parent_of(pid: i32) -> Option<i32> {
    #[cfg(unix)]
    return proc_stat(pid).map(|st| st.ppid);
    #[cfg(windows)]
    return crate::sys::process_parent(pid);
}

/// This machine's boot id.
pub fn boot_id() -> &'static str {
    static BOOT: OnceBox<String> = OnceBox::new();
    BOOT.get_or_init(|| {
        Box::new(
            fs::read_to_string("/proc/sys/kernel/random/boot_id")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
        )
    })
}

/// This machine's host name.
pub fn hostname() -> &'static str {
    static HOST: OnceBox<String> = OnceBox::new();
    HOST.get_or_init(|| {
        #[cfg(unix)]
        return Box::new(
            rustix::system::uname()
                .nodename()
                .to_string_lossy()
                .into_owned(),
        );
        #[cfg(windows)]
        return Box::new(crate::sys::host_name());
    })
}

/// The default owner of a lock: `user@host` (`$USER`, else `uid<N>`).
pub fn default_owner() -> &'static str {
    static OWNER: OnceBox<String> = OnceBox::new();
    OWNER.get_or_init(|| {
        #[cfg(unix)]
        let user = std::env::var("USER")
            .ok()
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| format!("uid{}", rustix::process::getuid().as_raw()));
        #[cfg(windows)]
        let user = crate::sys::user_name().unwrap_or_else(|| "user".into());
        Box::new(format!("{user}@{}", hostname()))
    })
}

/// A new run id: 16 hex digits from the kernel's random source.
pub fn new_run_id() -> String {
    format!("{:016x}", baton_fs::random_u64())
}

/// The kernel's id of the calling thread (Linux; `None` elsewhere, where
/// [`thread_of_ancestor`] cannot tell threads apart either).
pub(crate) fn current_os_thread() -> Option<i32> {
    #[cfg(target_os = "linux")]
    return Some(rustix::thread::gettid().as_raw_nonzero().get());
    #[cfg(not(target_os = "linux"))]
    return None;
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
            boot_id: "00000000-0000-0000-0000-000000000000".into(),
            ..me.clone()
        };
        assert_eq!(elsewhere.liveness(), Liveness::Unknown);
        // A container of this kernel has a host name of its own: same boot
        // id, same kernel, so the pid is checked.
        let container = ProcessIdentity {
            host: "a-container.invalid".into(),
            ..me
        };
        assert_eq!(container.liveness(), Liveness::Alive);
    }

    #[test]
    fn start_time_parses_names_with_parentheses() {
        // Our own name may be anything; the parser must cope with ") (" in it.
        assert!(start_time(std::process::id() as i32).is_some());
        assert!(start_time(i32::MAX).is_none());
    }
}
