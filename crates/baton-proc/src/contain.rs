//! Containment: no process of a run outlives it.
//!
//! A command runs as the leader of its own process group. When the leader
//! exits, what is left of its group (`cmd &` in a script, a daemon that did
//! not leave the group) is terminated before the supervisor returns, and when
//! a supervisor dies without a chance to act, whoever takes its lock next
//! terminates the group it recorded ([`terminate_group`]). Processes that left
//! the group (a new session, `setsid`, a double fork) are caught while the
//! supervisor lives if the process is a child subreaper ([`become_subreaper`]):
//! they are re-parented to it when their parent exits, and [`orphans`] finds them.
//!
//! Every process is pinned with a pidfd and re-identified (process group,
//! start time) before it is signalled, so a pid reused in between is never hit.
//! What is not contained is listed in `docs/src/design/signals.md` ("Containment").

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags};
use rustix::io::Errno;
use rustix::process::{Pid, Signal};

use crate::error::ProcError;
use crate::leftover::Leftover;
use crate::procfs::{self, ProcStat};
use crate::sys::ProcFd;
use crate::terminate::KILL_WAIT;
use crate::time::timespec;

/// How a process group is recognised as the one that was recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupIdentity {
    /// The group's leader has been reaped by us: a process whose pid is the
    /// group id can only be a newer process that reused the id.
    LeaderReaped,
    /// As recorded when the command started: the leader's start time (clock
    /// ticks since boot) and the group's session. A leader with another start
    /// time means the id was reused; members must be in that session (a
    /// process cannot join a group of another session, and a daemon that
    /// made the id its own session with `setsid` is not ours) and must have
    /// started no earlier than the leader. A session of 0 is not checked
    /// (records written before it was recorded).
    Recorded {
        /// The leader's start time.
        leader_start_time: u64,
        /// The group's session id.
        session: i32,
    },
}

/// 0: not a subreaper; [`ONE`]: [`become_subreaper`]; [`SHARED`]:
/// [`become_shared_subreaper`](crate::become_shared_subreaper).
static SUBREAPER: AtomicU8 = AtomicU8::new(0);
const ONE: u8 = 1;
const SHARED: u8 = 2;

/// This process's group, or `None` when it is led from outside our PID
/// namespace (`nsenter`, `docker exec`): the kernel reports it as 0, on
/// which `rustix::process::getpgrp` would assert.
#[allow(unsafe_code)] // getpgrp(2): the SAFETY comment below
pub(crate) fn our_pgrp() -> Option<Pid> {
    // SAFETY: getpgrp takes no arguments, cannot fail and touches no memory.
    Pid::from_raw(unsafe { libc::getpgrp() })
}

/// Pids of the children that [`Supervisor`](crate::Supervisor)s of this process
/// are running now; [`orphans`] never counts them.
pub(crate) static SUPERVISED: Mutex<Vec<i32>> = Mutex::new(Vec::new());

/// Makes this process a child subreaper (`PR_SET_CHILD_SUBREAPER`): processes
/// that any of its descendants leave behind are re-parented to it instead of
/// to init, so a [`Supervisor`](crate::Supervisor) can find and stop them when
/// its command ends, even when they left the command's process group.
///
/// This changes the whole process, so the library never does it by itself:
/// call it from `main` of a program that runs one command at a time (as
/// `baton run` does): every orphan is taken for the ending command's. A
/// process hosting many runs calls
/// [`become_shared_subreaper`](crate::become_shared_subreaper) instead,
/// which attributes each orphan to its run.
///
/// # Errors
///
/// When the kernel refuses the `prctl`; [`ProcError::Unsupported`] on macOS,
/// which has no child subreaper.
pub fn become_subreaper() -> Result<(), ProcError> {
    crate::sys::set_subreaper()?;
    SUBREAPER.store(ONE, Ordering::SeqCst);
    Ok(())
}

/// Whether this process is a child subreaper: [`become_subreaper`] or
/// [`become_shared_subreaper`](crate::become_shared_subreaper) was called.
pub fn is_subreaper() -> bool {
    SUBREAPER.load(Ordering::SeqCst) != 0
}

pub(crate) fn set_shared_subreaper() {
    SUBREAPER.store(SHARED, Ordering::SeqCst);
}

