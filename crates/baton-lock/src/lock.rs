//! Acquiring and releasing named locks.
//!
//! The protocol is described in `docs/src/design/locking.md`. In short:
//! the lock itself is a kernel byte-range lock on a slot byte of the lock
//! file; waiters line up with tickets (write locks on bytes of their own) and
//! each waits in the kernel only for its immediate predecessor, so the line is
//! FIFO, a dead waiter leaves it by itself, and a release wakes one process.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::cancel::CancelToken;
use crate::dir::BatonDir;
use crate::error::LockError;
use crate::grant::{held_for_ancestor, take_over, Grant, Target};
use crate::layout::{
    greatest_ticket_below, held_slots, BORROW_BASE, SLOT_BASE, TICKET_BASE, TICKET_END,
};
use crate::meta::{read_doc, write_doc, CommandGroup, DocRead, HolderRecord, LockDoc};
use crate::meta_lock::MetaLock;
use crate::name::LockName;
use crate::ofd::{self, Kind};
use crate::outcome::{HolderOutcome, SlotOutcome};
use crate::reentrant::{forget_held, held_key, reentrant, remember_held, HeldKey};
use crate::replaced::{self, FileId};
use crate::request::{LockRequest, Mode};
use crate::slots::{self, try_slots};
use crate::wait::WaitPolicy;
use baton_fs::IoResultExt;

/// A held lock. Dropping it releases the lock; [`LockGuard::release`] does
/// the same and reports errors.
#[must_use = "the lock is released as soon as the guard is dropped"]
#[derive(Debug)]
pub struct LockGuard {
    file: File,
    name: LockName,
    path: PathBuf,
    token: u64,
    run_id: String,
    slot: u32,
    mode: Mode,
    key: HeldKey,
    released: bool,
    /// The lock is held by an ancestor process; this guard only uses it.
    borrowed: bool,
    /// The holder before this grant, when it ended without releasing.
    previous: Option<Box<HolderRecord>>,
    /// How the holder before this grant ended.
    previous_outcome: Option<HolderOutcome>,
    /// What a release leaves for the next holder ([`LockGuard::release_with`]).
    outcome: HolderOutcome,
    /// Released by [`LockGuard::abandon`]: the record stays, marked.
    abandoned: bool,
    /// The name's marker byte, read-locked while held (see `replaced`).
    mark: u64,
}

impl LockGuard {
    /// Whether this guard uses an ancestor's hold (see
    /// [`LockRequest::use_ancestor_hold`]): the lock stays held by the
    /// ancestor, and releasing this guard releases nothing.
    pub fn is_borrowed(&self) -> bool {
        self.borrowed
    }

    /// The fencing token of this grant: larger than that of every earlier grant of this lock.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The lock's name.
    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The run id recorded for this grant.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The slot held (0 unless a semaphore).
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// The mode it is held in.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The holder this grant followed, when that one ended without
    /// releasing (it died, or [`LockGuard::abandon`]ed the lock): whatever
    /// it was doing under the lock may be half done. `None` after a clean
    /// release, for a new lock, and for a borrowed hold.
    pub fn previous_holder_died(&self) -> Option<&HolderRecord> {
        self.previous.as_deref()
    }

    /// How the holder before this grant ended (`BATON_PREVIOUS_OUTCOME`):
    /// [`HolderOutcome::Died`] when [`LockGuard::previous_holder_died`],
    /// else what it left when it released ([`LockGuard::release_with`]);
    /// `None` for the first grant of a lock and for a borrowed hold.
    pub fn previous_outcome(&self) -> Option<&HolderOutcome> {
        self.previous_outcome.as_ref()
    }

    /// Releases the lock, leaving `outcome` for the next holder
    /// ([`LockGuard::previous_outcome`]), written in the same step that
    /// removes this holder's record, before the slot is unlocked.
    /// [`HolderOutcome::Died`] lets go as [`LockGuard::abandon`] does.
    /// [`LockGuard::release`] and drop leave [`HolderOutcome::Released`].
    pub fn release_with(mut self, outcome: HolderOutcome) -> Result<(), LockError> {
        if outcome == HolderOutcome::Died {
            self.abandoned = true;
        }
        self.outcome = outcome;
        self.release_inner()
    }

