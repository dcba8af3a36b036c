//! A run's place in its group, from arrival to departure, as one guard.
//!
//! [`Backend::join_group`](crate::Backend) registers the run, wakes the runs it supersedes, waits for the
//! group's slot and starts; the returned [`Member`] holds the slot and, when
//! dropped on any path, releases it and removes the run from the group with
//! the event its [`End`] names.

use std::sync::Arc;

use baton_lock::{BatonDir, CommandGroup, HolderOutcome, LockError, LockGuard, WaitPolicy};
#[cfg(feature = "postgres")]
use baton_pg::{Database, GroupJoin, GroupOrder, GroupSlot, Joined as PgJoined};

use crate::control::{RunControl, StopReason};
use crate::error::RunError;
#[cfg(feature = "postgres")]
use crate::group::kind_mismatch;
use crate::group::{join, GroupEvent, GroupMode, GroupRequest, Joined, Membership, Outdated};
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
    place: Place,
    end: End,
    /// What leaving leaves for the next run on the slot; `None`: the run
    /// did nothing, the next learns what this one learned.
    outcome: Option<HolderOutcome>,
    /// A push of its command landed (recorded with how it ended).
    pushed: bool,
}

/// Where the group lives.
enum Place {
    /// In the baton dir: a document, a slot lock, a supersede inbox.
    Local {
        membership: Arc<Membership>,
        slot: Option<Box<LockGuard>>,
        watcher: Option<Watcher>,
    },
    /// On PostgreSQL: the slot's session also carries the run's row and
    /// its supersede watch; leaving releases both.
    #[cfg(feature = "postgres")]
    Remote(Option<GroupSlot>),
}

/// What joining a group ended with.
pub(crate) enum Entered {
    /// Holding the slot, started: run the command.
    Running(Box<Member>),
    /// Superseded before it could start (by this run id).
    Superseded(String),
    /// Its ordering key was older than the newest its group has seen: it
    /// never joined.
    Outdated(Outdated),
    /// Stopped by its [`RunControl`] before it could start.
    Cancelled,
}

/// Joins the group, wakes the runs this one supersedes, waits for the slot.
pub(crate) fn enter_local(
    dir: &BatonDir,
    req: &GroupRequest,
    run_id: &str,
    command: &str,
    control: &RunControl,
) -> Result<Entered, RunError> {
    let io = |op| move |source| RunError::Io { op, source };
    // Listen before registering, so a newer run's message is never missed.
    let inbox = Inbox::open(dir, run_id).map_err(io("listen for supersede messages"))?;
    let (membership, targets) = match join(dir, req, run_id, command)? {
        Joined::Member(m, targets) => (Arc::new(m), targets),
        Joined::Refused(why) => return Err(RunError::NotAdmitted(why)),
        Joined::Outdated(out) => return Ok(Entered::Outdated(out)),
    };
    let watched = Arc::clone(&membership);
    let stop = control.clone();
    let watcher = inbox.watch(move || {
        // The message only wakes us: act on the mark in the document alone.
        if let Ok(Some(by)) = watched.superseded_by() {
            stop.stop(StopReason::Superseded { by });
        }
    });
    let watcher = watcher.map_err(io("start the supersede watcher"))?;
    let mut member = Member {
        place: Place::Local {
            membership: Arc::clone(&membership),
            slot: None,
            watcher: Some(watcher),
        },
        end: End::GaveUp,
        outcome: None,
        pushed: false,
    };
    notify(dir, &targets);
    // In mode skip a run never waits: it runs now or not at all.
    let wait = match req.mode {
        GroupMode::Skip => WaitPolicy::Immediately,
        _ => req.wait,
    };
    match membership.take_slot(wait, control.waits()) {
        Ok(taken) => {
            if let Place::Local { slot, .. } = &mut member.place {
                *slot = Some(Box::new(taken));
            }
        }
        Err(RunError::Lock(LockError::Cancelled { .. })) => {
            return Ok(stopped(member, control));
        }
        Err(e) => return Err(e),
    }
    if let Some(by) = membership.start()? {
        member.end = End::Superseded(by.clone());
        return Ok(Entered::Superseded(by));
    }
    Ok(Entered::Running(Box::new(member)))
}