pub(crate) fn is_shared_subreaper() -> bool {
    SUBREAPER.load(Ordering::SeqCst) == SHARED
}

/// A process pinned by a pidfd after its identity was checked.
pub(crate) struct Pinned {
    pub(crate) pid: i32,
    pub(crate) command: String,
    pub(crate) fd: ProcFd,
}

/// What is reported of processes that had left their command's group.
pub(crate) fn escaped(pinned: &[Pinned]) -> Vec<Leftover> {
    pinned
        .iter()
        .map(|p| Leftover {
            pid: p.pid,
            command: p.command.clone(),
            escaped: true,
        })
        .collect()
}

pub(crate) fn pin(pid: i32, expect: &ProcStat) -> Option<Pinned> {
    let fd = ProcFd::open(Pid::from_raw(pid)?).ok()?;
    // Re-read after pinning: the pidfd now holds the process we check.
    let now = procfs::stat(pid)?;
    (!now.exited && now.start_time == expect.start_time && now.pgrp == expect.pgrp).then(|| {
        Pinned {
            pid,
            command: expect.comm.clone(),
            fd,
        }
    })
}

/// Terminates every process of process group `pgid`: `SIGTERM` (and
/// `SIGCONT`, so a stopped process sees it), up to `grace` for them to exit,
/// then `SIGKILL`, and waits until they are gone (at most [`KILL_WAIT`] after
/// the kill). Members that appear meanwhile (a fork) are killed too.
/// Returns the processes found, in no particular order; empty when the group
/// is gone or `identity` shows that the id now names another group.
///
/// This process and the process group it belongs to are never signalled.
pub fn terminate_group(pgid: i32, identity: GroupIdentity, grace: Duration) -> Vec<Leftover> {
    terminate(pgid, identity, grace, false, None).found
}

/// What [`terminate_group_until`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Termination {
    /// The processes found, in no particular order.
    pub found: Vec<Leftover>,
    /// Some were still running (TERM sent, the grace not over) when the
    /// caller's limit came: nothing was killed, and a later call, with the
    /// grace that is left, finishes the work.
    pub still_stopping: bool,
}

/// [`terminate_group`] for a caller that may wait only until `give_up`:
/// TERM as ever, but if the group has not gone when `give_up` comes before
/// the end of `grace`, it returns then with [`Termination::still_stopping`]
/// instead of waiting out the grace (the KILL belongs to whoever calls when
/// the grace is over). `None` waits as [`terminate_group`] does.
pub fn terminate_group_until(
    pgid: i32,
    identity: GroupIdentity,
    grace: Duration,
    give_up: Option<Instant>,
) -> Termination {
    terminate(pgid, identity, grace, false, give_up)
}

/// Terminates, like [`terminate_group`], every process of the session
/// that a command started with [`RunSpec::new_session`](crate::RunSpec::new_session)
/// made, in whatever process group (`timeout`, job control): `sid` is its
/// group and session id (its leader's pid), `leader_start_time` its
/// leader's start time. Only for such a command: the session of a caller
/// (a login shell that leads its own) holds far more than what it runs.
pub fn terminate_session(sid: i32, leader_start_time: u64, grace: Duration) -> Vec<Leftover> {
    let identity = GroupIdentity::Recorded {
        leader_start_time,
        session: sid,
    };
    terminate(sid, identity, grace, true, None).found
}

