//! Named locks that never go stale.
//!
//! A lock is a kernel byte-range lock (an open-file-description lock) on a
//! file in the baton dir. The kernel releases it the instant its holder dies,
//! even by SIGKILL, so a crash never leaves a stale lock and recovery needs no
//! TTL. Waiters line up FIFO with tickets and each blocks in the kernel on its
//! predecessor only. Every grant gets a fencing token larger than any before.
//! Holder metadata (pid, start time, boot id, host, owner, operation, run id,
//! time, token) is written into the lock file for people and tools, and never
//! trusted for exclusion. The protocol and its reasoning are in
//! `docs/src/design/locking.md` in baton's repository.
//!
//! Path reservations (paths and globs of one repository, for agents and
//! scripts that share it) are a lock manager on top of these locks: the
//! [`reserve`] module, described in `docs/src/design/reservations.md`.
//!
//! Linux, macOS and Windows: OFD locks on Linux and macOS (checked at run
//! time on macOS, where they are a private interface), `LockFileEx` ranges on
//! Windows; every platform call is in `src/sys`, and what each system lacks
//! is listed in `docs/src/design/locking.md`, "Platforms".
//!
//! ```no_run
//! use std::time::Duration;
//! use baton_lock::{acquire, BatonDir, LockRequest, Mode};
//!
//! let dir = BatonDir::resolve(None)?;
//! let req = LockRequest::new("memory/tasks.json".parse()?)
//!     .mode(Mode::Exclusive)
//!     .wait(Duration::from_secs(5))
//!     .operation("update tasks");
//! let guard = acquire(&dir, &req)?;
//! // ... critical section; pass guard.token() to stores that check fencing ...
//! guard.release()?;
//! # Ok::<(), baton_lock::LockError>(())
//! ```

#![deny(unsafe_code)]

mod cancel;
mod diagnose;
mod dir;
mod error;
// A lock word and `UnsafeCell`s that a forked child never finds held: the
// SAFETY comments there say why each access is exclusive.
#[allow(unsafe_code)]
mod fork_safe;
mod grant;
mod identity;
mod kernel_holders;
mod layout;
mod lock;
mod meta;
mod meta_lock;
mod name;
mod ofd;
mod outcome;
mod redact;
mod reentrant;
mod replaced;
mod request;
pub mod reserve;
pub mod sharing;
mod slots;
mod status;
mod sys;
mod wait;

pub use cancel::CancelToken;
pub use diagnose::{
    filesystem, free_space, inotify, probe_locks, Filesystem, FsClass, Inotify, LockProbe, Space,
};
pub use dir::{git_common_dir, previous_default, user_location, BatonDir, DirRule, Sharing};
pub use error::{one_line, LockError};
pub use identity::{
    ancestors, boot_id, default_owner, hostname, new_run_id, parent_of, start_time,
    thread_of_ancestor, Liveness, ProcessIdentity, Sighting,
};
pub use kernel_holders::KernelHolder;
pub use lock::{acquire, acquire_all, plan_all, LockGuard};
pub use meta::{CommandGroup, HolderKind, HolderRecord, LockDoc};
pub use name::{LockName, MAX_NAME_LEN};
pub use outcome::{BadOutcome, HolderOutcome, SlotOutcome};
pub use redact::redact;
pub use request::{Caller, LockRequest, Mode};
pub use status::{held_locks_in, list, status, Content, HolderInfo, LockStatus};
pub use wait::WaitPolicy;
