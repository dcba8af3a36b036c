//! What Linux and macOS share, and the platform's own parts
//! re-exported under one set of names: `ProcFd` (a process pinned and
//! watched for its exit), `Waker`, `proc_stat`, `all_pids`, `children_of`,
//! `set_subreaper`, `pipe_cloexec`, `socketpair_cloexec`, `SEND_FLAGS`,
//! `errno`, `set_environ`, `die_with_parent`, `this_program`.

#[cfg(target_os = "linux")]
pub(crate) use super::linux::*;
#[cfg(target_os = "macos")]
pub(crate) use super::macos::*;

/// `CLOCK_MONOTONIC` in nanoseconds: the same clock in every process of
/// the machine.
pub(crate) fn mono_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    u64::try_from(t.tv_sec)
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::try_from(t.tv_nsec).unwrap_or(0))
}
