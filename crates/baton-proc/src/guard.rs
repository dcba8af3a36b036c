//! The guardian: a small local process that stops a command's whole process
//! group when its supervisor dies or stalls.
//!
//! A supervisor that holds its locks on a database shared by several
//! machines cannot rely on the next holder to stop what it leaves behind:
//! the next holder may run on another machine. And a supervisor that is
//! stopped (`SIGSTOP`, a debugger, a frozen container) keeps its command
//! running while its database session ends and another machine takes over.
//! So, when asked ([`RunSpec::guard`](crate::RunSpec::guard)), the
//! supervisor starts a guardian before the command: a separate process
//! (the caller's own program, executed with [`GUARD_ARG`], which calls
//! [`guardian_main`]) in its own process group, connected by a socket whose
//! only other end the supervisor holds.
//!
//! - Before the command executes, the supervisor *arms* the guardian with
//!   the command's process group (pgid, leader start time, session): the
//!   command never runs unguarded.
//! - **The supervisor dies** (even by `SIGKILL`): the guardian reads end of
//!   file and terminates the whole recorded group at once (`SIGKILL`,
//!   identity-checked as [`terminate_group`](crate::terminate_group) does),
//!   not only the leader that the parent-death signal reaches.
//! - **The supervisor stalls**: the guardian is a dead-man's switch. The
//!   supervisor's callers *vouch* for it through a [`Fence`]: each proof of
//!   liveness (a database heartbeat answered) extends the deadline to the
//!   moment the proof was *sent* plus the fence's bound. When the deadline
//!   passes without a new proof, the guardian kills the group, whatever the
//!   supervisor does. Deadlines are `CLOCK_MONOTONIC` instants, shared by
//!   every process of the machine.
//! - **The command ends normally**: the supervisor disarms the guardian
//!   once the command and its leftovers are gone; it exits, and is reaped
//!   off the supervisor's thread (a short command must not wait for its
//!   guardian's start-up). A guardian that fences says "F" on the socket
//!   before it kills, which is how the supervisor learns it.
//!
//! Another machine that takes over after this one's session ended waits
//! longer than the fence's bound after seeing the session end (baton-pg's
//! settle wait), so the command is stopped before anyone else starts: the
//! session was alive when the last proof was sent, so it ended after that.
//!
//! Not covered: processes that left the command's process group (their own
//! session) after their supervisor died, and a whole machine paused longer
//! than the bound (the guardian is paused too): fencing tokens cover that.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

mod fence;
#[cfg(unix)]
mod guardian;

pub use fence::{
    Fence, FenceSource, GuardSpec, GUARD_ARG, GUARD_DISARMED, GUARD_FENCED, GUARD_ORPHANED,
};
#[cfg(unix)]
pub use guardian::guardian_main;
#[cfg(unix)]
pub(crate) use guardian::Guardian;

/// A guardian for a process tree that this process does not parent: a
/// script that holds a lock through a background holder (`baton lock
/// acquire`). The script is not the holder's child, so no parent-death
/// signal ties them; the guardian does. It follows what the script starts
/// (as [`ProcessTree`](crate::ProcessTree) does) and, if this process dies
/// or stops vouching through the spec's [`Fence`] in time, kills the script
/// and everything it started at once. Descriptors handed to
/// [`TreeGuard::start`] stay open in the guardian until it exits: a lock
/// file's kernel locks (open file description locks, shared by the
/// duplicate) then stay held until the tree is stopped, so the next holder
/// never starts beside it. Dropping it, or [`TreeGuard::disarm`], lets the
/// guardian exit without touching anything; release the locks first.
#[cfg(unix)]
pub struct TreeGuard {
    guardian: Guardian,
}

#[cfg(unix)]
impl std::fmt::Debug for TreeGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TreeGuard").finish_non_exhaustive()
    }
}

