//! Following the processes a script starts, from outside the script: for a
//! hold that a process other than the script keeps (`baton lock acquire`'s
//! background holder), which must stop everything the script started before
//! it lets go of the lock when the script dies.
//!
//! The holder is not an ancestor of the script's children (the script is
//! the parent of `acquire`, which started the holder), so it cannot be their
//! child subreaper, and once the script has died its children are re-parented
//! away and can no longer be found from it. So [`ProcessTree`] collects them
//! while the script lives: every [`ProcessTree::refresh`] reads the children
//! of the script and of every process collected so far
//! (`/proc/<pid>/task/<tid>/children`; a scan of all processes on macOS) and
//! pins the new ones with a pidfd (a kqueue on macOS);
//! a pinned process stays collected after it is re-parented, and so do the
//! children it starts later. When the script leads its own process group
//! (a script started from a terminal, by `setsid`, by `baton run`, by an
//! agent that gives each command a group), the members of that group that
//! started after the script are collected too, at the end: this catches a
//! double fork (`( cmd & )`) that left the tree between two refreshes,
//! whoever it was re-parented to (init, or a child subreaper such as a CI
//! runner, `systemd --user` or a container's init). The members of the group
//! that were not the script's when following began (the other side of a
//! pipe, `./s | tee`) and their descendants are never collected.
//!
//! Not followed: a process that left the tree between two refreshes (its
//! parent exited first) *and* is outside the script's own group (the script
//! shares its parent's group, or the process called `setsid`); processes of
//! another user that may not be signalled.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};

use crate::contain::{stop_all, Pinned};
use crate::procfs::{self, ProcStat};
use crate::sys::{children_of, ProcFd};

/// How often [`ProcessTree::terminate`] looks for new children while the
/// processes it stopped are given their grace period.
const GRACE_REFRESH: Duration = Duration::from_millis(50);

/// A followed tree's root and the members of its group that are not the
/// script's, as [`ProcessTree::snapshot`] records them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeSnapshot {
    /// The root's pid.
    pub root: i32,
    /// The root's start time (clock ticks since boot).
    pub root_start: u64,
    /// (pid, start time) of the members of the root's group that were not
    /// its descendants when following began.
    pub foreign: Vec<(i32, u64)>,
    /// The mark the root passes to what it starts (Linux, see
    /// [`crate::mark`]), when it was marked.
    pub mark: Option<u64>,
}

/// The processes a script (the root) started, collected while it runs.
pub struct ProcessTree {
    root: i32,
    root_start: u64,
    /// The root's process group and session, when the root leads the group.
    own_group: Option<(i32, i32)>,
    /// Members of that group that were not the root's descendants when
    /// following began (pid, start time): a pipeline's other commands.
    foreign: HashSet<(i32, u64)>,
    /// The root itself (while it lives) and every descendant collected.
    known: Vec<Pinned>,
    /// The mark the root passes to every process it starts (Linux, see
    /// [`crate::mark`]), when it could be set.
    #[cfg(target_os = "linux")]
    mark: Option<crate::mark::Mark>,
}

impl std::fmt::Debug for ProcessTree {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessTree")
            .field("root", &self.root)
            .field("own_group", &self.own_group)
            .field("known", &self.pids())
            .finish()
    }
}

impl ProcessTree {
    /// Starts following process `pid`, if it still is the process that
    /// started at `start_time` (clock ticks since boot). Its current
    /// descendants are collected at once.
    pub fn follow(pid: i32, start_time: u64) -> Option<ProcessTree> {
        let mut tree = ProcessTree::follow_only(pid, start_time)?;
        #[cfg(target_os = "linux")]
        {
            // Unmarkable (another user's setuid script): followed as a tree only.
            tree.mark = crate::mark::mark(pid, start_time);
        }
        if let Some((pgid, session)) = tree.own_group {
            let known: HashSet<i32> = tree.known.iter().map(|p| p.pid).collect();
            tree.foreign = procfs::scan(|pid, st| {
                st.pgrp == pgid && st.session == session && !known.contains(&pid)
            })
            .into_iter()
            .map(|(pid, st)| (pid, st.start_time))
            .collect();
        }
        Some(tree)
    }

    /// Follows the same processes as `other` does, from another process
    /// (a guardian): the same root, and the same members of its group taken
    /// for not the script's (recorded by `other` when it began), so that
    /// what the script started in between is not taken for them.
    pub fn follow_as(other: &TreeSnapshot) -> Option<ProcessTree> {
        let mut tree = ProcessTree::follow_only(other.root, other.root_start)?;
        tree.foreign = other.foreign.iter().copied().collect();
        #[cfg(target_os = "linux")]
        {
            tree.mark = other.mark.map(crate::mark::Mark);
        }
        Some(tree)
    }

