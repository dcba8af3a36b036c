//! Supervise one child command for `baton run`: its own process group, signal forwarding,
//! `SIGTERM` → grace → `SIGKILL`, a timeout, cancellation from another thread, and mapping
//! of how it ended to an exit code. Every child baton starts goes through here (the
//! commands of `baton run` and of the service, git, state filters), so each gets the
//! same guarantees; one whose input or output is data (a filter, git) has its streams
//! pumped from and into the caller's reader and writers ([`Supervisor::run_streaming`]).
//!
//! ```no_run
//! use std::time::Duration;
//! use baton_proc::RunSpec;
//!
//! let mut spec = RunSpec::new("cargo").arg("test");
//! spec.timeout = Some(Duration::from_secs(600));
//! let outcome = baton_proc::run(&spec).unwrap_or_else(|err| {
//!     eprintln!("baton: {err}");
//!     std::process::exit(err.exit_code());
//! });
//! std::process::exit(outcome.exit_code());
//! ```
//!
//! # How the child is run
//!
//! - **Its own process group.** The child is spawned with `setpgid(0, 0)`, so it leads a new
//!   group, and everything it starts (unless it deliberately leaves the group) can be stopped
//!   together with one `killpg`. Timeouts, cancellation and forwarded signals all act on the
//!   group, never on the leader alone. When the leader exits while we are terminating the
//!   group, the rest of the group is killed before the leader is reaped, while its unreaped pid
//!   still pins the group id. With [`RunSpec::new_session`] (the job service) it is spawned
//!   with `setsid` instead: it leads a session of its own (and its group), so none of its
//!   processes can join a group of the supervisor's session.
//! - **It dies with us.** Between fork and exec the child sets `PR_SET_PDEATHSIG` to
//!   `SIGKILL`, so if the supervising process dies, even by `SIGKILL`, the kernel kills the
//!   child. It then checks that `getppid()` is still the supervising process: if the parent
//!   died before the `prctl`, the death signal would never come, and the child gives up
//!   instead of running unsupervised. Linux delivers the death signal when the parent
//!   *thread* exits; [`Supervisor::run`] spawns and waits on the calling thread, which cannot
//!   exit before `run` returns. Only the leader gets this signal; the rest of its group is
//!   not covered if the supervisor is `SIGKILL`ed.
//! - **No sleep-polling.** The supervisor blocks in one `poll` on a pidfd of the child, the
//!   self-pipe of the signal handlers and the eventfd of its [`Canceller`], with a timeout
//!   that is the next deadline (the run's timeout or the end of the grace period). It wakes
//!   within microseconds of any event.
//! - **Signals are forwarded.** While the child runs, `SIGINT`, `SIGTERM`, `SIGHUP` and
//!   `SIGQUIT` received by this process are forwarded to the child's group; if the group is
//!   still alive after the grace period it is killed, and a second signal kills it at once.
//!   The handlers are removed when `run` returns, and the signals behave as before.
//! - **Only stdio is inherited.** Every descriptor this crate opens is close-on-exec, like
//!   every one the standard library opens.
//!
//! The reasons for these choices, and what they do not cover, are in the design note
//! `docs/src/design/signals.md` in baton's repository.
//!
//! # Exit codes
//!
//! [`Outcome::exit_code`] and [`ProcError::exit_code`] implement the table of
//! `docs/src/design/architecture.md`:
//! the child's own code, 128+N when it was killed by signal N, 124 when it timed out, 79 when
//! it was cancelled (superseded), 127 when the command was not found, 126 when it could not
//! be executed and 125 when baton itself failed.
//!
//! # Platforms
//!
//! Linux has every guarantee above (pidfds need Linux 5.3). macOS runs the
//! same Unix code with a kqueue where Linux has a pidfd, and without the
//! parent-death signal and the child subreaper. Windows runs the command
//! in a Job Object that only the supervisor holds, so the command's whole
//! tree dies with the supervisor, and stops it with `CTRL_BREAK_EVENT`,
//! then `TerminateJobObject`. What differs, and what is refused with
//! [`ProcError::Unsupported`], is listed in `docs/src/design/signals.md` ("Platforms").
//!
//! # Layout
//!
//! Modules import only from modules below them (no file imports from one
//! that imports it back, directly or not): `sys` (the platform seam: every
//! call that differs between Linux, macOS and Windows; inside it `stat.rs`,
//! then `linux.rs` / `macos.rs`, then `unix.rs`, then `mod.rs`), `error`,
//! `leftover`, `time`, `procfs`, `cancel` and `signals` at the bottom;
//! `identity`, `terminate`, `contain`, `terminal`, `tree` and `pidns` over
//! them; `orphans` (the runs of a shared subreaper) over `contain`; `guard`
//! over those (`guard/fence.rs`, what a guardian is started with, under
//! `guard/guardian.rs`, both under `guard.rs`); `spec` (what to run, what
//! came of it) over `guard`; then `spawn` (`spawn/prepared.rs` under
//! `spawn/clone_vm.rs`, with the error of a failed start,
//! `spawn/failed.rs`), `supervise`, `streams` and this root. On Windows, `supervise` is `supervise_windows.rs`, and the Unix
//! modules (`contain`, `orphans`, `pidns`, `procfs`, `signals`, `spawn`,
//! `terminal`, `time`, `tree`) are not built. Doorbells, asking a process
//! to exit and a process's lineage are in `baton-ipc`, over this crate.
//!
//! `unsafe` is denied but in `sys`'s platform modules, `spawn` (between
//! fork and exec) and a few functions that make one system call; each use
//! has its `SAFETY` comment.