/// [`terminate_group`], or with `session` [`terminate_session`].
fn terminate(
    pgid: i32,
    identity: GroupIdentity,
    grace: Duration,
    whole_session: bool,
    give_up: Option<Instant>,
) -> Termination {
    let me = std::process::id() as i32;
    if pgid <= 1 || our_pgrp().is_some_and(|g| g.as_raw_nonzero().get() == pgid) {
        return Termination {
            found: Vec::new(),
            still_stopping: false,
        };
    }
    let mut found: Vec<Leftover> = Vec::new();
    for round in 0..8 {
        if let Some(leader) = procfs::stat(pgid).filter(|st| !st.exited) {
            let ours = match identity {
                GroupIdentity::LeaderReaped => false,
                GroupIdentity::Recorded {
                    leader_start_time, ..
                } => leader.start_time == leader_start_time && leader.pgrp == pgid,
            };
            if !ours {
                break; // the id was reused: not ours to touch
            }
        }
        let belongs = |st: &ProcStat| match identity {
            GroupIdentity::LeaderReaped => st.pgrp == pgid && !whole_session,
            GroupIdentity::Recorded {
                leader_start_time,
                session,
            } => {
                st.start_time >= leader_start_time
                    && match whole_session {
                        true => st.session == pgid,
                        false => st.pgrp == pgid && (session == 0 || st.session == session),
                    }
            }
        };
        let my_pgrp = our_pgrp().map(|g| g.as_raw_nonzero().get());
        let scanned = procfs::scan(|pid, st| {
            !st.exited && pid != me && Some(st.pgrp) != my_pgrp && belongs(st)
        });
        // The session's other groups (`timeout`, job control), signalled
        // whole as the group is below.
        let mut groups: Vec<i32> = scanned
            .iter()
            .map(|(_, st)| st.pgrp)
            .filter(|g| *g != pgid)
            .collect();
        groups.sort_unstable();
        groups.dedup();
        let members: Vec<Pinned> = scanned
            .into_iter()
            .filter_map(|(pid, st)| pin(pid, &st))
            .collect();
        if members.is_empty() {
            break;
        }
        for m in &members {
            if !found.iter().any(|f| f.pid == m.pid) {
                found.push(Leftover {
                    pid: m.pid,
                    command: m.command.clone(),
                    escaped: false,
                });
            }
        }
        // One atomic signal to the whole group too: a process that forks
        // and exits in a loop changes its pid faster than the scan above
        // can follow, but not its group (found by a hostile review). The id
        // is still this group's: members with its identity were just seen.
        if let Some(group) = Pid::from_raw(pgid) {
            let signal = if round == 0 {
                Signal::TERM
            } else {
                Signal::KILL
            };
            let _ = rustix::process::kill_process_group(group, signal);
            let _ = rustix::process::kill_process_group(group, Signal::CONT);
        }
        for other in groups.iter().filter_map(|g| Pid::from_raw(*g)) {
            let signal = if round == 0 {
                Signal::TERM
            } else {
                Signal::KILL
            };
            let _ = rustix::process::kill_process_group(other, signal);
            let _ = rustix::process::kill_process_group(other, Signal::CONT);
        }
        // The caller's limit comes before the grace is over: wait for the
        // TERM until then only, and leave the KILL to a later call.
        let left = give_up.map(|g| g.saturating_duration_since(Instant::now()));
        if round == 0 && left.is_some_and(|left| left < grace) {
            for m in &members {
                let _ = m.fd.send(Signal::TERM);
                let _ = m.fd.send(Signal::CONT);
            }
            if !wait_all(members, left.unwrap_or_default()).is_empty() {
                return Termination {
                    found,
                    still_stopping: true,
                };
            }
            continue;
        }
        let _ = stop_all(members, if round == 0 { Some(grace) } else { None });
    }
    Termination {
        found,
        still_stopping: false,
    }
}

/// Terminates process `pid` (if it still is the process that started at
/// `start_time`) together with all its descendants: TERM (and CONT) to each,
/// up to `grace`, then KILL, and waits until they are gone (at most
/// [`KILL_WAIT`] after the kill). For a script that must stop before a lock
/// it holds is given to someone else: its children work under the lock too,
/// and under an agent the script shares the agent's process group, so the
/// group cannot be used. Returns whether every process found has exited.
pub fn terminate_tree(pid: i32, start_time: u64, grace: Duration) -> bool {
    let Some(root) = procfs::stat(pid).filter(|st| !st.exited && st.start_time == start_time)
    else {
        return true; // gone already
    };
    let all = procfs::scan(|_, st| !st.exited);
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for (p, st) in &all {
        children.entry(st.ppid).or_default().push(*p);
    }
    let stats: HashMap<i32, &ProcStat> = all.iter().map(|(p, st)| (*p, st)).collect();
    let mut tree = vec![(pid, root)];
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        for c in children.get(&p).into_iter().flatten() {
            if let Some(st) = stats.get(c) {
                tree.push((*c, (*st).clone()));
                todo.push(*c);
            }
        }
    }
    let me = std::process::id() as i32;
    let pinned: Vec<Pinned> = tree
        .iter()
        .filter(|(p, _)| *p != me)
        .filter_map(|(p, st)| pin(*p, st))
        .collect();
    stop_all(pinned, Some(grace))
}