#[cfg(unix)]
impl TreeGuard {
    /// Starts a guardian for the tree this process follows (its root, and
    /// what the root starts), keeping `keep` open in the guardian (at most
    /// 16). It does not wait for the guardian's start: the guardian follows
    /// as `tree` does from the moment it has started (see
    /// [`ProcessTree::follow_as`](crate::ProcessTree::follow_as)), and the
    /// descriptors in flight keep their files open meanwhile.
    ///
    /// # Errors
    ///
    /// The guardian could not be started or armed: nothing guards the tree.
    pub fn start(
        spec: &GuardSpec,
        tree: &crate::ProcessTree,
        keep: &[std::os::fd::BorrowedFd<'_>],
    ) -> Result<TreeGuard, crate::ProcError> {
        // Not the caller's stderr: a script reading `$(baton lock acquire
        // L 2>&1)` waits for its end of file.
        let guardian = Guardian::spawn_with(spec, std::process::Stdio::null())?;
        guardian.arm_tree(&tree.snapshot(), keep)?;
        Ok(TreeGuard { guardian })
    }

    /// A descriptor that becomes readable once the guardian has exited
    /// (killed, say): poll it, and start another, so that the tree never
    /// goes unguarded. `None` where it cannot be watched.
    pub fn exit_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        self.guardian.pidfd().map(AsFd::as_fd)
    }

    /// Lets the guardian exit without stopping anything (the hold ended and
    /// its locks are released). Returns whether it had already stopped the
    /// tree because this process stopped vouching in time.
    pub fn disarm(self) -> bool {
        self.guardian.finish()
    }
}

impl GuardSpec {
    /// The guardian a command needs so that it dies with its supervisor
    /// where the system does not see to it: on macOS, which has no
    /// parent-death signal ([`DIES_WITH_SUPERVISOR`](crate::DIES_WITH_SUPERVISOR)
    /// is false), this program as a guardian without a fence (only the
    /// supervisor's death stops the command) — if this program serves as
    /// one ([`dispatch_guardian`] was called in its `main`); `None`
    /// elsewhere, and in a program that does not (there the command
    /// outlives a supervisor killed outright).
    pub fn where_needed() -> Option<GuardSpec> {
        (!crate::DIES_WITH_SUPERVISOR && SERVES_AS_GUARDIAN.load(Ordering::Relaxed))
            .then(|| GuardSpec::this_program(Fence::new(Duration::ZERO)))
    }
}

/// Set by [`dispatch_guardian`]: this program runs [`guardian_main`] when
/// executed with [`GUARD_ARG`].
static SERVES_AS_GUARDIAN: AtomicBool = AtomicBool::new(false);

/// For the `main` of a program whose supervised commands may need a
/// guardian, first thing: when this process was executed as one (its first
/// argument is [`GUARD_ARG`], on unix) runs it to the end and returns its
/// exit code; otherwise records that this program serves as a guardian
/// ([`GuardSpec::where_needed`]) and returns `None`.
pub fn dispatch_guardian() -> Option<i32> {
    #[cfg(unix)]
    if std::env::args_os().nth(1).as_deref() == Some(std::ffi::OsStr::new(GUARD_ARG)) {
        return Some(guardian_main());
    }
    SERVES_AS_GUARDIAN.store(true, Ordering::Relaxed);
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The only test that touches the process-wide flag.
    #[test]
    fn a_guardian_is_needed_without_a_parent_death_signal_from_a_program_that_serves_as_one() {
        assert_eq!(GuardSpec::where_needed(), None, "before dispatch_guardian");
        assert_eq!(dispatch_guardian(), None, "not executed as a guardian");
        let needed = GuardSpec::where_needed();
        assert_eq!(needed.is_some(), !crate::DIES_WITH_SUPERVISOR);
        if let Some(spec) = needed {
            assert_eq!(spec.fence.bound(), Duration::ZERO);
            assert_eq!(spec.program, crate::sys::this_program());
        }
    }
}