#![deny(unsafe_code)]

mod cancel;
#[cfg(unix)]
mod contain;
mod error;
pub mod guard;
mod identity;
mod leftover;
#[cfg(unix)]
pub mod pidns;
#[cfg(unix)]
pub mod procfs;

#[cfg(target_os = "linux")]
pub mod mark;
#[cfg(unix)]
mod orphans;
#[cfg(unix)]
mod signals;
// fork or clone, then the child's set-up and exec: async-signal-safe
// calls on memory prepared before (the SAFETY comments there say why each
// is sound).
#[cfg(unix)]
#[allow(unsafe_code)]
mod spawn;
mod spec;
pub mod streams;
#[cfg(unix)]
mod supervise;
#[cfg(windows)]
#[path = "supervise_windows.rs"]
mod supervise;
mod supervisor;
mod sys;
#[cfg(unix)]
mod terminal;
mod terminate;
mod thread;
#[cfg(unix)]
mod time;
#[cfg(unix)]
mod tree;

pub use cancel::Canceller;
#[cfg(unix)]
pub use contain::{
    become_subreaper, is_subreaper, terminate_group, terminate_group_until, terminate_session,
    terminate_tree, GroupIdentity, Termination,
};
pub use error::{ProcError, EXIT_INTERNAL, EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND};
#[cfg(unix)]
pub use guard::guardian_main;
#[cfg(unix)]
pub use guard::TreeGuard;
pub use guard::{dispatch_guardian, Fence, FenceSource, GuardSpec, GUARD_ARG};
#[cfg(unix)]
pub use identity::ExitWatch;
pub use identity::ProcessId;
pub use leftover::{Leftover, LeftoverPolicy};
#[cfg(unix)]
pub use orphans::become_shared_subreaper;
#[cfg(unix)]
pub use signals::FORWARDED_SIGNALS;
pub use spec::{
    Finished, Outcome, RunSpec, Started, Stdio, StdioSpec, DEFAULT_GRACE, EXIT_CANCELLED,
    EXIT_TIMED_OUT,
};
pub use streams::{pipe, Streamed, Streams};
pub use supervisor::Supervisor;

pub use terminate::{
    terminate_process, terminate_verified, PinnedProcess, TerminateReport, KILL_WAIT,
};
pub use thread::is_main_thread;
#[cfg(unix)]
pub use tree::{ProcessTree, TreeSnapshot};

/// Whether a supervised command dies with its supervisor on this platform
/// even when the supervisor is killed outright (`SIGKILL`,
/// `TerminateProcess`): on Linux its leader does (the parent-death signal;
/// the rest of its group with a guardian, [`RunSpec::guard`]), on Windows its
/// whole tree does (the Job Object). macOS has no parent-death signal:
/// there only a guardian stops the command, so a caller that needs the
/// promise sets [`RunSpec::guard`] ([`GuardSpec::where_needed`] gives the
/// one to set; `baton doctor` can say so).
pub const DIES_WITH_SUPERVISOR: bool = cfg!(not(target_os = "macos"));

/// Windows: makes this process's standard handles not inheritable, so that
/// a child started with `std::process::Command` (which lets a child inherit
/// every inheritable handle) does not keep them open: a background process
/// that holds the pipe its starter's caller reads (`$t = baton lock acquire
/// x` in PowerShell) would keep that reader waiting for it. Streams given
/// with `Stdio::inherit` still reach the child (as duplicates).
#[cfg(windows)]
pub fn keep_standard_handles_from_children() {
    sys::uninherit_standard_handles();
}

/// Run `spec` to completion: the same as `Supervisor::new(spec.clone()).run()`.
///
/// # Errors
///
/// See [`Supervisor::run`].
pub fn run(spec: &RunSpec) -> Result<Outcome, ProcError> {
    Supervisor::new(spec.clone()).run()
}