    fn follow_only(pid: i32, start_time: u64) -> Option<ProcessTree> {
        let st = procfs::stat(pid).filter(|st| !st.exited && st.start_time == start_time)?;
        let root = pin_checked(pid, &st)?;
        let own_group = (st.pgrp == pid).then_some((st.pgrp, st.session));
        let mut tree = ProcessTree {
            root: pid,
            root_start: start_time,
            own_group,
            foreign: HashSet::new(),
            known: vec![root],
            #[cfg(target_os = "linux")]
            mark: None,
        };
        tree.refresh();
        Some(tree)
    }

    /// What another process needs to follow the same tree
    /// ([`ProcessTree::follow_as`]).
    pub fn snapshot(&self) -> TreeSnapshot {
        let mut foreign: Vec<(i32, u64)> = self.foreign.iter().copied().collect();
        foreign.sort_unstable();
        #[cfg(target_os = "linux")]
        let mark = self.mark.map(|m| m.0);
        #[cfg(not(target_os = "linux"))]
        let mark = None;
        TreeSnapshot {
            root: self.root,
            root_start: self.root_start,
            foreign,
            mark,
        }
    }

    /// Whether the root leads its own process group (and its group is used).
    pub fn root_leads_its_group(&self) -> bool {
        self.own_group.is_some()
    }

    /// Pids of the processes collected (the root first while it runs).
    pub fn pids(&self) -> Vec<i32> {
        self.known.iter().map(|p| p.pid).collect()
    }

    /// Forgets the processes that have exited and collects the children
    /// started since the last call, of the root and of every process
    /// collected.
    pub fn refresh(&mut self) {
        self.known.retain(|p| !exited(p));
        let mut seen: HashSet<i32> = self.known.iter().map(|p| p.pid).collect();
        // Never this process (a holder the script started, indirectly).
        seen.insert(std::process::id() as i32);
        let mut i = 0;
        while i < self.known.len() {
            let parent = self.known[i].pid;
            for child in children_of(parent) {
                if seen.insert(child) {
                    if let Some(p) = procfs::stat(child)
                        .filter(|st| !st.exited && st.ppid == parent)
                        .and_then(|st| pin_checked(child, &st))
                    {
                        self.known.push(p);
                    }
                }
            }
            i += 1;
        }
    }

    /// The processes that carry the root's mark (Linux): everything it
    /// started since it was marked, wherever they were re-parented, in
    /// whatever group or session; started no earlier than the root, and
    /// never one of the group's members that were not the script's.
    #[cfg(target_os = "linux")]
    fn marked_members(&mut self) {
        let Some(mark) = self.mark else {
            return;
        };
        let known: HashSet<i32> = self.known.iter().map(|p| p.pid).collect();
        for (pid, st) in crate::mark::marked(mark, self.root_start) {
            if known.contains(&pid) || self.foreign.contains(&(pid, st.start_time)) {
                continue;
            }
            if let Some(p) = pin_checked(pid, &st) {
                self.known.push(p);
            }
        }
    }

    /// Other systems: no mark (see [`crate::mark`]).
    #[cfg(not(target_os = "linux"))]
    fn marked_members(&mut self) {}

    /// Members of the root's own process group that are the script's:
    /// started no earlier than the root, in its session, and neither one of
    /// the group's members that were not the script's when following began
    /// (the other side of a pipe the script's shell set up, `./s | tee`)
    /// nor a descendant of one. Who a member's parent is now says nothing
    /// more: a double-forked process is re-parented to init or to the
    /// nearest child subreaper, which may be any process of the session.
    fn group_members(&mut self) {
        let Some((pgid, session)) = self.own_group else {
            return;
        };
        let me = std::process::id() as i32;
        let known: HashSet<i32> = self.known.iter().map(|p| p.pid).collect();
        let mut members = procfs::scan(|pid, st| {
            st.pgrp == pgid
                && st.session == session
                && !st.exited
                && st.start_time >= self.root_start
                && pid != me
                && !known.contains(&pid)
        });
        // Parents before their children, so that a foreign process's
        // descendants are recognised through it.
        members.sort_by_key(|(pid, st)| (st.start_time, *pid));
        for (pid, st) in members {
            if self.foreign.contains(&(pid, st.start_time)) {
                continue;
            }
            let parent_foreign = procfs::stat(st.ppid)
                .is_some_and(|parent| self.foreign.contains(&(st.ppid, parent.start_time)));
            if parent_foreign {
                self.foreign.insert((pid, st.start_time));
                continue;
            }
            if let Some(p) = pin_checked(pid, &st) {
                self.known.push(p);
            }
        }
    }