    /// Releases a lock under which nothing was done (a run that failed
    /// before its command started): the next holder learns what this one
    /// learned ([`LockGuard::previous_outcome`]), as if this grant had not
    /// happened.
    pub fn release_unused(mut self) -> Result<(), LockError> {
        if let Some(o) = self.previous_outcome.clone() {
            self.outcome = o;
        }
        self.release_inner()
    }

    /// Lets go of the lock as a holder that died would: the slot is freed
    /// but the record stays, marked `abandoned`, so the next holder learns
    /// that the work under the lock may be half done
    /// ([`LockGuard::previous_holder_died`]). For a holder whose principal
    /// (the script it holds the lock for) ended without releasing.
    pub fn abandon(mut self) -> Result<(), LockError> {
        self.abandoned = true;
        self.release_inner()
    }

    /// Records the process group of the command run under this lock, so that
    /// if this process dies, the next holder terminates what is left of the
    /// group before it proceeds (docs/src/design/architecture.md, decision 11).
    pub fn set_command_group(&self, group: CommandGroup) -> Result<(), LockError> {
        if self.borrowed {
            return Ok(());
        }
        let result = (|| -> std::io::Result<()> {
            let _meta = MetaLock::write(&self.file)?;
            if let DocRead::Valid(mut doc) = read_doc(&self.file)? {
                if let Some(h) = doc.holders.iter_mut().find(|h| h.token == self.token) {
                    h.command_group = Some(group);
                    write_doc(&self.file, &mut doc)?;
                }
            }
            Ok(())
        })();
        result
            .context("cannot update lock metadata in", &self.path)
            .map_err(Into::into)
    }

    /// Releases the lock now.
    pub fn release(mut self) -> Result<(), LockError> {
        self.release_inner()
    }

    /// For a process created by `fork()` while this guard was held: closes
    /// this process's copy of the lock file, releasing nothing. The kernel
    /// lock belongs to the open file, which the child shares with the
    /// process that acquired it; releasing (or dropping) the guard here
    /// would release that process's lock, and keeping the file open would
    /// keep the lock held after that process dies until the child exits.
    /// Closing it leaves the lock with the acquirer, as if the child had
    /// never had it. Called in the acquiring process instead, it frees the
    /// lock by closing the file, as a holder that exits does, and leaves
    /// its record for the next grant to replace.
    pub fn close_inherited(mut self) {
        self.released = true;
        // The child's copy of the re-entrancy table still names the thread
        // that forked, which may take this lock itself later.
        forget_held(&self.key);
    }

    fn release_inner(&mut self) -> Result<(), LockError> {
        if self.released {
            return Ok(());
        }
        if self.borrowed {
            self.released = true;
            forget_held(&self.key);
            let byte = BORROW_BASE + u64::from(self.slot);
            return ofd::unlock(&self.file, byte, 1)
                .context("cannot release lock", &self.path)
                .map_err(Into::into);
        }
        self.released = true;
        forget_held(&self.key);
        let fd = &self.file;
        // Remove our record, then hand the slot on. The other order would let
        // the woken waiter run into our META section and be woken a second
        // time, which on an idle machine costs more than the few system calls
        // of the removal (measured by bench/run.py's handoff probe).
        let record = (|| -> std::io::Result<()> {
            // Behind a process stopped in its META section, give up on the
            // record after a bounded wait: the slot is released regardless,
            // and the next grant replaces the record.
            let _meta = match MetaLock::write(&self.file) {
                Ok(meta) => meta,
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => return Ok(()),
                Err(e) => return Err(e),
            };
            if let DocRead::Valid(mut doc) = read_doc(&self.file)? {
                if self.abandoned {
                    for h in doc.holders.iter_mut().filter(|h| h.token == self.token) {
                        h.abandoned = true;
                    }
                } else {
                    doc.holders.retain(|h| h.token != self.token);
                    leave_outcome(&mut doc, self.slot, self.token, self.mode, &self.outcome);
                }
                write_doc(&self.file, &mut doc)?;
            }
            Ok(())
        })();
        // Processes still working under this hold (borrowers, see
        // `use_ancestor_hold`: a script's `state edit` left running in the
        // background) finish first; a stopped one is waited for at most
        // BORROWER_PATIENCE.
        let borrowers = BORROW_BASE + u64::from(self.slot);
        let _ = ofd::lock_wait(
            fd,
            Kind::Write,
            borrowers,
            1,
            Some(Instant::now() + BORROWER_PATIENCE),
            None,
        );
        let unlock = ofd::unlock(fd, SLOT_BASE + u64::from(self.slot), 1);
        // Nothing of this hold may outlive the release in a duplicate of the
        // descriptor (a guardian's, see `AsFd`), which may close it much
        // later: the borrowers' byte just taken would make the next
        // holder's release wait for it, and the marker would look like a
        // holder to an acquirer of a replaced file.
        let _ = ofd::unlock(fd, borrowers, 1);
        let _ = ofd::unlock(fd, self.mark, 1);
        unlock.context("cannot release lock", &self.path)?;
        record.context("cannot update lock metadata in", &self.path)?;
        Ok(())
    }
}

