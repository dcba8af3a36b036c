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
//! The kernel reuses the inode numbers of dead namespaces (a restarted
//! container may get its predecessor's), so a namespace is named by its inode
//! *and* the start time of its pid 1 ([`NsId`]): a new namespace's init starts
//! after the old one's died.
//!
//! Limits: `/proc` must be the reader's own (a container mounts its own; an
//! `unshare --pid` without `--mount-proc` does not), and start times are only
//! comparable without time namespaces (which shift them).

use std::fs;

use crate::contain::{terminate_group_until, GroupIdentity, Termination};
use crate::leftover::Leftover;
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

/// A PID namespace, named so that a later one reusing its inode number is
/// told apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NsId {
    /// The inode of its `/proc/<pid>/ns/pid`.
    pub inode: u64,
    /// The start time of its pid 1 (clock ticks since boot), if known.
    pub init_start: Option<u64>,
}

/// The PID namespace of this process, with the start time of its pid 1.
pub fn current_ns_id() -> Option<NsId> {
    Some(NsId {
        inode: current_pid_ns()?,
        init_start: procfs::stat(1).map(|st| st.start_time),
    })
}

/// Whether a namespace recorded as `inode` with init start time `init`
/// is ours (records without the start time match on the inode alone).
fn is_ours(here: Option<NsId>, inode: u64, init: Option<u64>) -> Option<bool> {
    let here = here?;
    if here.inode != inode {
        return Some(false);
    }
    Some(init.is_none() || here.init_start.is_none() || init == here.init_start)
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
/// written before namespaces were recorded). A process that is exiting
/// (killed, not yet a zombie) is [`Sighting::Gone`]: [`procfs::ProcStat::ended`].
pub fn locate(ns: Option<NsId>, pid: i32, start_time: u64) -> Sighting {
    let here = current_ns_id();
    let Some(ns) = ns else {
        return direct(pid, start_time);
    };
    match is_ours(here, ns.inode, ns.init_start) {
        Some(true) => return direct(pid, start_time),
        // Our namespace now has its inode: the recorded one has ended.
        Some(false) if here.is_some_and(|h| h.inode == ns.inode) => return Sighting::Gone,
        _ => {}
    }
    let mut ns_seen = here.is_some_and(|h| h.inode == INITIAL_PID_NS);
    let mut found = None;
    let mut init_start = None;
    for local in crate::sys::all_pids() {
        if pid_ns_of(local) != Some(ns.inode) {
            continue;
        }
        ns_seen = true;
        let inner = NsIds::of(local).and_then(|ids| ids.inner_pid());
        let Some(st) = procfs::stat(local).filter(|st| !st.ended()) else {
            continue;
        };
        if inner == Some(1) {
            init_start = Some(st.start_time);
        }
        if inner == Some(pid) && st.start_time == start_time {
            found = Some(local);
        }
    }
    let reused = ns.init_start.is_some() && init_start.is_some() && ns.init_start != init_start;
    match found {
        Some(local) if !reused => Sighting::Here(local),
        _ if ns_seen => Sighting::Gone,
        _ => Sighting::NotVisible,
    }
}

fn direct(pid: i32, start_time: u64) -> Sighting {
    match procfs::stat(pid) {
        Some(st) if !st.ended() && st.start_time == start_time => Sighting::Here(pid),
        _ => Sighting::Gone,
    }
}

/// Terminates what is left of process group `pgid` (as recorded in PID
/// namespace `ns`; `None`: ours), like [`crate::terminate_group`], after translating
/// the group and session ids into our namespace. A group whose namespace is
/// not visible from here, or of which no member is left, is not touched.
pub fn terminate_group_in(
    ns: Option<NsId>,
    pgid: i32,
    identity: GroupIdentity,
    grace: std::time::Duration,
) -> Vec<Leftover> {
    terminate_group_in_until(ns, pgid, identity, grace, None).found
}

/// [`terminate_group_in`] for a caller that may wait only until `give_up`
/// (see [`crate::terminate_group_until`]).
pub fn terminate_group_in_until(
    ns: Option<NsId>,
    pgid: i32,
    identity: GroupIdentity,
    grace: std::time::Duration,
    give_up: Option<std::time::Instant>,
) -> Termination {
    let nothing = || Termination {
        found: Vec::new(),
        still_stopping: false,
    };
    let here = current_ns_id();
    let Some(ns) = ns else {
        return terminate_group_until(pgid, identity, grace, give_up);
    };
    match is_ours(here, ns.inode, ns.init_start) {
        Some(true) => return terminate_group_until(pgid, identity, grace, give_up),
        // Its inode names our namespace now: the recorded one ended, and
        // with its init every process in it.
        Some(false) if here.is_some_and(|h| h.inode == ns.inode) => return nothing(),
        _ => {}
    }
    // Another namespace whose inode was reused since: the recorded one ended.
    if let Some(recorded) = ns.init_start {
        let init = crate::sys::all_pids().into_iter().find(|p| {
            pid_ns_of(*p) == Some(ns.inode)
                && NsIds::of(*p).and_then(|ids| ids.inner_pid()) == Some(1)
        });
        if init
            .and_then(procfs::stat)
            .is_some_and(|st| st.start_time != recorded)
        {
            return nothing();
        }
    }
    let ns = ns.inode;
    let (leader_start_time, session) = match identity {
        GroupIdentity::Recorded {
            leader_start_time,
            session,
        } => (leader_start_time, session),
        // A reaped leader is only known to its own supervisor, in its namespace.
        GroupIdentity::LeaderReaped => return nothing(),
    };
    // A member of the group in that namespace gives its ids here.
    let member = crate::sys::all_pids().into_iter().find(|local| {
        pid_ns_of(*local) == Some(ns)
            && NsIds::of(*local).is_some_and(|ids| {
                ids.pgid.last() == Some(&pgid) && (session == 0 || ids.sid.last() == Some(&session))
            })
            && procfs::stat(*local)
                .is_some_and(|st| !st.exited && st.start_time >= leader_start_time)
    });
    let Some(st) = member.and_then(procfs::stat) else {
        return nothing();
    };
    terminate_group_until(
        st.pgrp,
        GroupIdentity::Recorded {
            leader_start_time,
            session: if session == 0 { 0 } else { st.session },
        },
        grace,
        give_up,
    )
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
        let here = current_ns_id().unwrap_or_else(|| panic!("no namespace"));
        assert_eq!(locate(Some(here), me, start), Sighting::Here(me));
        assert_eq!(locate(None, me, start + 1), Sighting::Gone);
        // Our inode with another init: a namespace that ended and whose
        // inode we now have.
        let ended = NsId {
            init_start: here.init_start.map(|s| s + 1),
            ..here
        };
        assert_eq!(locate(Some(ended), me, start), Sighting::Gone);
        // A namespace that does not exist is never seen; from the initial
        // namespace that means gone, elsewhere not visible.
        let expect = if here.inode == INITIAL_PID_NS {
            Sighting::Gone
        } else {
            Sighting::NotVisible
        };
        let missing = NsId {
            inode: 1,
            init_start: None,
        };
        assert_eq!(locate(Some(missing), 1, start), expect);
    }
}
