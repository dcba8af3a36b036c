//! Taking over a slot: the steps between holding the kernel lock and
//! recording the grant (`docs/src/design/locking.md`: "When the lock file is deleted or
//! replaced", "A dead holder's command", "Using an ancestor's hold",
//! "Fencing tokens").

use std::fs::File;
use std::path::Path;
use std::time::{Instant, SystemTime};

use crate::error::LockError;
use crate::identity::{default_owner, new_run_id, Liveness, ProcessIdentity};
use crate::layout::{held_slots, SLOT_BASE};
use crate::meta::{read_doc, write_doc, CommandGroup, HolderKind, HolderRecord, LockDoc};
use crate::meta_lock::MetaLock;
use crate::ofd::{self, Kind};
use crate::outcome::HolderOutcome;
use crate::replaced::{self, FileId};
use crate::request::{LockRequest, Mode};
use baton_fs::IoResultExt;

/// What an acquisition got.
pub(crate) struct Grant {
    pub(crate) slot: u32,
    pub(crate) token: u64,
    pub(crate) run_id: String,
    pub(crate) borrowed: bool,
    pub(crate) previous: Option<HolderRecord>,
    pub(crate) previous_outcome: Option<HolderOutcome>,
}

/// The lock file being acquired.
pub(crate) struct Target<'a> {
    pub(crate) file: &'a File,
    pub(crate) path: &'a Path,
    pub(crate) id: FileId,
    pub(crate) mark: u64,
}

/// Holding `slot` (and META with the document just read, on the fast path):
/// make sure nobody holds this lock through a deleted or replaced file, stop
/// what a dead previous holder's command left running, then record the grant.
/// `Ok(None)` when our own file was deleted or replaced (the slot is released).
pub(crate) fn take_over(
    at: &Target<'_>,
    req: &LockRequest,
    mode: Mode,
    slot: u32,
    locked: Option<(MetaLock<'_>, LockDoc)>,
    deadline: Option<Instant>,
    busy: impl Fn(Option<String>) -> LockError,
) -> Result<Option<Grant>, LockError> {
    let (file, path) = (at.file, at.path);
    let fd = file;
    let give_back = || {
        let _ = ofd::unlock(fd, SLOT_BASE + u64::from(slot), 1);
        let _ = ofd::unlock(fd, at.mark, 1);
    };
    // The marker first, then the path check: an acquirer that creates a new
    // file either sees our marker or we see that our file is no longer there.
    // Read locks on markers never conflict: this always succeeds.
    let marked = ofd::try_lock(fd, Kind::Read, at.mark, 1).context("cannot lock", path);
    if let Err(e) = marked {
        give_back();
        return Err(e.into());
    }
    if !replaced::still_at_path(at.id, path) {
        give_back();
        return Ok(None);
    }
    let result = (|| -> Result<Option<Recorded>, LockError> {
        let (meta, mut doc) = match locked {
            Some(l) => l,
            None => {
                let meta = meta_for_grant(file, path, deadline, req, &busy)?;
                let doc = read_doc(file)
                    .context("cannot read lock file", path)?
                    .or_fresh();
                (meta, doc)
            }
        };
        // A file new to the lock: look once for holders through an older
        // file while still under META, so that in the usual case (none) the
        // grant is recorded in the same section as ever and `status` never
        // sees the slot held without its holder.
        let replaced_holders = doc.inode != Some(at.id.ino)
            && replaced::holders_elsewhere(at.mark, Some(at.id)).is_some_and(|h| !h.is_empty());
        let leftovers = dead_command_groups(&mut doc, mode, slot, now_ms());
        if replaced_holders || !leftovers.is_empty() {
            // Slow, rare work: never while holding META. Publish the slot
            // count first, so that others meeting our slot agree with it,
            // and when the dead holders' groups began to be stopped.
            if doc.max != mode.slots() || leftovers.iter().any(|(_, _, first)| *first) {
                doc.max = mode.slots();
                write_doc(file, &mut doc).context("cannot write lock metadata to", path)?;
            }
            drop(meta);
            if replaced_holders {
                match replaced::wait_until_gone(at.mark, at.id, path, deadline, req.cancel.as_ref())
                {
                    replaced::Gone::Clear => {}
                    // Our own file went away meanwhile: start again on the new one.
                    replaced::Gone::OursReplaced => return Ok(None),
                    replaced::Gone::Cancelled => {
                        return Err(LockError::Cancelled {
                            name: req.name.to_string(),
                        })
                    }
                    replaced::Gone::TimedOut => {
                        return Err(busy(Some(
                            "a holder through a deleted or replaced lock file".into(),
                        )))
                    }
                }
            }
            // A bounded wait gives up while they are being stopped (busy,
            // naming them) rather than wait out their grace; whoever comes
            // next goes on with the grace that is left.
            for (ns, g, _) in leftovers {
                if let Err(stopping) = stop_leftover(ns, g, deadline) {
                    return Err(busy(Some(stopping)));
                }
            }
            let _meta = meta_for_grant(file, path, deadline, req, &busy)?;
            let mut doc = read_doc(file)
                .context("cannot read lock file", path)?
                .or_fresh();
            return record_grant(at, &mut doc, req, mode, slot).map(Some);
        }
        record_grant(at, &mut doc, req, mode, slot).map(Some)
    })();
    match result {
        Ok(Some(Recorded {
            token,
            run_id,
            previous,
            previous_outcome,
        })) => Ok(Some(Grant {
            slot,
            token,
            run_id,
            borrowed: false,
            previous,
            previous_outcome,
        })),
        Ok(None) => {
            give_back();
            Ok(None)
        }
        Err(e) => {
            give_back();
            Err(e)
        }
    }
}

/// META, to record a grant: waited for until `deadline` (or a cancel);
/// `busy` when a process keeps it that long (stopped?).
fn meta_for_grant<'f>(
    file: &'f File,
    path: &Path,
    deadline: Option<Instant>,
    req: &LockRequest,
    busy: &impl Fn(Option<String>) -> LockError,
) -> Result<MetaLock<'f>, LockError> {
    MetaLock::write_until(file, deadline, req.cancel.as_ref())
        .context("cannot lock metadata of", path)?
        .ok_or_else(|| {
            busy(Some(
                "a process that holds the lock's metadata (stopped?)".into(),
            ))
        })
}