/// Records `outcome` as the last release of `slot` (by the grant with
/// `token`), replacing the slot's earlier one, with one exception: a shared
/// holder's clean release never hides a failure of a shared holder granted
/// after it (both held the lock together; the next holder must hear of it).
fn leave_outcome(doc: &mut LockDoc, slot: u32, token: u64, mode: Mode, outcome: &HolderOutcome) {
    let existing = doc.outcomes.iter().position(|o| o.slot == slot);
    if let Some(i) = existing {
        let o = &doc.outcomes[i];
        if mode == Mode::Shared && !outcome.is_bad() && o.outcome.is_bad() && o.token > token {
            return;
        }
        doc.outcomes.remove(i);
    }
    doc.outcomes.push(SlotOutcome {
        slot,
        token,
        outcome: outcome.clone(),
    });
}

/// The lock file's descriptor. Its kernel locks belong to the open file
/// description, which a duplicate shares: a process given a duplicate keeps
/// the lock held after this one dies, until it closes it (a guardian that
/// must stop what works under the lock first: `baton_proc::TreeGuard`).
/// [`LockGuard::release`] unlocks everything it locked explicitly (the slot,
/// the borrowers' byte, the marker), so a duplicate keeps nothing of a
/// released lock.
#[cfg(unix)]
impl std::os::fd::AsFd for LockGuard {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.file.as_fd()
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        // Errors cannot be reported from drop; the kernel releases the lock
        // when the file is closed right after, whatever happened here.
        let _ = self.release_inner();
    }
}