    /// Stops everything collected (and, when the root leads its group, the
    /// rest of its group): TERM and CONT to each, up to `grace` for them to
    /// exit while children they start meanwhile are collected too, then the
    /// survivors are frozen (STOP) so that none can start another, collected
    /// once more, and KILLed. Waits until they are gone (at most
    /// [`KILL_WAIT`](crate::KILL_WAIT) after the kill); returns whether they all are. This
    /// process is never signalled.
    pub fn terminate(mut self, grace: Duration) -> bool {
        self.refresh();
        self.group_members();
        self.marked_members();
        self.refresh();
        let me = std::process::id() as i32;
        self.known.retain(|p| p.pid != me);
        let mut signalled: HashSet<i32> = HashSet::new();
        let deadline = Instant::now() + grace;
        loop {
            for p in &self.known {
                if signalled.insert(p.pid) {
                    let _ = p.fd.send(Signal::TERM);
                    let _ = p.fd.send(Signal::CONT);
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let known = std::mem::take(&mut self.known);
            self.known = crate::contain::wait_all(known, left.min(GRACE_REFRESH));
            if self.known.is_empty() {
                return true;
            }
            self.refresh();
            self.known.retain(|p| p.pid != me);
        }
        // Freeze, collect what they started meanwhile (frozen too), then kill.
        for _ in 0..8 {
            let before = self.known.len();
            for p in &self.known {
                let _ = p.fd.send(Signal::STOP);
            }
            self.refresh();
            self.group_members();
            self.marked_members();
            self.known.retain(|p| p.pid != me);
            if self.known.len() == before {
                break;
            }
        }
        stop_all(std::mem::take(&mut self.known), None)
    }
}

fn exited(p: &Pinned) -> bool {
    let mut fds = [rustix::event::PollFd::new(
        &p.fd,
        rustix::event::PollFlags::IN,
    )];
    let zero = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    matches!(rustix::event::poll(&mut fds, Some(&zero)), Ok(n) if n > 0)
}

/// Pins `pid` with a pidfd if it still is the process `st` describes.
fn pin_checked(pid: i32, st: &ProcStat) -> Option<Pinned> {
    let fd = ProcFd::open(Pid::from_raw(pid)?).ok()?;
    // Re-read after pinning: the pidfd now holds the process we check.
    let now = procfs::stat(pid)?;
    (!now.exited && now.start_time == st.start_time).then(|| Pinned {
        pid,
        command: st.comm.clone(),
        fd,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test

    use super::*;
    use std::process::Command;

    fn wait_for(mut cond: impl FnMut() -> bool) -> bool {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if cond() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// A child that is followed stays followed when its parent exits, and
    /// what it starts afterwards is collected too.
    #[test]
    fn a_collected_child_is_kept_after_its_parent_exits() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("grandchild");
        // The script: starts a child that waits to be told, then starts a
        // grandchild (after its own parent, the script, is gone).
        let go = dir.path().join("go");
        let script = format!(
            "( while [ ! -e {go} ]; do sleep 0.02; done; sleep 300 & echo $! > {pid}; wait ) & sleep 300",
            go = go.display(),
            pid = pidfile.display()
        );
        let mut child = Command::new("sh").arg("-c").arg(&script).spawn().unwrap();
        let pid = child.id() as i32;
        let start = procfs::stat(pid).unwrap().start_time;
        let mut tree = ProcessTree::follow(pid, start).unwrap();
        assert!(wait_for(|| {
            tree.refresh();
            tree.pids().len() >= 3 // sh, the subshell, its `sleep 300`
        }));
        child.kill().unwrap();
        child.wait().unwrap();
        std::fs::write(&go, "").unwrap();
        assert!(wait_for(|| pidfile.exists()
            && !std::fs::read_to_string(&pidfile)
                .unwrap()
                .trim()
                .is_empty()));
        let grandchild: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        tree.refresh();
        assert!(tree.pids().contains(&grandchild), "{tree:?}");
        assert!(tree.terminate(Duration::from_secs(5)));
        assert!(procfs::stat(grandchild).is_none_or(|st| st.exited));
    }
}
