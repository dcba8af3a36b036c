//! What baton knows of a process ([`ProcStat`]): on Linux from
//! `/proc/<pid>/stat` (the one parser of it in baton), on macOS from
//! `proc_pidinfo`.

pub use crate::sys::ProcStat;

/// The stat fields of `pid`, if the process exists.
pub fn stat(pid: i32) -> Option<ProcStat> {
    crate::sys::proc_stat(pid)
}

/// Every process visible in `/proc` whose stat satisfies `keep`, with its pid.
pub(crate) fn scan(mut keep: impl FnMut(i32, &ProcStat) -> bool) -> Vec<(i32, ProcStat)> {
    crate::sys::all_pids()
        .into_iter()
        .filter_map(|pid| Some((pid, stat(pid)?)))
        .filter(|(pid, st)| keep(*pid, st))
        .collect()
}

/// The exited processes (zombies) that pid 1 of this PID namespace has not
/// reaped, with their command names. An init reaps every process re-parented
/// to it at once; a program that is pid 1 without being an init (a container
/// started without `--init`) never reaps those it did not start itself, and
/// they stay here until the container ends.
pub fn unreaped_by_init() -> Vec<(i32, String)> {
    scan(|_, st| st.ppid == 1 && st.exited)
        .into_iter()
        .map(|(pid, st)| (pid, st.comm))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let me = stat(std::process::id() as i32).unwrap_or_else(|| panic!("no stat"));
        assert!(me.start_time > 0);
        assert!(stat(i32::MAX).is_none());
    }
}
