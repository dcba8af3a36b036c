//! Orphans in a process that hosts many runs at once (the job service):
//! it is a child subreaper ([`become_shared_subreaper`]), so a process that
//! left a command's process group (`setsid`, a double fork into a new
//! session) comes back to it when its parent exits, but to the process,
//! not to the run it belongs to. Each orphan is attributed to its run, and
//! a run's end stops only its own.
//!
//! **Sessions.** A run whose command starts in a session of its own
//! ([`RunSpec::new_session`](crate::RunSpec::new_session), as the job
//! service's do) registers that session: an orphan in it belongs to that run, whatever its environment
//! (a process can leave its session only for a new one, `setsid`, and
//! join no other; a session id is not reused while a process is in it).
//! Such a run's processes can join no process group of this process's
//! session either, so none can hide among this process's helpers (below).
//!
//! **Attribution.** Every run registers, before its command executes, the
//! value its command gets of the mark variable (`BATON_RUN_ID` in baton):
//! an orphan (outside a registered session) whose `/proc/<pid>/environ`
//! holds that value belongs to that run, with all its descendants; the
//! mark read when the orphan is first seen is the one that counts (one
//! that executes another environment later stays whose it was). An
//! orphan without a readable mark (it
//! cleared its environment, `env -i`; it is not dumpable) belongs to one of
//! the runs registered when it started: it is stopped at a run's end only
//! when no other registered run started before it whose end has not begun
//! (so it cannot be a running one's), otherwise it is left for the end of
//! the last run that could own it. An
//! orphan whose mark is that of one of the latest runs that ended is
//! stopped by the next run end that finds it; one whose mark no run had (a
//! process of a running run changed the variable) is attributed by its
//! start, as one without a mark. A process of a running run is never
//! stopped by another run's end, unless it carries another run's mark.
//!
//! **Reaping.** Orphans that exit are zombies of this process until it
//! reaps them: each run end reaps those it finds, by pid, never with a
//! wait on any child, so the exit status of a command a supervisor waits
//! for is never taken. A command is registered as supervised from before
//! its clone until it is reaped (a read hold on [`SPAWNS`], which the
//! reaper takes for writing), so the reaper never mistakes a command just
//! cloned, or its guardian, for an orphan. Children in this process's own
//! process group are its helpers (`git`, hooks started through `std`) and
//! are never touched.
//!
//! **Cost.** A run's end reads the children of this process's main thread,
//! where orphans arrive ([`main_children`]). What an orphan is (start
//! time, mark, session) is read once, when an end first sees it, and kept
//! by pid; an end stops there, with no hold on spawns, when that list has
//! nothing but supervised commands and orphans seen before that belong to
//! other running runs ([`needs_sorting`]), reads `/proc` only for orphans
//! it has not seen, and scans it only when it has orphans to stop. So an
//! end is not slowed by the orphans of other runs, but for one sweep a
//! second, at most, that reads them all again (to reap those that exited,
//! and to check that a pid still names the process seen).

use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};

use rustix::process::{Pid, WaitOptions};

use crate::contain::{escaped, our_pgrp, pin, stop_all, Pinned, SUPERVISED};
use crate::error::ProcError;
use crate::leftover::Leftover;
use crate::procfs::{self, ProcStat};

mod children;
use children::main_children;

/// Held for reading from before a command is cloned until it is registered
/// as supervised (and as a run); for writing while orphans are reaped and
/// sorted out.
static SPAWNS: RwLock<()> = RwLock::new(());

/// `NAME=` of the mark variable, once [`become_shared_subreaper`] was called.
static MARK: OnceLock<Vec<u8>> = OnceLock::new();

/// The runs of this process whose ends have not finished yet.
static RUNS: Mutex<Vec<Run>> = Mutex::new(Vec::new());

static NEXT_RUN: AtomicU64 = AtomicU64::new(1);

/// The marks of the latest runs that ended (at most [`ENDED_KEPT`]): an
/// orphan with one of them is a leftover of an ended run (one that forked
/// while its run's end stopped it), stopped by the next end that finds it.
static ENDED: Mutex<Ended> = Mutex::new(Ended {
    set: None,
    order: VecDeque::new(),
});