/// Acquires one lock, waiting in line according to the request's policy.
///
/// ```no_run
/// use baton_lock::{acquire, BatonDir, LockRequest, WaitPolicy};
/// let dir = BatonDir::open("/tmp/baton-example")?;
/// let guard = acquire(&dir, &LockRequest::new("deploy".parse()?).wait(WaitPolicy::Forever))?;
/// println!("fencing token {}", guard.token());
/// guard.release()?;
/// # Ok::<(), baton_lock::LockError>(())
/// ```
pub fn acquire(dir: &BatonDir, req: &LockRequest) -> Result<LockGuard, LockError> {
    let start = Instant::now();
    let deadline = req.wait.deadline_from(start);
    crate::ofd::locks_work(&dir.locks_dir()).map_err(|reason| LockError::Unsupported { reason })?;
    let path = dir.lock_path(&req.name);
    let mark = replaced::marker(dir.path(), req.name.as_str());
    let _span = tracing::debug_span!("lock", lock = %req.name).entered();
    tracing::debug!(lock = %req.name, mode = req.mode.as_str(), wait = %req.wait, file = %path.display(), "acquiring");
    loop {
        let file = open_lock_file(&path)?;
        let key = held_key(&file, &path, req.caller.as_ref().map(|c| c.id))?;
        let shares = req.mode.normalized() != Mode::Exclusive;
        if !remember_held(key.clone(), shares) {
            return Err(reentrant(req, &path, start));
        }
        let id = FileId {
            dev: key.dev,
            ino: key.ino,
        };
        let at = Target {
            file: &file,
            path: &path,
            id,
            mark,
        };
        let result = acquire_in(&at, req, start, deadline);
        match result {
            Ok(Some(g)) => {
                tracing::debug!(lock = %req.name, token = g.token, slot = g.slot, borrowed = g.borrowed, waited_ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX), "granted");
                return Ok(LockGuard {
                    file,
                    name: req.name.clone(),
                    path,
                    token: g.token,
                    run_id: g.run_id,
                    slot: g.slot,
                    mode: req.mode.normalized(),
                    key,
                    released: false,
                    borrowed: g.borrowed,
                    previous: g.previous.map(Box::new),
                    previous_outcome: g.previous_outcome,
                    outcome: HolderOutcome::Released,
                    abandoned: false,
                    mark,
                });
            }
            // The file was deleted or replaced while we waited: use the new one.
            Ok(None) => forget_held(&key),
            Err(e) => {
                tracing::debug!(lock = %req.name, error = %e, waited_ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX), "not acquired");
                forget_held(&key);
                return Err(e);
            }
        }
    }
}

/// How several locks are taken together, by any backend: in name order (so
/// two callers naming the same locks in different orders cannot deadlock),
/// a name given twice once (taking it twice would be a self-deadlock), and
/// with one wait policy for all: no waiting if any request says so, else
/// until the earliest of the requests' deadlines, measured from `start`.
pub fn plan_all(reqs: &[LockRequest], start: Instant) -> (Vec<&LockRequest>, WaitPolicy) {
    let mut sorted: Vec<&LockRequest> = reqs.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    sorted.dedup_by(|a, b| a.name == b.name);
    let immediate = reqs.iter().any(|r| r.wait == WaitPolicy::Immediately);
    let deadline = reqs
        .iter()
        .filter_map(|r| r.wait.deadline_from(start))
        .min();
    let wait = match (immediate, deadline) {
        (true, _) => WaitPolicy::Immediately,
        (false, Some(d)) => WaitPolicy::Until(d),
        (false, None) => WaitPolicy::Forever,
    };
    (sorted, wait)
}

/// Acquires several locks in one canonical order (sorted by name), so that
/// two callers naming the same locks in different orders cannot deadlock. A
/// name given twice is taken once.
/// The wait policy of each request is replaced by one shared deadline: the
/// earliest of the requests' deadlines.
pub fn acquire_all(dir: &BatonDir, reqs: &[LockRequest]) -> Result<Vec<LockGuard>, LockError> {
    let (sorted, wait) = plan_all(reqs, Instant::now());
    let mut guards: Vec<LockGuard> = Vec::with_capacity(sorted.len());
    let give_back = |guards: Vec<LockGuard>| {
        for g in guards.into_iter().rev() {
            let _ = g.release_unused();
        }
    };
    for req in sorted {
        let mut req = req.clone();
        req.wait = wait;
        let got = acquire(dir, &req);
        if got.is_err() {
            give_back(std::mem::take(&mut guards));
        }
        match got {
            Ok(g) => guards.push(g),
            // Report the policy the caller asked for, not the derived deadline.
            Err(LockError::Busy {
                name,
                path,
                holder,
                waited,
                ..
            }) => {
                return Err(LockError::Busy {
                    name,
                    path,
                    holder,
                    waited,
                    policy: reqs.first().map_or(WaitPolicy::Forever, |r| r.wait),
                })
            }
            Err(e) => return Err(e),
        }
    }
    Ok(guards)
}

fn open_lock_file(path: &Path) -> Result<File, LockError> {
    // Created 0600, or 0660 in a dir shared with a group (`sharing`).
    let options = crate::sys::lock_file_options();
    crate::sharing::open_or_create(path, &options, 0o600)
        .context("cannot open lock file", path)
        .map_err(Into::into)
}

