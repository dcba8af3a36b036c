//! PID namespaces: finding a process recorded in another PID namespace, and
//! translating its ids into ours.
//!
//! A pid means something only in the PID namespace it was read in: a
//! container's pid 1 is not the host's pid 1. A record therefore carries its
//! namespace (the inode of `/proc/<pid>/ns/pid`), and a reader in another
//! namespace looks for the process by what does not depend on the view: the
//! namespace inode, the pid *inside* it (the last entry of the `NSpid` line of
//! `/proc/<pid>/status`) and the start time (clock ticks since boot, one clock
//! for every PID namespace of a kernel). A reader sees the processes of its
//! own namespace and of every namespace nested in it, never those of a parent
//! or a sibling; the initial namespace sees all. So a recorded process that is
//! not found is dead only when its namespace is visible from here (some
//! process of it is, or we are in the initial namespace); otherwise it is
//! "not visible from here".
//!
//! Limits: `/proc` must be the reader's own (a container mounts its own; an
//! `unshare --pid` without `--mount-proc` does not), and start times are only
//! comparable without time namespaces (which shift them).

use std::fs;

use crate::contain::{terminate_group, GroupIdentity, Leftover};
use crate::procfs;

/// Inode of the initial PID namespace (`PROC_PID_INIT_INO` in the kernel),
/// from which every process of the machine is visible.
pub const INITIAL_PID_NS: u64 = 0xEFFF_FFFC;

/// The PID namespace of process `pid` (as seen from here): the inode of
/// `/proc/<pid>/ns/pid`. `None` when it is gone or we may not look (another
/// user's process, without privilege).
pub fn pid_ns_of(pid: i32) -> Option<u64> {
    ns_of(&format!("/proc/{pid}/ns/pid"))
}

/// The PID namespace of this process.
pub fn current_pid_ns() -> Option<u64> {
    ns_of("/proc/self/ns/pid")
}

fn ns_of(link: &str) -> Option<u64> {
    let target = fs::read_link(link).ok()?;
    let text = target.to_str()?;
    text.strip_prefix("pid:[")?.strip_suffix(']')?.parse().ok()
}

/// The ids of a process in every PID namespace from ours down to its own
/// (`NSpid`, `NSpgid`, `NSsid` of `/proc/<pid>/status`), outermost first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NsIds {
    /// Its pid in each namespace.
    pub pid: Vec<i32>,
    /// Its process group id in each namespace.
    pub pgid: Vec<i32>,
    /// Its session id in each namespace.
    pub sid: Vec<i32>,
}

impl NsIds {
    /// Reads them for `pid` (a pid of our view).
    pub fn of(pid: i32) -> Option<NsIds> {
        let text = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let ids = NsIds::parse(&text);
        (!ids.pid.is_empty()).then_some(ids)
    }

    fn parse(text: &str) -> NsIds {
        let list = |key: &str| -> Vec<i32> {
            text.lines()
                .find_map(|l| l.strip_prefix(key))
                .map(|rest| {
                    rest.split_whitespace()
                        .filter_map(|v| v.parse().ok())
                        .collect()
                })
                .unwrap_or_default()
        };
        NsIds {
            pid: list("NSpid:"),
            pgid: list("NSpgid:"),
            sid: list("NSsid:"),
        }
    }

    /// The pid in the process's own namespace.
    pub fn inner_pid(&self) -> Option<i32> {
        self.pid.last().copied()
    }
}

/// Where a process recorded in some PID namespace is, seen from here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sighting {
    /// It runs, and this is its pid here.
    Here(i32),
    /// It no longer runs (its namespace is visible from here, and it is not in it).
    Gone,
    /// Its namespace cannot be seen from here (a parent or sibling namespace):
    /// whether it runs cannot be told.
    NotVisible,
}

