//! Where a run's locks live: the baton dir (kernel locks) or a PostgreSQL
//! database (session advisory locks), behind one type, so that `run` and
//! the background holder do the same steps for both.

use std::sync::Arc;

use baton_lock::{acquire_all, BatonDir, CommandGroup, LockGuard, LockRequest};
use baton_pg::{Database, Holds};

use crate::error::RunError;

/// Where locks are kept.
#[derive(Clone, Debug, Default)]
pub enum Backend {
    /// Lock files in the baton dir: one machine.
    #[default]
    Local,
    /// A PostgreSQL database: every machine using it.
    Postgres(Arc<Database>),
}

/// Locks held by a run or a background holder.
#[derive(Debug)]
pub(crate) enum Held {
    Local(Vec<LockGuard>),
    Remote(Box<Holds>),
}

impl Held {
    /// Takes every lock of `reqs` (sorted, one deadline). On PostgreSQL,
    /// `on_lost` runs if the session ends while they are held.
    pub(crate) fn acquire(
        backend: &Backend,
        dir: &BatonDir,
        reqs: &[LockRequest],
        on_lost: impl Fn() + Send + 'static,
    ) -> Result<Held, RunError> {
        match backend {
            Backend::Local => Ok(Held::Local(acquire_all(dir, reqs)?)),
            Backend::Postgres(db) => {
                if reqs.is_empty() {
                    return Ok(Held::Local(Vec::new()));
                }
                let holds = db.acquire_all(reqs)?;
                holds.on_lost(on_lost);
                Ok(Held::Remote(Box::new(holds)))
            }
        }
    }

    /// (name, fencing token) of each lock, in name order.
    pub(crate) fn tokens(&self) -> Vec<(String, u64)> {
        match self {
            Held::Local(g) => g
                .iter()
                .map(|g| (g.name().to_string(), g.token()))
                .collect(),
            Held::Remote(h) => h
                .grants()
                .iter()
                .map(|g| (g.name.to_string(), g.token))
                .collect(),
        }
    }

    /// The run id recorded with the first lock.
    pub(crate) fn run_id(&self) -> Option<String> {
        match self {
            Held::Local(g) => g.first().map(|g| g.run_id().to_string()),
            Held::Remote(h) => h.grants().first().map(|g| g.run_id.clone()),
        }
    }

    /// Makes the locks' database session (if on PostgreSQL) a source of
    /// the guardian's fence: each heartbeat it answers vouches for the run.
    pub(crate) fn vouch_to(&self, fence: &baton_proc::Fence) {
        if let Held::Remote(h) = self {
            let source = fence.source();
            h.on_alive(move |sent| source.vouch(sent));
        }
    }

    /// Whether the locks are no longer held: the database session ended.
    pub(crate) fn is_lost(&self) -> bool {
        matches!(self, Held::Remote(h) if h.is_lost())
    }

    /// Records the command's process group with every lock (best effort).
    pub(crate) fn set_command_group(&self, group: CommandGroup) {
        match self {
            Held::Local(g) => {
                for g in g {
                    let _ = g.set_command_group(group);
                }
            }
            Held::Remote(h) => {
                if let Err(e) = h.set_command_group(group) {
                    tracing::warn!(error = %e, "cannot record the command's process group");
                }
            }
        }
    }

    /// Releases every lock, in reverse order; the first error is returned.
    pub(crate) fn release(self) -> Result<(), RunError> {
        match self {
            Held::Local(guards) => {
                let mut first = None;
                for g in guards.into_iter().rev() {
                    if let Err(e) = g.release() {
                        first.get_or_insert(e);
                    }
                }
                first.map_or(Ok(()), |e| Err(e.into()))
            }
            Held::Remote(h) => Ok(h.release()?),
        }
    }
}
