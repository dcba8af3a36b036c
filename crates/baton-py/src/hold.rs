//! What a `Lock` object holds now, and how a forked child lets go of its
//! copy of it (see `fork.rs`).

use baton_lock::LockGuard;

/// What a `Lock` object holds now. Its mutex is taken only with the GIL
/// held and never across a wait (see the crate's docs).
#[derive(Default)]
pub(crate) struct Hold {
    /// The grant, while held.
    pub(crate) guard: Option<LockGuard>,
    /// The process that acquired `guard`.
    pub(crate) pid: u32,
    /// A thread of process `waiting` is in `acquire` with this object.
    pub(crate) waiting: Option<u32>,
    /// The token of the current grant.
    pub(crate) token: Option<u64>,
    /// The holder before the current grant, if it ended without releasing (JSON).
    pub(crate) previous: Option<String>,
    /// How the holder before the current grant ended (`released`,
    /// `failed:<code>`, `killed:<signal>`, `died`).
    pub(crate) previous_outcome: Option<String>,
}

impl Hold {
    /// The guard if this process acquired it.
    pub(crate) fn held_here(&self) -> bool {
        self.guard.is_some() && self.pid == std::process::id()
    }

    /// In a forked child: closes the copy of a guard its parent acquired,
    /// releasing nothing (see `fork.rs`), and forgets a wait of the parent.
    pub(crate) fn forget_if_inherited(&mut self) {
        let me = std::process::id();
        if self.guard.is_some() && self.pid != me {
            if let Some(g) = self.guard.take() {
                g.close_inherited();
            }
            self.token = None;
            self.previous = None;
            self.previous_outcome = None;
        }
        if self.waiting.is_some_and(|pid| pid != me) {
            self.waiting = None;
        }
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        // A guard dropped in a forked child must not release its parent's
        // lock; in the acquiring process, dropping releases it.
        self.forget_if_inherited();
    }
}
