//! `baton git push`'s queue on the lock backend: with PostgreSQL, pushes to
//! one remote branch from every machine using the database wait in one line
//! (a lock of the same name `baton-git` would take in a baton dir), so 20
//! pushers on 20 machines land 20 commits instead of racing each other into
//! the retry limit.

use std::sync::Arc;

use baton_git::PushQueue;
#[cfg(feature = "postgres")]
use baton_git::QueueError;
#[cfg(feature = "postgres")]
use baton_lock::LockRequest;
#[cfg(feature = "postgres")]
use baton_pg::{Database, PgError};

use crate::Backend;

impl Backend {
    /// The push queue of this backend when other machines share it
    /// (PostgreSQL); `None` for the baton dir, where `baton-git` queues in
    /// the remote's own place on this machine.
    pub fn push_queue(&self) -> Option<Arc<dyn PushQueue>> {
        match self {
            Backend::Local(_) => None,
            #[cfg(feature = "postgres")]
            Backend::Postgres(db) => Some(Arc::new(SharedQueue(Arc::clone(db)))),
        }
    }
}

/// Pushes wait for a session lock on the database.
#[cfg(feature = "postgres")]
struct SharedQueue(Arc<Database>);

#[cfg(feature = "postgres")]
impl std::fmt::Debug for SharedQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PostgreSQL")
    }
}

#[cfg(feature = "postgres")]
impl PushQueue for SharedQueue {
    fn take(&self, lock: &LockRequest) -> Result<Box<dyn Send>, QueueError> {
        match self.0.acquire_all(std::slice::from_ref(lock)) {
            // A session lost while pushing leaves the push to the rebase
            // and retry that handles pushers outside the line.
            Ok(holds) => Ok(Box::new(holds)),
            Err(PgError::Lock(e)) => Err(QueueError::Lock(e)),
            Err(e) => Err(QueueError::Unavailable(baton_lock::one_line(&e))),
        }
    }
}