/// Stops what is left of a dead holder's command group: translated when the
/// dead holder ran in another PID namespace; left alone when that namespace
/// is not visible.
#[cfg(unix)]
pub(crate) fn terminate_leftover(ns: Option<baton_proc::pidns::NsId>, g: CommandGroup) {
    let _ = stop_leftover(ns, g, None);
}

/// [`terminate_leftover`] for a caller that may wait only until `give_up`:
/// TERM, then KILL once the group's grace (counted from its first TERM,
/// [`CommandGroup::stopping_since_ms`]) is over; if `give_up` comes first
/// with the group still running, what is being stopped, for the caller's
/// busy message.
#[cfg(unix)]
fn stop_leftover(
    ns: Option<baton_proc::pidns::NsId>,
    g: CommandGroup,
    give_up: Option<Instant>,
) -> Result<(), String> {
    let since = g.stopping_since_ms.unwrap_or_else(now_ms);
    let left_ms = g.grace_ms.saturating_sub(now_ms().saturating_sub(since));
    let stopped = baton_proc::pidns::terminate_group_in_until(
        ns,
        g.pgid,
        baton_proc::GroupIdentity::Recorded {
            leader_start_time: g.leader_start_time,
            session: g.session,
        },
        std::time::Duration::from_millis(left_ms),
        give_up,
    );
    if !stopped.still_stopping {
        return Ok(());
    }
    let names: Vec<String> = stopped
        .found
        .iter()
        .take(3)
        .map(|l| format!("{} ({})", l.pid, l.command))
        .collect();
    let left = std::time::Duration::from_millis(
        g.grace_ms
            .saturating_sub(now_ms().saturating_sub(since))
            .div_ceil(1000)
            * 1000,
    );
    Err(format!(
        "a dead holder's command is being stopped (process group {}: {}; KILL in {} unless it exits)",
        g.pgid,
        names.join(", "),
        humantime::format_duration(left)
    ))
}

/// Windows: a run's processes are in a Job Object that dies with it; no
/// process group outlives a dead holder.
#[cfg(windows)]
pub(crate) fn terminate_leftover(_ns: (), _g: CommandGroup) {}

/// Windows: nothing to stop (see [`terminate_leftover`]).
#[cfg(windows)]
fn stop_leftover(_ns: (), _g: CommandGroup, _give_up: Option<Instant>) -> Result<(), String> {
    Ok(())
}

/// Windows: nothing outlives a dead holder (see [`terminate_leftover`]).
#[cfg(windows)]
fn dead_command_groups(
    _doc: &mut LockDoc,
    _mode: Mode,
    _slot: u32,
    _now_ms: u64,
) -> Vec<((), CommandGroup, bool)> {
    Vec::new()
}

