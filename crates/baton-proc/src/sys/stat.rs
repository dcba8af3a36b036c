//! What baton reads of a process on Linux and macOS alike ([`ProcStat`]).

/// What baton needs to know of a process, read at once: on Linux from
/// `/proc/<pid>/stat`, on macOS from `proc_pidinfo`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcStat {
    /// The command name (at most 15 bytes, as the kernel keeps it).
    pub comm: String,
    /// The state letter: R, S, D, T (stopped), Z (zombie), X, ...
    pub state: char,
    /// State Z (zombie) or X (dead): the process has exited.
    pub exited: bool,
    /// The process was killed or called `exit` and is on its way out (its
    /// files, and so its locks, are being released) but is not a zombie
    /// yet: `PF_EXITING` on Linux, `PROC_FLAG_INEXIT` on macOS. See
    /// [`ProcStat::ended`].
    pub exiting: bool,
    /// Parent pid.
    pub ppid: i32,
    /// Process group id.
    pub pgrp: i32,
    /// Session id.
    pub session: i32,
    /// Start time: clock ticks since boot on Linux, microseconds since the
    /// Unix epoch on macOS. Compare it only with start times read on the
    /// same machine.
    pub start_time: u64,
}

impl ProcStat {
    /// Whether the process has ended as a holder of anything: exited, or
    /// exiting. A killed holder's locks are freed by the kernel while it
    /// exits, before it is a zombie; whoever takes such a lock next must
    /// see its holder as gone, not as one still running (and so releasing
    /// cleanly).
    pub fn ended(&self) -> bool {
        self.exited || self.exiting
    }
}