/// Enough for the orphans that come late (a fork racing the stop) even at
/// thousands of runs a second; an older one is attributed by its start.
const ENDED_KEPT: usize = 65_536;

struct Ended {
    set: Option<HashSet<Vec<u8>>>,
    order: VecDeque<Vec<u8>>,
}

impl Ended {
    fn add(&mut self, mark: Vec<u8>) {
        let set = self.set.get_or_insert_with(HashSet::new);
        if !set.insert(mark.clone()) {
            return;
        }
        self.order.push_back(mark);
        if self.order.len() > ENDED_KEPT {
            if let Some(old) = self.order.pop_front() {
                set.remove(&old);
            }
        }
    }

    fn has(&self, mark: &[u8]) -> bool {
        self.set.as_ref().is_some_and(|s| s.contains(mark))
    }
}

#[derive(Clone, Debug)]
struct Run {
    id: u64,
    /// A time (clock ticks since boot) no later than its command's start.
    since: u64,
    /// `NAME=value` of the mark its command got, if it got one.
    mark: Option<Vec<u8>>,
    /// The session its command leads ([`RunSpec::new_session`](crate::RunSpec::new_session)): its pid.
    session: Option<i32>,
    /// Its end has begun: its command ended, so no process of it runs
    /// any more, and an orphan without a mark that it could own is not
    /// left to it by another run's end.
    ending: bool,
}

/// What an orphan was at first sight, the facts it is attributed by: its
/// mark and session do not count again once read (a process that executes
/// another environment, or makes a session of its own later, stays whose
/// it was), so an end reads `/proc` only for orphans it has not seen (see
/// the module, "Cost").
#[derive(Clone, Debug)]
struct Seen {
    /// Its start time: a pid reused is another process.
    start_time: u64,
    /// Its mark, if it had one readable.
    mark: Option<Vec<u8>>,
    /// Its session.
    session: i32,
}

/// The orphans seen, by pid; one leaves when it is reaped (only a run's end
/// reaps orphans, under [`SPAWNS`]) or is no longer a child of ours.
static SEEN: Mutex<Option<HashMap<i32, Seen>>> = Mutex::new(None);

/// When orphans seen were last all read again (to reap those that exited
/// and belong to runs that still run, and to check their start times).
static SWEPT: Mutex<Option<Instant>> = Mutex::new(None);

/// How often the orphans seen are all read again, at most.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Makes this process a child subreaper for many runs at once (the job
/// service): a process that any run's command leaves behind outside its
/// process group comes back to this process, and the run it belongs to
/// stops it (TERM, grace, KILL) when its command ends, before it returns;
/// orphans that exit by themselves are reaped. Orphans are attributed by
/// the value of environment variable `mark` that each run's command gets
/// in [`RunSpec::env`](crate::RunSpec::env) (give every run its own); see the module.
///
/// It changes the whole process, so the library never does it by itself:
/// call it from `main`, before any run starts.
///
/// # Errors
///
/// When the kernel refuses the `prctl`; [`ProcError::Unsupported`] on
/// macOS, which has no child subreaper.
pub fn become_shared_subreaper(mark: &str) -> Result<(), ProcError> {
    let mut name = mark.as_bytes().to_vec();
    name.push(b'=');
    let _ = MARK.set(name);
    crate::sys::set_subreaper()?;
    crate::contain::set_shared_subreaper();
    Ok(())
}

/// Whether [`become_shared_subreaper`] was called.
pub(crate) fn shared() -> bool {
    crate::contain::is_shared_subreaper()
}

/// A run registered for the attribution of orphans; unregistered when
/// dropped (after its end has stopped its orphans).
#[derive(Debug)]
pub(crate) struct Registration {
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut runs = lock(&RUNS);
        let Some(at) = runs.iter().position(|r| r.id == self.id) else {
            return;
        };
        let run = runs.remove(at);
        drop(runs);
        if let Some(mark) = run.mark {
            lock(&ENDED).add(mark);
        }
    }
}

/// What a spawn holds from before its clone until its command is
/// registered: nothing unless this process is a shared subreaper.
pub(crate) struct Spawning {
    hold: Option<RwLockReadGuard<'static, ()>>,
    since: u64,
}