/// Process groups of dead holders whose records the grant of `slot` replaces,
/// with the PID namespace their ids belong to, each marked as being stopped
/// from `now_ms` unless it already was (true: marked now; the caller writes
/// the record). A holder that is not visible from here (another container, a
/// restarted one whose pid 1 is a new process) is never taken for dead: its
/// group is left alone.
#[cfg(unix)]
fn dead_command_groups(
    doc: &mut LockDoc,
    mode: Mode,
    slot: u32,
    now_ms: u64,
) -> Vec<(Option<baton_proc::pidns::NsId>, CommandGroup, bool)> {
    doc.holders
        .iter_mut()
        .filter(|h| h.command_group.is_some() && (h.slot == slot || mode == Mode::Shared))
        .filter(|h| {
            h.process.liveness() == Liveness::Dead
                && h.process.boot_id == crate::identity::boot_id()
        })
        .filter_map(|h| {
            let ns = h.process.ns_id();
            let g = h.command_group.as_mut()?;
            let first = g.stopping_since_ms.is_none();
            g.stopping_since_ms.get_or_insert(now_ms);
            Some((ns, *g, first))
        })
        .collect()
}

/// Milliseconds since the Unix epoch (0 if the clock is before it).
fn now_ms() -> u64 {
    clock_micros() / 1000
}

/// What [`record_grant`] recorded.
struct Recorded {
    token: u64,
    run_id: String,
    /// The holder before us on our slot, if it ended without releasing.
    previous: Option<HolderRecord>,
    /// How the holder before us on our slot ended.
    previous_outcome: Option<HolderOutcome>,
}

/// Whether the grant of `slot` in `mode` keeps record `h`: anything on
/// another slot, and other shared holders that still run (not abandoned).
fn kept(h: &HolderRecord, mode: Mode, slot: u32) -> bool {
    h.slot != slot
        || (mode == Mode::Shared
            && h.mode == "shared"
            && !h.abandoned
            && h.process.liveness() != Liveness::Dead)
}

/// The holder on `slot` before this grant, if it ended without releasing
/// (a clean release removes its record; a dead or abandoned holder's record
/// stays until the next grant): the latest such record the grant replaces.
fn previous_on_slot(doc: &LockDoc, mode: Mode, slot: u32) -> Option<HolderRecord> {
    doc.holders
        .iter()
        .filter(|h| !kept(h, mode, slot) && h.ended_without_release())
        .max_by_key(|h| h.token)
        .map(|h| HolderRecord {
            previous: None,
            previous_outcome: None,
            ..h.clone()
        })
}

/// How the holder before a grant of `slot` ended: `died` when it left its
/// record (`previous`), else what the slot's last releasing holder left,
/// else `released` (a holder of an older version released it) unless the
/// lock was never granted (`None`).
pub(crate) fn outcome_before(
    doc: &LockDoc,
    slot: u32,
    previous: Option<&HolderRecord>,
) -> Option<HolderOutcome> {
    if previous.is_some() {
        return Some(HolderOutcome::Died);
    }
    match doc.outcomes.iter().find(|o| o.slot == slot) {
        Some(o) => Some(o.outcome.clone()),
        None => (doc.token > 0).then_some(HolderOutcome::Released),
    }
}

/// Issues the next fencing token and records the holder. Caller holds META.
///
/// A token is the larger of the last one + 1 and the wall clock in
/// microseconds, so tokens increase across grants, lost or deleted files and
/// files restored from a backup, as long as the clock does not go back
/// (`docs/src/design/locking.md`, "Fencing tokens").
fn record_grant(
    at: &Target<'_>,
    doc: &mut LockDoc,
    req: &LockRequest,
    mode: Mode,
    slot: u32,
) -> Result<Recorded, LockError> {
    let id = at.id;
    let previous = previous_on_slot(doc, mode, slot);
    let previous_outcome = outcome_before(doc, slot, previous.as_ref());
    let floor = doc.holders.iter().map(|h| h.token).max().unwrap_or(0);
    let next = doc
        .token
        .max(floor)
        .checked_add(1)
        .ok_or_else(|| LockError::TokensExhausted {
            name: req.name.to_string(),
        })?;
    // Never below the clock: a lock file restored from a backup (same
    // inode, older counter) must not hand out old tokens again.
    doc.token = next.max(clock_micros());
    doc.inode = Some(id.ino);
    doc.format = 1;
    doc.name = req.name.to_string();
    doc.max = mode.slots();
    // Records that cannot belong to a current holder: anything on the slot we
    // now hold, except other shared holders that still run.
    doc.holders.retain(|h| kept(h, mode, slot));
    let run_id = req.run_id.clone().unwrap_or_else(new_run_id);
    doc.holders.push(HolderRecord {
        process: ProcessIdentity::current(),
        owner: req
            .owner
            .clone()
            .unwrap_or_else(|| default_owner().to_string()),
        operation: req.operation.clone(),
        run_id: run_id.clone(),
        acquired_at: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
        token: doc.token,
        mode: mode.as_str().into(),
        slot,
        kind: req.kind,
        command_group: None,
        acquired_for: req.acquired_for.clone(),
        abandoned: false,
        previous: previous.clone().map(Box::new),
        caller_thread: match (&req.acquired_for, req.kind) {
            (Some(f), _) => crate::identity::thread_of_ancestor(f.pid),
            // A library holder: the thread of ours that holds it (a command
            // that thread starts and waits for cannot wait for it).
            (None, HolderKind::Library) => req
                .caller
                .as_ref()
                .map_or_else(crate::identity::current_os_thread, |c| c.os_thread),
            (None, _) => None,
        },
        previous_outcome: previous_outcome.clone(),
    });
    write_doc(at.file, doc).context("cannot write lock metadata to", at.path)?;
    Ok(Recorded {
        token: doc.token,
        run_id,
        previous,
        previous_outcome,
    })
}