/// Finds the process that was pid `pid` in namespace `ns` and started at
/// `start_time`. `ns` of `None` means "the reader's own namespace" (records
/// written before namespaces were recorded).
pub fn locate(ns: Option<u64>, pid: i32, start_time: u64) -> Sighting {
    let here = current_pid_ns();
    if ns.is_none() || ns == here {
        return match procfs::stat(pid) {
            Some(st) if !st.exited && st.start_time == start_time => Sighting::Here(pid),
            _ => Sighting::Gone,
        };
    }
    let Some(ns) = ns else {
        return Sighting::Gone;
    };
    let mut ns_seen = here == Some(INITIAL_PID_NS);
    for local in pids() {
        if pid_ns_of(local) != Some(ns) {
            continue;
        }
        ns_seen = true;
        if NsIds::of(local).and_then(|ids| ids.inner_pid()) != Some(pid) {
            continue;
        }
        if procfs::stat(local).is_some_and(|st| !st.exited && st.start_time == start_time) {
            return Sighting::Here(local);
        }
    }
    if ns_seen {
        Sighting::Gone
    } else {
        Sighting::NotVisible
    }
}

/// Terminates what is left of process group `pgid` (as recorded in PID
/// namespace `ns`; `None`: ours), like [`terminate_group`], after translating
/// the group and session ids into our namespace. A group whose namespace is
/// not visible from here, or of which no member is left, is not touched.
pub fn terminate_group_in(
    ns: Option<u64>,
    pgid: i32,
    identity: GroupIdentity,
    grace: std::time::Duration,
) -> Vec<Leftover> {
    let here = current_pid_ns();
    let Some(ns) = ns.filter(|ns| Some(*ns) != here) else {
        return terminate_group(pgid, identity, grace);
    };
    let (leader_start_time, session) = match identity {
        GroupIdentity::Recorded {
            leader_start_time,
            session,
        } => (leader_start_time, session),
        // A reaped leader is only known to its own supervisor, in its namespace.
        GroupIdentity::LeaderReaped => return Vec::new(),
    };
    // A member of the group in that namespace gives its ids here.
    let member = pids().into_iter().find(|local| {
        pid_ns_of(*local) == Some(ns)
            && NsIds::of(*local).is_some_and(|ids| {
                ids.pgid.last() == Some(&pgid) && (session == 0 || ids.sid.last() == Some(&session))
            })
            && procfs::stat(*local)
                .is_some_and(|st| !st.exited && st.start_time >= leader_start_time)
    });
    let Some(st) = member.and_then(procfs::stat) else {
        return Vec::new();
    };
    terminate_group(
        st.pgrp,
        GroupIdentity::Recorded {
            leader_start_time,
            session: if session == 0 { 0 } else { st.session },
        },
        grace,
    )
}

/// Every pid in `/proc`.
fn pids() -> Vec<i32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_namespace_lines_of_status() {
        let text = "Name:\tsleep\nNSpid:\t4242\t7\nNSpgid:\t4240\t5\nNSsid:\t4200\t1\n";
        let ids = NsIds::parse(text);
        assert_eq!(ids.pid, vec![4242, 7]);
        assert_eq!(ids.pgid, vec![4240, 5]);
        assert_eq!(ids.sid, vec![4200, 1]);
        assert_eq!(ids.inner_pid(), Some(7));
    }

    #[test]
    fn this_process_is_found_in_its_own_namespace() {
        let me = std::process::id() as i32;
        let start = procfs::stat(me).map(|s| s.start_time).unwrap_or_default();
        assert!(current_pid_ns().is_some());
        assert_eq!(locate(current_pid_ns(), me, start), Sighting::Here(me));
        assert_eq!(locate(None, me, start + 1), Sighting::Gone);
        // A namespace that does not exist is never seen; from the initial
        // namespace that means gone, elsewhere not visible.
        let expect = if current_pid_ns() == Some(INITIAL_PID_NS) {
            Sighting::Gone
        } else {
            Sighting::NotVisible
        };
        assert_eq!(locate(Some(1), 1, start), expect);
    }
}
