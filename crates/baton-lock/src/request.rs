//! What an acquisition asks for: the mode and the request.

use crate::cancel::CancelToken;
use crate::identity::ProcessIdentity;
use crate::meta::HolderKind;
use crate::name::LockName;
use crate::wait::WaitPolicy;

/// The thread a lock is acquired for, when another thread does the waiting
/// (a binding that waits in a helper thread so that its caller stays
/// interruptible): re-entrancy is checked against this thread, and a
/// library holder's record names its OS thread (see
/// [`HolderRecord::caller_thread`](crate::HolderRecord::caller_thread)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    pub(crate) id: std::thread::ThreadId,
    pub(crate) os_thread: Option<i32>,
}

impl Caller {
    /// The calling thread.
    pub fn current() -> Caller {
        Caller {
            id: std::thread::current().id(),
            os_thread: crate::identity::current_os_thread(),
        }
    }
}

/// How a lock is shared between holders.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// One holder at a time.
    Exclusive,
    /// Any number of shared holders at a time, or one exclusive holder.
    Shared,
    /// Up to N holders at a time (N >= 1); `Semaphore(1)` is `Exclusive`.
    Semaphore(u32),
}

impl Mode {
    /// How many holders it admits at once (1 for exclusive and shared).
    pub fn slots(self) -> u32 {
        match self {
            Mode::Exclusive | Mode::Shared => 1,
            Mode::Semaphore(n) => n.max(1),
        }
    }

    /// The same mode in its canonical form (`Semaphore(1)` is `Exclusive`).
    pub fn normalized(self) -> Mode {
        match self {
            Mode::Semaphore(n) if n <= 1 => Mode::Exclusive,
            m => m,
        }
    }

    /// The mode's name as it appears in metadata and status.
    pub fn as_str(self) -> &'static str {
        match self.normalized() {
            Mode::Exclusive => "exclusive",
            Mode::Shared => "shared",
            Mode::Semaphore(_) => "semaphore",
        }
    }
}

/// What to acquire and how to describe the holder.
#[derive(Clone, Debug)]
pub struct LockRequest {
    /// The lock's name.
    pub name: LockName,
    /// Exclusive, shared or semaphore.
    pub mode: Mode,
    /// How long to wait.
    pub wait: WaitPolicy,
    /// Who the holder acts for; default `user@host`.
    pub owner: Option<String>,
    /// What the holder does, free text.
    pub operation: Option<String>,
    /// Run id to record; a new one is made if absent.
    pub run_id: Option<String>,
    /// Kind of holder process recorded in metadata.
    pub kind: HolderKind,
    /// Ends the wait early, from another thread, with [`LockError::Cancelled`](crate::LockError::Cancelled).
    pub cancel: Option<CancelToken>,
    /// The process the lock is held for, when the holder acts for another
    /// (recorded; see [`HolderRecord::acquired_for`](crate::HolderRecord::acquired_for)).
    pub acquired_for: Option<ProcessIdentity>,
    /// When an ancestor of this process holds the lock (a `baton run --lock`
    /// whose command we are part of, or a `baton lock acquire` by the script
    /// that runs us), use its hold instead of waiting for it: the guard is
    /// then [borrowed](crate::LockGuard::is_borrowed). Identity-checked (pid and
    /// start time of a live holder of a held slot), never taken from the
    /// environment.
    pub use_ancestor_hold: bool,
    /// The thread the lock is for (default: the thread that calls
    /// [`acquire`](crate::acquire)); see [`Caller`].
    pub caller: Option<Caller>,
}

impl LockRequest {
    /// An exclusive request that waits forever.
    pub fn new(name: LockName) -> LockRequest {
        LockRequest {
            name,
            mode: Mode::Exclusive,
            wait: WaitPolicy::Forever,
            owner: None,
            operation: None,
            run_id: None,
            kind: HolderKind::Library,
            cancel: None,
            acquired_for: None,
            use_ancestor_hold: false,
            caller: None,
        }
    }

    /// Uses a hold of an ancestor process instead of waiting for it (see
    /// [`LockRequest::use_ancestor_hold`]).
    pub fn use_ancestor_hold(mut self) -> Self {
        self.use_ancestor_hold = true;
        self
    }

    /// Lets `token` cancel the wait.
    pub fn cancel(mut self, token: CancelToken) -> Self {
        self.cancel = Some(token);
        self
    }

    /// Sets the mode.
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// Sets the wait policy.
    pub fn wait(mut self, wait: impl Into<WaitPolicy>) -> Self {
        self.wait = wait.into();
        self
    }

    /// Sets the owner recorded in metadata.
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }

    /// Sets the operation recorded in metadata.
    pub fn operation(mut self, operation: impl Into<String>) -> Self {
        self.operation = Some(operation.into());
        self
    }

    /// Sets the run id recorded in metadata.
    pub fn run_id(mut self, run_id: impl Into<String>) -> Self {
        self.run_id = Some(run_id.into());
        self
    }

    /// Acquires for `caller`'s thread (see [`Caller`]).
    pub fn caller(mut self, caller: Caller) -> Self {
        self.caller = Some(caller);
        self
    }

    /// Sets the holder kind recorded in metadata.
    pub fn kind(mut self, kind: HolderKind) -> Self {
        self.kind = kind;
        self
    }
}