/// Microseconds since the Unix epoch (0 if the clock is before it).
fn clock_micros() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// A live holder of a held slot that holds it for an ancestor of this
/// process (in a mode that covers `mode`, if given): a `run` holder that is
/// an ancestor, or a `hold` holder acquired for an ancestor by the same
/// caller — the thread of that ancestor that started us, the one waiting for
/// us (a script that runs `baton lock acquire X` twice). Waiting for such a
/// holder would deadlock; a request that may use its hold does. A hold taken
/// by another thread of a multi-threaded ancestor is not: that thread may
/// release it while this request waits.
///
/// A `library` holder (a program holding the lock through the library, say
/// Python's `baton.Lock`) counts for a request of the `baton` command
/// (`requester` not `library`) when it is an ancestor and the thread of it
/// that holds the lock is the one that started us: that thread is running
/// us (typically waiting for us), as a shell holding it would be. Library
/// requests (a forked Python child using `baton.Lock`) still wait for such
/// a holder, which may release while its child runs.
pub(crate) fn held_for_ancestor(
    fd: &File,
    doc: &LockDoc,
    mode: Option<Mode>,
    requester: HolderKind,
) -> std::io::Result<Option<HolderRecord>> {
    // Ancestors are compared by pid and start time: only in our own PID
    // namespace (a container's pid 7 is not ours).
    let local = |p: &ProcessIdentity| {
        p.host == crate::identity::hostname()
            && p.boot_id == crate::identity::boot_id()
            && p.in_my_pid_ns()
    };
    let covers = |h: &HolderRecord| match mode {
        Some(m) => h.mode != "shared" || m == Mode::Shared,
        None => true,
    };
    let candidates: Vec<&HolderRecord> = doc
        .holders
        .iter()
        .filter(|h| {
            let kind = match h.kind {
                HolderKind::Run | HolderKind::Hold => true,
                HolderKind::Library => requester != HolderKind::Library,
                _ => false,
            };
            kind && local(&h.process) && covers(h)
        })
        .collect();
    if candidates.is_empty() {
        return Ok(None);
    }
    let held = held_slots(fd, doc.max.max(1))?;
    let ancestors = crate::identity::ancestors();
    let is_ancestor = |p: &ProcessIdentity| ancestors.contains(&(p.pid, p.start_time));
    Ok(candidates
        .into_iter()
        .filter(|h| held.iter().any(|(s, _)| *s == h.slot))
        .filter(|h| h.process.liveness() == Liveness::Alive)
        .find(|h| match h.kind {
            HolderKind::Run => is_ancestor(&h.process),
            HolderKind::Library => {
                is_ancestor(&h.process)
                    && h.caller_thread.is_some()
                    && h.caller_thread == crate::identity::thread_of_ancestor(h.process.pid)
            }
            _ => h
                .acquired_for
                .as_ref()
                .is_some_and(|f| f.in_my_pid_ns() && is_ancestor(f) && same_caller(h, f.pid)),
        })
        .cloned())
}

/// Whether this process descends from the thread of `caller` that the hold
/// `h` was taken through. Records without the thread (older versions, or it
/// could not be told) count as the same caller when `caller` has one thread.
fn same_caller(h: &HolderRecord, caller: i32) -> bool {
    match (h.caller_thread, crate::identity::thread_of_ancestor(caller)) {
        (Some(theirs), Some(ours)) => theirs == ours,
        _ => crate::identity::thread_count(caller).is_none_or(|n| n <= 1),
    }
}
