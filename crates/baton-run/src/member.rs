//! A run's place in its group, from arrival to departure, as one guard.
//!
//! [`enter`] registers the run, wakes the runs it supersedes, waits for the
//! group's slot and starts; the returned [`Member`] holds the slot and, when
//! dropped on any path, releases it and removes the run from the group with
//! the event its [`End`] names.

use std::sync::Arc;

use baton_lock::{BatonDir, LockError, LockGuard, WaitPolicy};

use crate::control::{RunControl, StopReason};
use crate::error::RunError;
use crate::group::{join, GroupEvent, GroupMode, GroupRequest, Joined, Membership};
use crate::inbox::{notify, Inbox, Watcher};

/// How a member leaves its group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum End {
    /// Its command ran and ended with this exit code.
    Finished(i32),
    /// A newer run superseded it.
    Superseded(String),
    /// It leaves without having run (the default, for every early return).
    GaveUp,
}

/// A registered run; see the module documentation.
pub(crate) struct Member {
    membership: Arc<Membership>,
    slot: Option<LockGuard>,
    watcher: Option<Watcher>,
    end: End,
}

/// What [`enter`] ended with.
pub(crate) enum Entered {
    /// Holding the slot, started: run the command.
    Running(Box<Member>),
    /// Superseded before it could start (by this run id).
    Superseded(String),
    /// Stopped by its [`RunControl`] before it could start.
    Cancelled,
}

/// Joins the group, wakes the runs this one supersedes, waits for the slot.
pub(crate) fn enter(
    dir: &BatonDir,
    req: &GroupRequest,
    run_id: &str,
    command: &str,
    control: &RunControl,
) -> Result<Entered, RunError> {
    let io = |op| move |source| RunError::Io { op, source };
    // Listen before registering, so a newer run's message is never missed.
    let inbox = Inbox::open(run_id).map_err(io("listen for supersede messages"))?;
    let (membership, targets) = match join(dir, req, run_id, command)? {
        Joined::Member(m, targets) => (Arc::new(m), targets),
        Joined::Refused(why) => return Err(RunError::NotAdmitted(why)),
    };
    let watched = Arc::clone(&membership);
    let stop = control.clone();
    let watcher = inbox.watch(move || {
        // The message only wakes us: act on the mark in the document alone.
        if let Ok(Some(by)) = watched.superseded_by() {
            stop.stop(StopReason::Superseded { by });
        }
    });
    let mut member = Member {
        membership,
        slot: None,
        watcher: None,
        end: End::GaveUp,
    };
    member.watcher = Some(watcher.map_err(io("start the supersede watcher"))?);
    notify(&targets);
    // In mode skip a run never waits: it runs now or not at all.
    let wait = match req.mode {
        GroupMode::Skip => WaitPolicy::Immediately,
        _ => req.wait,
    };
    match member.membership.take_slot(wait, control.waits()) {
        Ok(slot) => member.slot = Some(slot),
        Err(RunError::Lock(LockError::Cancelled { .. })) => {
            return Ok(stopped(member, control));
        }
        Err(e) => return Err(e),
    }
    if let Some(by) = member.membership.start()? {
        member.end = End::Superseded(by.clone());
        return Ok(Entered::Superseded(by));
    }
    Ok(Entered::Running(Box::new(member)))
}

/// The member was stopped before it ran; it leaves as it says why.
pub(crate) fn stopped(mut member: Member, control: &RunControl) -> Entered {
    match control.stop_reason() {
        Some(StopReason::Superseded { by }) => {
            member.end = End::Superseded(by.clone());
            Entered::Superseded(by)
        }
        _ => Entered::Cancelled,
    }
}

impl Member {
    /// The group's slot this run holds.
    pub(crate) fn slot(&self) -> Option<&LockGuard> {
        self.slot.as_ref()
    }

    /// Sets how the run leaves the group when the guard is dropped.
    pub(crate) fn end(&mut self, end: End) {
        self.end = end;
    }

    /// Logs processes the command left behind (already terminated).
    pub(crate) fn log_leftovers(&self, detail: &str) {
        self.membership.log(GroupEvent::Leftovers, detail);
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        // Hand the slot on first (the next run waits for it), then the
        // bookkeeping; a wake-up that still arrives meanwhile finds the run
        // over and changes nothing.
        drop(self.slot.take());
        match &self.end {
            End::Finished(code) => self
                .membership
                .finish(GroupEvent::Finished, Some(*code), None),
            End::Superseded(by) => self
                .membership
                .finish(GroupEvent::Superseded, None, Some(by)),
            End::GaveUp => self.membership.finish(GroupEvent::GaveUp, None, None),
        }
        drop(self.watcher.take());
    }
}