/// How long a release waits for processes still using the hold (borrowers).
const BORROWER_PATIENCE: std::time::Duration = std::time::Duration::from_secs(60);

/// `Ok(None)` when the file turned out to be deleted or replaced: try again.
fn acquire_in(
    at: &Target<'_>,
    req: &LockRequest,
    start: Instant,
    deadline: Option<Instant>,
) -> Result<Option<Grant>, LockError> {
    let (file, path) = (at.file, at.path);
    let fd = file;
    let mode = req.mode.normalized();
    let slots = mode.slots();
    let busy = |waited_holder: Option<String>| LockError::Busy {
        name: req.name.to_string(),
        path: path.to_path_buf(),
        holder: waited_holder,
        waited: start.elapsed(),
        policy: req.wait,
    };

    // Phase 1, under META: check agreement, take the fast path or a ticket.
    let cancel = req.cancel.as_ref();
    let cancelled = |e: std::io::Error| {
        if cancel.is_some_and(CancelToken::is_cancelled) {
            LockError::Cancelled {
                name: req.name.to_string(),
            }
        } else {
            LockError::Io(baton_fs::PathError {
                op: "cannot wait for lock",
                path: path.to_path_buf(),
                source: e,
            })
        }
    };
    let ticket = {
        let meta = match MetaLock::write_until(file, deadline, cancel).map_err(cancelled)? {
            Some(meta) => meta,
            None => {
                return Err(busy(Some(
                    "a process that holds the lock's metadata (stopped?)".into(),
                )))
            }
        };
        let mut doc = read_doc(file)
            .context("cannot read lock file", path)?
            .or_fresh();
        let waiting = greatest_ticket_below(fd, TICKET_END).context("cannot inspect lock", path)?;
        // Only a disagreement about the slot count needs the slots inspected.
        let disagrees = doc.max != slots
            && (waiting.is_some()
                || !held_slots(fd, doc.max.max(slots))
                    .context("cannot inspect lock", path)?
                    .is_empty());
        if disagrees {
            return Err(LockError::ModeMismatch {
                name: req.name.to_string(),
                existing: describe_max(doc.max),
                requested: describe_max(slots),
            });
        }
        if waiting.is_none() {
            if let Some(slot) = try_slots(file, mode, slots).context("cannot lock", path)? {
                tracing::debug!(lock = %req.name, slot, "free and nobody waiting: taking it at once");
                return take_over(at, req, mode, slot, Some((meta, doc)), deadline, busy);
            }
        }
        if req.use_ancestor_hold {
            if let Some(h) = held_for_ancestor(fd, &doc, Some(mode), req.kind)
                .context("cannot inspect lock", path)?
            {
                drop(meta);
                tracing::debug!(lock = %req.name, ancestor_pid = h.process.pid, token = h.token, "held by an ancestor of this process: using its hold");
                // Users of one ancestor's hold (say, two background jobs of
                // the script) still exclude each other, on a byte of their own.
                let kind = if mode == Mode::Shared {
                    Kind::Read
                } else {
                    Kind::Write
                };
                let byte = BORROW_BASE + u64::from(h.slot);
                if !ofd::lock_wait(fd, kind, byte, 1, deadline, cancel).map_err(cancelled)? {
                    return Err(busy(describe_holders(&doc)));
                }
                return Ok(Some(Grant {
                    slot: h.slot,
                    token: h.token,
                    run_id: h.run_id,
                    borrowed: true,
                    previous: None,
                    previous_outcome: None,
                }));
            }
        }
        // Not waiting at all: busy is the whole answer.
        if req.wait == WaitPolicy::Immediately {
            return Err(busy(describe_holders(&doc)));
        }
        // Waiting for a lock held by a `baton run` that is one of our own
        // ancestors (its command runs `baton run --lock X` again), or by a
        // hold that the same caller took (a script running `baton lock
        // acquire X` twice), can never end: that caller waits for us. Say so
        // at once, for a bounded wait too, instead of waiting and saying
        // "busy". Other holders (a library user that spawned us, another
        // thread of the caller) may well release first.
        if let Some(h) =
            held_for_ancestor(fd, &doc, None, req.kind).context("cannot inspect lock", path)?
        {
            return Err(LockError::HeldByAncestor {
                name: req.name.to_string(),
                pid: h.process.pid,
                kind: h.kind.as_str().to_string(),
            });
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(busy(describe_holders(&doc)));
        }
        if doc.max != slots {
            doc.max = slots;
            write_doc(file, &mut doc).context("cannot write lock metadata to", path)?;
        }
        let mut t = waiting.map_or(TICKET_BASE, |w| w + 1);
        while !ofd::try_lock(fd, Kind::Write, t, 1).context("cannot join the queue of", path)? {
            t += 1;
        }
        tracing::debug!(lock = %req.name, position = crate::layout::count_tickets(fd).map_or(0, |n| n + 1), ticket = t - TICKET_BASE, holder = describe_holders(&doc).as_deref().unwrap_or("unknown"), "joined the line (position 1 is next); waiting for the holder");
        drop(meta);
        t
    };

    let outcome = wait_in_line(file, path, mode, slots, ticket, deadline, cancel);
    let slot = match outcome {
        Ok(Some(slot)) => slot,
        Ok(None) => {
            let _ = ofd::unlock(fd, ticket, 1);
            let holder = read_doc(file)
                .ok()
                .and_then(|d| describe_holders(&d.or_fresh()));
            return Err(busy(holder));
        }
        Err(e) => {
            let _ = ofd::unlock(fd, ticket, 1);
            return Err(cancelled(e));
        }
    };
    let granted = take_over(at, req, mode, slot, None, deadline, busy);
    // Leave the line only now: the next waiter becomes head and waits for the slot.
    let _ = ofd::unlock(fd, ticket, 1);
    granted
}