/// [`enter_local`] for a group on PostgreSQL: the same modes, for runs on every
/// machine using the database. A newer run's mark reaches this one while it
/// waits (its wait in the server is cancelled) or runs (a NOTIFY), and
/// stops it through `control`; so does the end of its session.
#[cfg(feature = "postgres")]
pub(crate) fn enter_remote(
    db: &Database,
    req: &GroupRequest,
    run_id: &str,
    command: &str,
    control: &RunControl,
) -> Result<Entered, RunError> {
    crate::group::check_request(req)?;
    let join = GroupJoin {
        key: req.key.clone(),
        mode: req.mode.as_str(),
        max: req.max,
        max_pending: req.max_pending,
        wait: req.wait,
        run_id: run_id.to_string(),
        command: command.to_string(),
        order: req.order.as_ref().map(|o| GroupOrder {
            kind: o.kind().as_str().to_string(),
            value: o.value(),
            label: o.text().to_string(),
        }),
    };
    let stop = control.clone();
    let joined = db.join_group(&join, &control.waits(), move |by| {
        stop.stop(StopReason::Superseded { by });
    })?;
    match joined {
        PgJoined::Running(slot) => {
            let lost = control.clone();
            slot.on_lost(move || {
                lost.stop(StopReason::LockLost);
            });
            Ok(Entered::Running(Box::new(Member {
                place: Place::Remote(Some(slot)),
                end: End::GaveUp,
                outcome: None,
                pushed: false,
            })))
        }
        PgJoined::Superseded(by) => Ok(Entered::Superseded(by)),
        PgJoined::Outdated { by, newest } => Ok(Entered::Outdated(Outdated { by, newest })),
        PgJoined::OrderMismatch { newest } => match &req.order {
            Some(order) => Err(kind_mismatch(&req.key, order, &newest.kind, &newest.label)),
            None => Err(RunError::InvalidRequest(format!(
                "group '{}' has an ordering key of kind {}",
                req.key, newest.kind
            ))),
        },
        PgJoined::Refused(why) => Err(RunError::NotAdmitted(why)),
        PgJoined::ModeMismatch { existing } => Err(RunError::GroupModeMismatch {
            key: req.key.to_string(),
            existing,
            requested: format!(
                "mode {} with --max {}",
                req.mode.as_str(),
                if req.mode == GroupMode::Queue {
                    req.max.max(1)
                } else {
                    1
                }
            ),
        }),
        PgJoined::Cancelled => match control.stop_reason() {
            Some(StopReason::Superseded { by }) => Ok(Entered::Superseded(by)),
            _ => Ok(Entered::Cancelled),
        },
    }
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
    /// The fencing token of the group's slot this run holds.
    pub(crate) fn token(&self) -> Option<u64> {
        match &self.place {
            Place::Local { slot, .. } => slot.as_ref().map(|s| s.token()),
            #[cfg(feature = "postgres")]
            Place::Remote(slot) => slot.as_ref().map(GroupSlot::token),
        }
    }

    /// Whether the previous holder of the group's slot ended without
    /// releasing it (a dead `baton run`): its work may be half done.
    pub(crate) fn previous_holder_died(&self) -> bool {
        match &self.place {
            Place::Local { slot, .. } => slot
                .as_ref()
                .is_some_and(|s| s.previous_holder_died().is_some()),
            #[cfg(feature = "postgres")]
            Place::Remote(slot) => slot
                .as_ref()
                .is_some_and(|s| s.previous_holder_died().is_some()),
        }
    }

    /// How the holder of the group's slot before this run ended.
    pub(crate) fn previous_outcome(&self) -> Option<&HolderOutcome> {
        match &self.place {
            Place::Local { slot, .. } => slot.as_ref().and_then(|s| s.previous_outcome()),
            #[cfg(feature = "postgres")]
            Place::Remote(slot) => slot.as_ref().and_then(GroupSlot::previous_outcome),
        }
    }

    /// What leaving the slot leaves for the next run (once its command ran).
    pub(crate) fn set_outcome(&mut self, outcome: HolderOutcome) {
        self.outcome = Some(outcome);
    }

    /// Records the command's process group with the slot (best effort).
    pub(crate) fn set_command_group(&self, group: CommandGroup) {
        match &self.place {
            Place::Local { slot: Some(s), .. } => {
                let _ = s.set_command_group(group);
            }
            #[cfg(feature = "postgres")]
            Place::Remote(Some(s)) => {
                if let Err(e) = s.set_command_group(group) {
                    tracing::warn!(error = %e, "cannot record the command's process group");
                }
            }
            _ => {}
        }
    }

    /// Makes the slot's database session (if on PostgreSQL) a source of
    /// the guardian's fence: each heartbeat it answers vouches for the run.
    pub(crate) fn vouch_to(&self, fence: &baton_proc::Fence) {
        #[cfg(feature = "postgres")]
        if let Place::Remote(Some(s)) = &self.place {
            let source = fence.source();
            s.on_alive(move |sent| source.vouch(sent));
        }
        #[cfg(not(feature = "postgres"))]
        let _ = fence;
    }

    /// Whether the slot was lost with its database session.
    pub(crate) fn is_lost(&self) -> bool {
        match &self.place {
            Place::Local { .. } => false,
            #[cfg(feature = "postgres")]
            Place::Remote(slot) => slot.as_ref().is_some_and(GroupSlot::is_lost),
        }
    }

    /// Sets how the run leaves the group when the guard is dropped.
    pub(crate) fn end(&mut self, end: End) {
        self.end = end;
    }

    /// Records that a push of the command landed (`pushed` in its event).
    pub(crate) fn set_pushed(&mut self, pushed: bool) {
        self.pushed = pushed;
    }

    /// Logs processes the command left behind (already terminated).
    pub(crate) fn log_leftovers(&self, detail: &str) {
        if let Place::Local { membership, .. } = &self.place {
            membership.log(GroupEvent::Leftovers, detail);
        }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        // Hand the slot on first (the next run waits for it), then the
        // bookkeeping; a wake-up that still arrives meanwhile finds the run
        // over and changes nothing.
        let (membership, slot, watcher) = match &mut self.place {
            Place::Local {
                membership,
                slot,
                watcher,
            } => (membership, slot, watcher),
            #[cfg(feature = "postgres")]
            Place::Remote(slot) => {
                let outcome = self.outcome.take();
                if let Some(Err(e)) = slot.take().map(|s| s.leave_with(outcome)) {
                    tracing::warn!(error = %e, "leaving the group on PostgreSQL");
                }
                return;
            }
        };
        if let Some(s) = slot.take() {
            let _ = match self.outcome.take() {
                Some(o) => s.release_with(o),
                None => s.release_unused(),
            };
        }
        let pushed = self.pushed;
        match &self.end {
            End::Finished(code) => {
                membership.finish(GroupEvent::Finished, Some(*code), None, pushed)
            }
            End::Superseded(by) => {
                membership.finish(GroupEvent::Superseded, None, Some(by), pushed)
            }
            End::GaveUp => membership.finish(GroupEvent::GaveUp, None, None, false),
        }
        drop(watcher.take());
    }
}
