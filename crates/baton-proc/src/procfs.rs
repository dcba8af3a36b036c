//! Reading `/proc/<pid>/stat`: the one parser of it in baton.

use std::fs;

/// `PF_EXITING` of the kernel's per-task flags (`include/linux/sched.h`):
/// set when a task starts to exit, before its files are closed.
const PF_EXITING: u64 = 0x4;

/// The fields of `/proc/<pid>/stat` baton needs, read at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcStat {
    /// The command name (field 2, at most 15 bytes, as the kernel keeps it).
    pub comm: String,
    /// The state letter (field 3): R, S, D, T (stopped), Z (zombie), X, ...
    pub state: char,
    /// State Z (zombie) or X (dead): the process has exited.
    pub exited: bool,
    /// The kernel flag `PF_EXITING` (field 9): the process was killed or
    /// called `exit` and is on its way out (its files, and so its locks,
    /// are being released) but is not a zombie yet. See [`ProcStat::ended`].
    pub exiting: bool,
    /// Parent pid (field 4).
    pub ppid: i32,
    /// Process group id (field 5).
    pub pgrp: i32,
    /// Session id (field 6).
    pub session: i32,
    /// Start time in clock ticks since boot (field 22).
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

/// The stat fields of `pid`, if the process exists.
pub fn stat(pid: i32) -> Option<ProcStat> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse(&text)
}

fn parse(text: &str) -> Option<ProcStat> {
    // The command name is in parentheses and may itself contain spaces or
    // parentheses: the fields after it start after the last ')'.
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_string();
    let mut fields = text.get(close + 1..)?.split_whitespace();
    let state = fields.next()?.chars().next()?; // field 3
    let exited = matches!(state, 'Z' | 'X');
    let ppid = fields.next()?.parse().ok()?; // field 4
    let pgrp = fields.next()?.parse().ok()?; // field 5
    let session = fields.next()?.parse().ok()?; // field 6
    let flags: u64 = fields.nth(2)?.parse().ok()?; // field 9
    let start_time = fields.nth(12)?.parse().ok()?; // field 22
    Some(ProcStat {
        comm,
        state,
        exited,
        exiting: flags & PF_EXITING != 0,
        ppid,
        pgrp,
        session,
        start_time,
    })
}

/// Every process visible in `/proc` whose stat satisfies `keep`, with its pid.
pub(crate) fn scan(mut keep: impl FnMut(i32, &ProcStat) -> bool) -> Vec<(i32, ProcStat)> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
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
    fn parses_names_with_spaces_and_parentheses() {
        let line = "42 (a) (b c)) S 7 42 42 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 123456 0 0";
        let st = parse(line).unwrap_or_else(|| panic!("unparsed"));
        assert_eq!(st.comm, "a) (b c)");
        assert_eq!((st.ppid, st.pgrp, st.session), (7, 42, 42));
        assert_eq!(st.start_time, 123456);
        assert_eq!(st.state, 'S');
        assert!(!st.exited && !st.exiting && !st.ended());
    }

    #[test]
    fn a_process_with_pf_exiting_has_ended() {
        // A SIGKILLed process between the kill and becoming a zombie: state R
        // (or D), flags 0x400100 plus PF_EXITING (0x4).
        let line = "42 (baton) R 7 42 42 0 -1 4194564 0 0 0 0 0 0 0 0 20 0 1 0 123456 0 0";
        let st = parse(line).unwrap_or_else(|| panic!("unparsed"));
        assert!(!st.exited && st.exiting && st.ended());
        assert_eq!(st.start_time, 123456);
    }

    #[test]
    fn reads_this_process() {
        let me = stat(std::process::id() as i32).unwrap_or_else(|| panic!("no stat"));
        assert!(me.start_time > 0);
        assert!(stat(i32::MAX).is_none());
    }
}