/// TERM (when `grace` is given) then KILL, waiting for the processes to
/// exit; returns whether they all did.
pub(crate) fn stop_all(procs: Vec<Pinned>, grace: Option<Duration>) -> bool {
    let mut alive = procs;
    if let Some(grace) = grace {
        for p in &alive {
            let _ = p.fd.send(Signal::TERM);
            let _ = p.fd.send(Signal::CONT);
        }
        alive = wait_all(alive, grace);
    }
    for p in &alive {
        let _ = p.fd.send(Signal::KILL);
    }
    wait_all(alive, KILL_WAIT).is_empty()
}

/// Waits until every process has exited or `limit` passes; returns those still running.
pub(crate) fn wait_all(mut procs: Vec<Pinned>, limit: Duration) -> Vec<Pinned> {
    let deadline = Instant::now().checked_add(limit);
    while !procs.is_empty() {
        let timeout = deadline.map(|d| timespec(d.saturating_duration_since(Instant::now())));
        let mut fds: Vec<PollFd<'_>> = procs
            .iter()
            .map(|p| PollFd::new(&p.fd, PollFlags::IN))
            .collect();
        match poll(&mut fds, timeout.as_ref()) {
            Ok(0) => break,
            Ok(_) => {}
            Err(Errno::INTR) => continue,
            Err(_) => break,
        }
        let exited: Vec<bool> = fds.iter().map(|f| !f.revents().is_empty()).collect();
        drop(fds);
        let mut i = 0;
        procs.retain(|_| {
            i += 1;
            !exited[i - 1]
        });
    }
    procs
}

/// Processes re-parented to this subreaper that no supervisor of this process
/// runs, with all their descendants: what a finished command left behind
/// outside its process group. Empty unless [`become_subreaper`] was called
/// (a shared subreaper attributes orphans to their runs: `orphans.rs`).
/// Exited ones are reaped here.
pub(crate) fn stop_orphans(grace: Duration) -> Vec<Leftover> {
    if SUBREAPER.load(Ordering::SeqCst) != ONE {
        return Vec::new();
    }
    // One system call in the usual case: no child at all (ECHILD), so no
    // orphan came to us and nothing needs a scan of /proc.
    let any_child = rustix::process::waitid(
        rustix::process::WaitId::All,
        rustix::process::WaitIdOptions::EXITED
            | rustix::process::WaitIdOptions::NOHANG
            | rustix::process::WaitIdOptions::NOWAIT,
    );
    if any_child.is_err() {
        return Vec::new();
    }
    let me = std::process::id() as i32;
    let supervised = SUPERVISED.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let all = procfs::scan(|_, _| true);
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for (pid, st) in &all {
        children.entry(st.ppid).or_default().push(*pid);
    }
    let orphans: Vec<i32> = children
        .get(&me)
        .map(|c| {
            c.iter()
                .copied()
                .filter(|p| !supervised.contains(p))
                .collect()
        })
        .unwrap_or_default();
    if orphans.is_empty() {
        return Vec::new();
    }
    let stats: HashMap<i32, ProcStat> = all.into_iter().collect();
    let mut tree = Vec::new();
    let mut todo = orphans.clone();
    while let Some(pid) = todo.pop() {
        tree.push(pid);
        if let Some(c) = children.get(&pid) {
            todo.extend(c.iter().copied());
        }
    }
    let pinned: Vec<Pinned> = tree
        .iter()
        .filter_map(|pid| {
            let st = stats.get(pid)?;
            (!st.exited).then(|| pin(*pid, st)).flatten()
        })
        .collect();
    let found = escaped(&pinned);
    let _ = stop_all(pinned, Some(grace));
    // Our direct children are zombies now (or were already): reap them.
    for pid in orphans {
        if let Some(pid) = Pid::from_raw(pid) {
            let _ = rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::NOHANG);
        }
    }
    found
}