/// Waits for every predecessor in line, then for a slot. `Ok(None)` when the
/// deadline passed first.
fn wait_in_line(
    file: &File,
    path: &Path,
    mode: Mode,
    slots: u32,
    ticket: u64,
    deadline: Option<Instant>,
    cancel: Option<&CancelToken>,
) -> std::io::Result<Option<u32>> {
    let fd = file;
    // Wait for our immediate predecessor only; when it leaves (granted, gave
    // up or died), look again: there may be an earlier one still waiting.
    while let Some(pred) = greatest_ticket_below(fd, ticket)? {
        tracing::debug!(
            ahead = pred - TICKET_BASE,
            "waiting for the waiter ahead to leave the line"
        );
        if !ofd::lock_wait(fd, Kind::Read, pred, 1, deadline, cancel)? {
            return Ok(None);
        }
        ofd::unlock(fd, pred, 1)?;
    }
    tracing::debug!("first in line: waiting for a holder to release");
    match mode {
        Mode::Exclusive => {
            Ok(ofd::lock_wait(fd, Kind::Write, SLOT_BASE, 1, deadline, cancel)?.then_some(0))
        }
        Mode::Shared => {
            Ok(ofd::lock_wait(fd, Kind::Read, SLOT_BASE, 1, deadline, cancel)?.then_some(0))
        }
        Mode::Semaphore(_) => slots::wait_any_slot(file, path, slots, deadline, cancel),
    }
}

fn describe_max(max: u32) -> String {
    if max <= 1 {
        "an exclusive/shared lock (--max 1)".into()
    } else {
        format!("a semaphore with --max {max}")
    }
}

/// A one-line description of the recorded holders, for error messages.
pub(crate) fn describe_holders(doc: &LockDoc) -> Option<String> {
    let h = doc.holders.last()?;
    let mut s = format!(
        "pid {} on {}, owner {}",
        h.process.pid, h.process.host, h.owner
    );
    if let Some(op) = &h.operation {
        s.push_str(&format!(", operation '{op}'"));
    }
    s.push_str(&format!(", since {}", h.acquired_at));
    if doc.holders.len() > 1 {
        s.push_str(&format!(" and {} more", doc.holders.len() - 1));
    }
    Some(s)
}
