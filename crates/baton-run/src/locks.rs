//! The locks a run or a background holder holds, on either backend
//! ([`crate::Backend::acquire`]): the same steps (token, run id, command
//! group, release) for both.

use baton_lock::{CommandGroup, HolderOutcome, HolderRecord, LockGuard};
#[cfg(feature = "postgres")]
use baton_pg::Holds;

use crate::error::RunError;

/// Locks held by a run or a background holder ([`crate::Backend::acquire`]);
/// released by [`HeldLocks::release`], or by the end of the process.
#[derive(Debug)]
#[must_use = "the locks are released when this is dropped"]
pub struct HeldLocks(Held);

#[derive(Debug)]
enum Held {
    Local(Vec<LockGuard>),
    #[cfg(feature = "postgres")]
    Remote(Box<Holds>),
}

impl HeldLocks {
    /// Locks held in the baton dir.
    pub(crate) fn local(guards: Vec<LockGuard>) -> HeldLocks {
        HeldLocks(Held::Local(guards))
    }

    /// Locks held by a database session.
    #[cfg(feature = "postgres")]
    pub(crate) fn remote(holds: Holds) -> HeldLocks {
        HeldLocks(Held::Remote(Box::new(holds)))
    }

    /// (name, fencing token) of each lock, in name order.
    pub fn tokens(&self) -> Vec<(String, u64)> {
        match &self.0 {
            Held::Local(g) => g
                .iter()
                .map(|g| (g.name().to_string(), g.token()))
                .collect(),
            #[cfg(feature = "postgres")]
            Held::Remote(h) => h
                .grants()
                .iter()
                .map(|g| (g.name.to_string(), g.token))
                .collect(),
        }
    }

    /// The run id recorded with the first lock.
    pub fn run_id(&self) -> Option<String> {
        match &self.0 {
            Held::Local(g) => g.first().map(|g| g.run_id().to_string()),
            #[cfg(feature = "postgres")]
            Held::Remote(h) => h.grants().first().map(|g| g.run_id.clone()),
        }
    }

    /// The holder before this one of the first lock whose previous holder
    /// ended without releasing it (died, or its script did), if any: what it
    /// did under the lock may be half done.
    pub fn previous_holder_died(&self) -> Option<&HolderRecord> {
        match &self.0 {
            Held::Local(g) => g.iter().find_map(LockGuard::previous_holder_died),
            #[cfg(feature = "postgres")]
            Held::Remote(h) => h.grants().iter().find_map(|g| g.previous.as_deref()),
        }
    }

    /// How the holder before this one ended (`BATON_PREVIOUS_OUTCOME`): of
    /// the first lock (in name order) whose previous holder did not simply
    /// release it, else of the first lock; `None` when no lock was granted
    /// before.
    pub fn previous_outcome(&self) -> Option<HolderOutcome> {
        let all: Vec<Option<&HolderOutcome>> = match &self.0 {
            Held::Local(g) => g.iter().map(LockGuard::previous_outcome).collect(),
            #[cfg(feature = "postgres")]
            Held::Remote(h) => h
                .grants()
                .iter()
                .map(|g| g.previous_outcome.as_ref())
                .collect(),
        };
        worst(all)
    }

    /// Makes the locks' database session (if on PostgreSQL) a source of
    /// the guardian's fence: each heartbeat it answers vouches for the run.
    pub fn vouch_to(&self, fence: &baton_proc::Fence) {
        #[cfg(feature = "postgres")]
        if let Held::Remote(h) = &self.0 {
            let source = fence.source();
            h.on_alive(move |sent| source.vouch(sent));
        }
        #[cfg(not(feature = "postgres"))]
        let _ = fence;
    }

