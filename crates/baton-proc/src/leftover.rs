//! What a run left behind: the processes still running when its command
//! exited, and what to do with them.

/// What to do with processes of the command's group that still run when the
/// command itself (the group's leader) has exited.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LeftoverPolicy {
    /// Terminate them (TERM, grace, KILL; on Windows Ctrl-Break, grace,
    /// `TerminateJobObject`) before the run ends: the default,
    /// so that nothing the command started runs beside the next holder.
    #[default]
    Terminate,
    /// Leave them running: for a command whose purpose is to start a daemon.
    /// They no longer hold anything baton gave the run.
    Leave,
}

/// A process that was still running when its run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leftover {
    /// Its pid.
    pub pid: i32,
    /// Its command name, as the kernel keeps it (at most 15 bytes; on
    /// Windows the file name of its program).
    pub command: String,
    /// It had left the command's process group (found as an orphan; never
    /// on Windows, where a Job Object holds every process of the run).
    pub escaped: bool,
}
