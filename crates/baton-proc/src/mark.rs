//! An inherited mark on a process, set from outside it: how the holder of
//! `baton lock acquire` finds everything a script starts after taking the
//! lock, even a child that the script forks just before it exits (the
//! child is re-parented before anyone can look it up from the script).
//!
//! The mark is the soft limit of `RLIMIT_LOCKS` of the script, set to a
//! value of our own (a tag in the top 16 bits, 48 random bits). Linux has
//! not enforced that limit since 2.4.25, so the value changes nothing the
//! script does; resource limits are inherited across `fork` and `execve`,
//! and survive `setsid`, a double fork and `nohup`. A process may set the
//! limits of another process of the same user (`prlimit(2)`: the target's
//! real, effective and saved ids equal the caller's real ids), so this
//! needs no privilege. The holder sets it before it reports the lock held,
//! so every process the script starts from then on carries it.
//!
//! Limits: a process that sets its own `RLIMIT_LOCKS` (none that we know)
//! loses the mark; a setuid program does not carry one we can read; the
//! script keeps the value after the hold (`ulimit -x` shows it). A script
//! that takes a second hold gets a new mark: the first hold then finds
//! what the script starts after the second `acquire` only while it can
//! follow it in the process tree.

use rustix::process::Pid;

use crate::procfs::{self, ProcStat};

/// The top 16 bits of every mark ("bt").
const TAG: u64 = 0x6274 << 48;
const TAG_MASK: u64 = 0xffff << 48;

/// A mark set on a process ([`mark`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mark(pub u64);

/// The soft and hard `RLIMIT_LOCKS` of `pid`, if it may be read.
#[allow(unsafe_code)] // prlimit64(2): the SAFETY comment below
fn limit(pid: i32) -> Option<(u64, u64)> {
    let mut old = libc::rlimit64 {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: prlimit64 with a null new limit only reads `pid`'s limit into
    // `old`, a valid, exclusively borrowed rlimit64.
    let rc = unsafe { libc::prlimit64(pid, libc::RLIMIT_LOCKS, std::ptr::null(), &mut old) };
    (rc == 0).then_some((old.rlim_cur, old.rlim_max))
}

/// Sets `pid`'s soft `RLIMIT_LOCKS` to `value` (hard limit unchanged).
#[allow(unsafe_code)] // prlimit64(2): the SAFETY comment below
fn set_limit(pid: i32, value: u64, hard: u64) -> bool {
    let new = libc::rlimit64 {
        rlim_cur: value,
        rlim_max: hard,
    };
    // SAFETY: prlimit64 reads `new`, a valid rlimit64; the old limit is not
    // asked for (null).
    let rc = unsafe { libc::prlimit64(pid, libc::RLIMIT_LOCKS, &new, std::ptr::null_mut()) };
    rc == 0
}

/// Marks process `pid` (if it still is the process that started at
/// `start_time`) with a new mark its future children inherit. `None` when
/// it cannot be marked (another user's process, a hard limit below any
/// mark, the process is gone).
pub fn mark(pid: i32, start_time: u64) -> Option<Mark> {
    Pid::from_raw(pid)?;
    let (_, hard) = limit(pid)?;
    let value = TAG | (random() & !TAG_MASK);
    if value > hard || !set_limit(pid, value, hard) {
        return None;
    }
    // Checked after setting: if the pid was reused meanwhile, the mark is
    // on a process that is not the script's, and is not used.
    procfs::stat(pid)
        .filter(|st| st.start_time == start_time && !st.exited)
        .map(|_| Mark(value))
}

/// The running processes carrying `mark` that started no earlier than
/// `since` (clock ticks since boot), with their stat; never this process.
pub fn marked(mark: Mark, since: u64) -> Vec<(i32, ProcStat)> {
    let me = std::process::id() as i32;
    procfs::scan(|pid, st| {
        pid != me
            && !st.exited
            && st.start_time >= since
            && limit(pid).is_some_and(|(soft, _)| soft == mark.0)
    })
}

/// 64 bits that differ between marks set at once by different holders.
fn random() -> u64 {
    let mut buf = [0u8; 8];
    if rustix::rand::getrandom(&mut buf, rustix::rand::GetRandomFlags::empty())
        .is_ok_and(|n| n == 8)
    {
        return u64::from_ne_bytes(buf);
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos ^ (u64::from(std::process::id()) << 32)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test

    use super::*;
    use std::process::Command;

    /// A child marked after it started passes the mark to a grandchild that
    /// it starts later and that calls `setsid`; an unmarked process does not
    /// carry it.
    #[test]
    fn a_mark_reaches_what_the_marked_process_starts_later() {
        let mut child = Command::new("sh")
            .args(["-c", "read _; setsid sleep 30 & echo $!; wait"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let start = procfs::stat(pid).unwrap().start_time;
        let m = mark(pid, start).expect("marked");
        assert!(marked(m, start).iter().any(|(p, _)| *p == pid));
        use std::io::{BufRead, Write};
        writeln!(child.stdin.as_mut().unwrap()).unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        let grandchild: i32 = line.trim().parse().unwrap();
        let found: Vec<i32> = marked(m, start).into_iter().map(|(p, _)| p).collect();
        assert!(found.contains(&grandchild), "{found:?} lacks {grandchild}");
        assert!(!found.contains(&(std::process::id() as i32)));
        assert!(mark(pid, start + 1).is_none(), "another start time");
        let _ = rustix::process::kill_process(
            Pid::from_raw(grandchild).unwrap(),
            rustix::process::Signal::KILL,
        );
        child.wait().unwrap();
    }
}