    /// The lock files of locks held in the baton dir (none on a database),
    /// for a guardian that must keep their kernel locks held if this
    /// process dies before it has stopped what works under them (see
    /// [`baton_proc::TreeGuard`]).
    #[cfg(unix)]
    pub fn lock_files(&self) -> Vec<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        match &self.0 {
            Held::Local(g) => g.iter().map(AsFd::as_fd).collect(),
            #[cfg(feature = "postgres")]
            Held::Remote(_) => Vec::new(),
        }
    }

    /// Whether the locks are no longer held: the database session ended.
    pub(crate) fn is_lost(&self) -> bool {
        match &self.0 {
            Held::Local(_) => false,
            #[cfg(feature = "postgres")]
            Held::Remote(h) => h.is_lost(),
        }
    }

    /// Records the command's process group with every lock (best effort).
    pub(crate) fn set_command_group(&self, group: CommandGroup) {
        match &self.0 {
            Held::Local(g) => {
                for g in g {
                    let _ = g.set_command_group(group);
                }
            }
            #[cfg(feature = "postgres")]
            Held::Remote(h) => {
                if let Err(e) = h.set_command_group(group) {
                    tracing::warn!(error = %e, "cannot record the command's process group");
                }
            }
        }
    }

    /// Releases every lock, in reverse order; the first error is returned.
    ///
    /// # Errors
    ///
    /// A lock could not be released cleanly (it is released anyway when
    /// this process ends).
    pub fn release(self) -> Result<(), RunError> {
        self.let_go(
            LockGuard::release,
            #[cfg(feature = "postgres")]
            Holds::release,
        )
    }

    /// Releases every lock, leaving `outcome` for their next holders
    /// ([`LockGuard::release_with`]); `None`: nothing was done under them,
    /// each lock's next holder learns what this one learned
    /// ([`LockGuard::release_unused`]).
    ///
    /// # Errors
    ///
    /// As [`HeldLocks::release`].
    pub fn release_with(self, outcome: Option<HolderOutcome>) -> Result<(), RunError> {
        match (self.0, outcome) {
            (Held::Local(guards), o) => {
                let mut first = None;
                for g in guards.into_iter().rev() {
                    let done = match &o {
                        Some(o) => g.release_with(o.clone()),
                        None => g.release_unused(),
                    };
                    if let Err(e) = done {
                        first.get_or_insert(e);
                    }
                }
                first.map_or(Ok(()), |e| Err(e.into()))
            }
            #[cfg(feature = "postgres")]
            (Held::Remote(h), Some(o)) => Ok(h.release_with(o)?),
            #[cfg(feature = "postgres")]
            (Held::Remote(h), None) => Ok(h.release_unused()?),
        }
    }

    /// Lets go of every lock as a holder that died would (see
    /// [`LockGuard::abandon`]): the next holder learns that the previous one
    /// ended without releasing. For a background holder whose script ended
    /// without `baton lock release` (on PostgreSQL too: its rows stay for
    /// the next grant to settle).
    ///
    /// # Errors
    ///
    /// As [`HeldLocks::release`].
    pub fn abandon(self) -> Result<(), RunError> {
        self.let_go(
            LockGuard::abandon,
            #[cfg(feature = "postgres")]
            Holds::abandon,
        )
    }

    /// Lets go of every lock with `local` (in reverse order) or, on
    /// PostgreSQL, with `remote`; the first error is returned.
    fn let_go(
        self,
        local: fn(LockGuard) -> Result<(), baton_lock::LockError>,
        #[cfg(feature = "postgres")] remote: fn(Holds) -> Result<(), baton_pg::PgError>,
    ) -> Result<(), RunError> {
        match self.0 {
            Held::Local(guards) => {
                let mut first = None;
                for g in guards.into_iter().rev() {
                    if let Err(e) = local(g) {
                        first.get_or_insert(e);
                    }
                }
                first.map_or(Ok(()), |e| Err(e.into()))
            }
            #[cfg(feature = "postgres")]
            Held::Remote(h) => Ok(remote(*h)?),
        }
    }
}

/// The first outcome that is not `released`, else the first one.
pub(crate) fn worst(all: Vec<Option<&HolderOutcome>>) -> Option<HolderOutcome> {
    all.iter()
        .flatten()
        .find(|o| o.is_bad())
        .or_else(|| all.iter().flatten().next())
        .map(|o| (*o).clone())
}