/// Call before cloning a command; register it with [`Spawning::register`].
pub(crate) fn spawning() -> Spawning {
    match shared() {
        true => Spawning {
            hold: Some(SPAWNS.read().unwrap_or_else(PoisonError::into_inner)),
            since: now_ticks(),
        },
        false => Spawning {
            hold: None,
            since: 0,
        },
    }
}

impl Spawning {
    /// Registers the run whose command was started as `pid` with the
    /// variables `env` added to its environment, in a session of its own if
    /// `new_session` (as [`RunSpec::env`](crate::RunSpec::env) and
    /// [`RunSpec::new_session`](crate::RunSpec::new_session) say; call it
    /// after the command is registered as supervised); `None` unless this
    /// process is a shared subreaper.
    pub(crate) fn register(
        self,
        env: &[(OsString, OsString)],
        new_session: bool,
        pid: Pid,
    ) -> Option<Registration> {
        self.hold.as_ref()?;
        let name = MARK.get()?;
        let mark = env
            .iter()
            .rev()
            .find(|(k, _)| k.as_bytes().len() + 1 == name.len() && name.starts_with(k.as_bytes()))
            .map(|(_, v)| [name.as_slice(), v.as_bytes()].concat());
        let id = NEXT_RUN.fetch_add(1, Ordering::Relaxed);
        lock(&RUNS).push(Run {
            id,
            since: self.since,
            mark,
            session: new_session.then(|| pid.as_raw_nonzero().get()),
            ending: false,
        });
        Some(Registration { id })
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Now, in clock ticks since boot (the unit of a process's start time),
/// rounded down.
#[cfg(target_os = "linux")]
fn now_ticks() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    let hz = rustix::param::clock_ticks_per_second().max(1);
    let secs = u64::try_from(t.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(t.tv_nsec).unwrap_or(0);
    secs.saturating_mul(hz) + nanos.saturating_mul(hz) / 1_000_000_000
}

/// Only Linux has a child subreaper: never called elsewhere.
#[cfg(not(target_os = "linux"))]
fn now_ticks() -> u64 {
    0
}

/// Marks `run` as ending (its command ended): see [`Run::ending`]. Two
/// runs ending at once could otherwise each leave an orphan without a
/// mark to the other, and neither stop it.
pub(crate) fn ending(run: &Registration) {
    if let Some(r) = lock(&RUNS).iter_mut().find(|r| r.id == run.id) {
        r.ending = true;
    }
}

/// Whether the end of run `this` must sort out the children `kids`: one of
/// them is neither a supervised command nor an orphan seen before that
/// belongs to another running run, or a sweep is due. The one check a
/// run's end makes when nothing is left for it (see the module): no
/// `/proc` read but the list, and no hold on spawns.
fn needs_sorting(this: u64, kids: &[i32]) -> bool {
    if kids.is_empty() {
        return false;
    }
    let unsupervised: Vec<i32> = {
        let supervised = lock(&SUPERVISED);
        kids.iter()
            .copied()
            .filter(|p| !supervised.contains(p))
            .collect()
    };
    if unsupervised.is_empty() {
        return false;
    }
    if lock(&SWEPT).is_none_or(|at| at.elapsed() >= SWEEP_EVERY) {
        return true;
    }
    let runs = lock(&RUNS).clone();
    let seen = lock(&SEEN);
    let Some(seen) = seen.as_ref() else {
        return true;
    };
    // One seen is still the process seen: only an end reaps orphans, and
    // forgets them as it does.
    unsupervised.iter().any(|pid| {
        seen.get(pid)
            .is_none_or(|known| owner(known, this, &runs) != Owner::Other)
    })
}

/// Whose an orphan is, as far as `run`'s end is concerned.
#[derive(Debug, PartialEq, Eq)]
enum Owner {
    /// The ending run's: stopped and reported.
    This,
    /// A run that has ended: stopped, not reported.
    Ended,
    /// A run still registered, or possibly one: left alone.
    Other,
}

/// The mark (`NAME=value`) in the environment of `pid`, if it is
/// readable and has one.
fn mark_of(pid: i32) -> Option<Vec<u8>> {
    let name = MARK.get()?;
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    environ
        .split(|b| *b == 0)
        .find(|e| e.starts_with(name))
        .map(<[u8]>::to_vec)
}

fn owner(seen: &Seen, this: u64, runs: &[Run]) -> Owner {
    // In the session of a running run's command: its, whatever its
    // environment says (no process can join a session, and a session id
    // is not reused while a process is in it).
    // (Two runs with one session: the older one's command has exited and
    // its session is empty, or its id could not have been reused: the
    // newer one's.)
    let session = Some(seen.session);
    if let Some(run) = runs
        .iter()
        .filter(|r| r.session == session)
        .max_by_key(|r| r.id)
    {
        return match run.id == this {
            true => Owner::This,
            false => Owner::Other,
        };
    }
    if let Some(mark) = &seen.mark {
        let mut marked = runs
            .iter()
            .filter(|r| r.mark.as_deref() == Some(mark.as_slice()))
            .peekable();
        match (marked.peek().is_none(), marked.any(|r| r.id == this)) {
            (_, true) => return Owner::This,
            (false, false) => return Owner::Other,
            (true, false) if lock(&ENDED).has(mark) => return Owner::Ended,
            // A mark no run had: a running job's process set it (exported
            // it, a nested run that died), or its run ended long ago:
            // attributed as one without a mark.
            (true, false) => {}
        }
    }
    // Only a run registered before it started can own it; one whose end
    // has begun (other than this one) runs nothing any more.
    let mut could = runs
        .iter()
        .filter(|r| r.since <= seen.start_time && (r.id == this || !r.ending))
        .peekable();
    if could.peek().is_none() {
        Owner::Ended
    } else if could.any(|r| r.id != this) {
        Owner::Other
    } else {
        Owner::This
    }
}

/// An orphan to stop: its pid and start time.
type Orphan = (i32, u64);

/// The orphans among `kids` (children of this process that are neither
/// supervised commands nor its helpers) that belong to run `this` (first)
/// and to runs that ended (second), as (pid, start time), by what they
/// were at first sight; reaps those that exited. Orphans seen before are
/// taken as they were, without reading `/proc`, but on a sweep (every
/// [`SWEEP_EVERY`]); one that exited meanwhile is reaped by the end that
/// stops it, its run's, or the next sweep. Call under the [`SPAWNS`]
/// write hold.
fn sort_out(kids: Vec<i32>, this: u64, runs: &[Run]) -> (Vec<Orphan>, Vec<Orphan>) {
    let me = std::process::id() as i32;
    let my_pgrp = our_pgrp().map(|p| p.as_raw_nonzero().get());
    let supervised = lock(&SUPERVISED);
    let mut seen = lock(&SEEN);
    let seen = seen.get_or_insert_with(HashMap::new);
    let sweep = {
        let mut swept = lock(&SWEPT);
        let due = swept.is_none_or(|at| at.elapsed() >= SWEEP_EVERY);
        if due {
            *swept = Some(Instant::now());
        }
        due
    };
    if sweep {
        // Only a reaped orphan stops being a child of ours, and this is
        // the only reaper of orphans: that one was forgotten already.
        let now: HashSet<i32> = kids.iter().copied().collect();
        seen.retain(|pid, _| now.contains(pid));
    }
    let (mut ours, mut ended) = (Vec::new(), Vec::new());
    let mut sort = |pid: i32, seen: &Seen| match owner(seen, this, runs) {
        Owner::This => ours.push((pid, seen.start_time)),
        Owner::Ended => ended.push((pid, seen.start_time)),
        Owner::Other => {}
    };
    for pid in kids {
        if supervised.contains(&pid) {
            continue;
        }
        if !sweep {
            if let Some(known) = seen.get(&pid) {
                sort(pid, known);
                continue;
            }
        }
        let Some(st) = procfs::stat(pid).filter(|st| st.ppid == me) else {
            continue;
        };
        let known = seen
            .get(&pid)
            .filter(|k| k.start_time == st.start_time)
            .cloned();
        if known.is_none() && Some(st.pgrp) == my_pgrp {
            continue; // a helper of this process's own
        }
        if st.exited {
            reap(pid, seen);
            continue;
        }
        let known = known.unwrap_or_else(|| Seen {
            start_time: st.start_time,
            mark: mark_of(pid),
            session: st.session,
        });
        sort(pid, &known);
        seen.insert(pid, known);
    }
    (ours, ended)
}

/// At the end of `run`'s command: reaps the orphans that have exited and
/// stops (TERM, `grace`, KILL) those that belong to `run`, or to a run
/// that has ended, with their descendants; returns `run`'s. Orphans that
/// those left while they were stopped (a TERM trap that starts a new
/// session) are stopped too, at once (KILL), a few rounds at most.
pub(crate) fn stop_orphans_of(run: &Registration, grace: Duration) -> Vec<Leftover> {
    ending(run);
    let mut found = Vec::new();
    // The orphans stopped already (one that outlived its KILL, in
    // uninterruptible sleep, is not waited for again).
    let mut done = HashSet::new();
    for round in 0..8 {
        let grace = (round == 0).then_some(grace);
        match stop_round(run, grace, &mut done) {
            Some(more) => found.extend(more),
            None => break,
        }
    }
    found
}

/// One round of [`stop_orphans_of`]: `None` when it found no orphan to
/// stop but those in `done`, which it adds those it stops to.
fn stop_round(
    run: &Registration,
    grace: Option<Duration>,
    done: &mut HashSet<Orphan>,
) -> Option<Vec<Leftover>> {
    // Read before the hold, so that an end with nothing to sort out never
    // waits for spawns nor holds them up. A pid on the list is checked
    // under the hold: a command cloned since is supervised by then; a pid
    // reaped since and reused is not one seen (only an end reaps orphans,
    // under the hold, and forgets them), so it is read again.
    let kids = main_children();
    if !needs_sorting(run.id, &kids) {
        return None;
    }
    let (ours, ended) = {
        let _hold = SPAWNS.write().unwrap_or_else(PoisonError::into_inner);
        let runs = lock(&RUNS).clone();
        sort_out(kids, run.id, &runs)
    };
    let before = done.len();
    done.extend(ours.iter().chain(&ended).copied());
    if done.len() == before {
        return None;
    }
    let all = procfs::scan(|_, st| !st.exited);
    let mut kids: HashMap<i32, Vec<i32>> = HashMap::new();
    for (pid, st) in &all {
        kids.entry(st.ppid).or_default().push(*pid);
    }
    let stats: HashMap<i32, ProcStat> = all.into_iter().collect();
    // The orphans themselves as first seen (their pid not reused since),
    // their descendants as they are now.
    let tree_of = |roots: &[(i32, u64)]| -> Vec<Pinned> {
        let mut todo: Vec<i32> = roots
            .iter()
            .filter(|(pid, start)| stats.get(pid).is_some_and(|st| st.start_time == *start))
            .map(|(pid, _)| *pid)
            .collect();
        let mut pinned = Vec::new();
        while let Some(pid) = todo.pop() {
            if let Some(c) = kids.get(&pid) {
                todo.extend(c.iter().copied());
            }
            if let Some(p) = stats.get(&pid).and_then(|st| pin(pid, st)) {
                pinned.push(p);
            }
        }
        pinned
    };
    let mine = tree_of(&ours);
    let found = escaped(&mine);
    let mut stop = mine;
    stop.extend(tree_of(&ended));
    let stopped = !stop.is_empty();
    let _ = stop_all(stop, grace);
    // Ours and not supervised: no supervisor waits for them. Checked again
    // under the hold: one that exited during the grace may have been reaped
    // by another run's end, and its pid taken by a command (or a helper)
    // whose exit status is its supervisor's.
    let me = std::process::id() as i32;
    let _hold = SPAWNS.write().unwrap_or_else(PoisonError::into_inner);
    let supervised = lock(&SUPERVISED);
    let mut seen = lock(&SEEN);
    let seen = seen.get_or_insert_with(HashMap::new);
    for (pid, start) in ours.into_iter().chain(ended) {
        if supervised.contains(&pid) {
            continue;
        }
        if procfs::stat(pid).is_some_and(|st| st.ppid == me && st.exited && st.start_time == start)
        {
            reap(pid, seen);
        }
    }
    stopped.then_some(found)
}

/// Reaps `pid`, a child of ours no supervisor waits for, if it has exited,
/// and forgets what it was.
fn reap(pid: i32, seen: &mut HashMap<i32, Seen>) {
    seen.remove(&pid);
    if let Some(raw) = Pid::from_raw(pid) {
        let _ = rustix::process::waitpid(Some(raw), WaitOptions::NOHANG);
    }
}
