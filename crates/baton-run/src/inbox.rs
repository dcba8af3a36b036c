//! How a newer run of a group tells an older one that it was superseded.
//!
//! Each run of a group has a doorbell ([`baton_proc::doorbell`]) named
//! `baton/run/<run id>`, bound before it registers in the group document.
//! The newer run marks the older one in the document (the truth) and then
//! rings its bell (the wake-up); the older run's watcher thread re-reads its
//! mark and acts only on that, so a stray or forged ring changes nothing. No
//! process signal is involved, so a process can host any number of runs,
//! and a pid that was reused is never hit.
//!
//! On Linux the bell is a datagram socket in the abstract namespace, which
//! belongs to a network namespace: a run in another network namespace (a
//! container with its own network) is not woken; it still sees its mark
//! when it gets the slot, and never runs after being superseded. On
//! Windows it is a named event of the logon session. macOS has no such
//! bell: a group run there fails to start, saying so.

use std::io;

use baton_proc::doorbell::{self, Doorbell, DoorbellWatcher};

fn name(run_id: &str) -> String {
    format!("baton/run/{run_id}")
}

/// The bell a run listens on.
pub(crate) struct Inbox(Doorbell);

impl Inbox {
    /// Binds the run's bell.
    pub(crate) fn open(run_id: &str) -> io::Result<Inbox> {
        Doorbell::bind(&name(run_id)).map(Inbox)
    }

    /// Calls `on_message` for each ring, in a thread, until the returned
    /// watcher is closed.
    pub(crate) fn watch(self, on_message: impl Fn() + Send + 'static) -> io::Result<Watcher> {
        self.0.watch(on_message)
    }
}

/// The thread reading an inbox; `close` (or drop) ends it.
pub(crate) type Watcher = DoorbellWatcher;

/// Wakes the runs `run_ids` (best effort: a run that has ended is gone).
pub(crate) fn notify(run_ids: &[String]) {
    for id in run_ids {
        doorbell::ring(&name(id));
    }
}
