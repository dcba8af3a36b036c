//! How a newer run of a group tells an older one that it was superseded.
//!
//! Each run of a group has a doorbell ([`baton_ipc::doorbell`]) named
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
//! Windows it is a named event of the logon session. On macOS it is a
//! socket file in `<baton dir>/bells` (a baton dir too long for a socket
//! path is reached through a short link in the temporary directory); the
//! bell of a run that was killed is removed by the next run's bind.

use std::io;

use baton_ipc::doorbell::{Bells, Doorbell, DoorbellWatcher};
use baton_lock::BatonDir;

fn name(run_id: &str) -> String {
    format!("baton/run/{run_id}")
}

/// The bells of the runs of `dir`.
fn bells(dir: &BatonDir) -> Bells {
    Bells::for_dir(&dir.path().join("bells"))
}

/// The bell a run listens on.
pub(crate) struct Inbox(Doorbell);

impl Inbox {
    /// Binds the run's bell.
    pub(crate) fn open(dir: &BatonDir, run_id: &str) -> io::Result<Inbox> {
        let bells = bells(dir);
        if bells.uses_dir() {
            // Shared like the baton dir when it is (mode 2770).
            let path = dir.path().join("bells");
            baton_lock::sharing::create_dir(&path).map_err(|e| {
                io::Error::new(e.kind(), format!("cannot create {}: {e}", path.display()))
            })?;
        }
        bells.bind(&name(run_id)).map(Inbox)
    }

    /// Calls `on_message` for each ring, in a thread, until the returned
    /// watcher is closed.
    pub(crate) fn watch(self, on_message: impl Fn() + Send + 'static) -> io::Result<Watcher> {
        self.0.watch(on_message)
    }
}

/// The thread reading an inbox; `close` (or drop) ends it.
pub(crate) type Watcher = DoorbellWatcher;

/// Wakes the runs `run_ids` of `dir` (best effort: a run that has ended is
/// gone).
pub(crate) fn notify(dir: &BatonDir, run_ids: &[String]) {
    let bells = bells(dir);
    for id in run_ids {
        bells.ring(&name(id));
    }
}
