//! Holds taken for shell scripts by `baton lock acquire`, seen from
//! outside the background holder that keeps them: which process a hold is
//! for ([`caller_to_watch`]), and how a hold ends when someone else asks —
//! [`Backend::release_held`](crate::Backend::release_held) (the holder lets
//! go) and [`Backend::break_lock`](crate::Backend::break_lock) (the holder,
//! and the script it holds for, are stopped).
//!
//! The holder itself (`baton __hold`: a detached process that takes the
//! lock through [`Backend::acquire`](crate::Backend::acquire), reports the
//! token and waits for release, its `--ttl` or its caller's exit) is a
//! process of the command-line tool, which owns its signal handling and
//! exit codes; this library installs no signal handler.

use std::path::Path;

use baton_lock::start_time;

mod stop;
pub use stop::{BreakReport, BrokenHolder, ReleaseReport};

/// The process whose exit should release a lock taken by `baton lock
/// acquire`, with its start time: the caller, i.e. the parent process —
/// except inside a command substitution such as `T=$(baton lock acquire x ||
/// exit 1)` or `T=$(baton lock acquire x --json | jq -r .token)`, where the
/// parent is a short-lived subshell. A subshell of a command substitution
/// is a fork of the script's shell (same command line, no exec) that writes
/// into a pipe its parent reads, so we walk up past every such ancestor. A
/// program whose output its parent captures (`OUT=$(./step.sh)`, an agent's
/// `subprocess.run(..., capture_output=True)`) is a program of its own, not
/// a subshell, and is watched; so is a script piped elsewhere (`| tee`).
/// Wrappers that fork the command and wait for it (`timeout`, `xargs`) are
/// walked past too: they end with `acquire`, not with the script. Telling a
/// subshell or a wrapper reads `/proc`: on macOS and Windows the caller is
/// the parent process (on Windows a shell forks no subshells).
pub fn caller_to_watch() -> Option<(i32, u64)> {
    let mut pid = baton_lock::parent_of(std::process::id() as i32).filter(|p| *p > 0)?;
    for _ in 0..16 {
        let Some(parent) = baton_lock::parent_of(pid).filter(|p| *p > 1) else {
            break;
        };
        if !(is_substitution_subshell(pid, parent) || is_forking_wrapper(pid)) {
            break;
        }
        pid = parent;
    }
    Some((pid, start_time(pid)?))
}

/// The processes a `baton lock release` without `--token` speaks for: the
/// script as [`caller_to_watch`] finds it, and the scripts whose forked
/// subshells it is in (`( work; baton lock release x; cleanup ) &` releases
/// the hold of the script that forked the subshell), and this process itself:
/// a shell runs the last command of a subshell in the subshell's own process
/// (`( T=$(baton lock acquire x); work; baton lock release x ) &`, where the
/// hold was taken for the subshell, which has become `release`). Without
/// the last two, such a release was refused as "not for this script",
/// depending on where in the subshell it stood.
pub fn callers_of_release() -> Vec<(i32, u64)> {
    let me = std::process::id() as i32;
    let mut out: Vec<(i32, u64)> = start_time(me).map(|s| (me, s)).into_iter().collect();
    let Some(mut caller) = caller_to_watch() else {
        return out;
    };
    out.push(caller);
    for _ in 0..16 {
        let Some(parent) = baton_lock::parent_of(caller.0).filter(|p| *p > 1) else {
            break;
        };
        match start_time(parent) {
            Some(start) if is_fork_of(caller.0, parent) => {
                caller = (parent, start);
                out.push(caller);
            }
            _ => break,
        }
    }
    out
}

/// `pid` is a fork of `parent` that has not executed another program: the
/// same command line and the same start of the stack (`exec` places the
/// stack anew, at a random address).
fn is_fork_of(pid: i32, parent: i32) -> bool {
    let cmdline = |p: i32| std::fs::read(format!("/proc/{p}/cmdline")).ok();
    let stack = |p: i32| {
        std::fs::read_to_string(format!("/proc/{p}/stat"))
            .ok()
            .and_then(|t| {
                let after = t.get(t.rfind(')')? + 1..)?.to_string();
                // Field 28 (startstack); fields after the name start at 3.
                after.split_whitespace().nth(25)?.parse::<u64>().ok()
            })
            .filter(|s| *s != 0)
    };
    cmdline(pid).is_some_and(|c| Some(c) == cmdline(parent))
        && stack(pid).is_some_and(|s| Some(s) == stack(parent))
}

/// `pid` is a forked subshell of `parent` writing into a pipe that `parent` reads.
fn is_substitution_subshell(pid: i32, parent: i32) -> bool {
    let Some(out) = std::fs::read_link(format!("/proc/{pid}/fd/1")).ok() else {
        return false;
    };
    let cmdline = |p: i32| std::fs::read(format!("/proc/{p}/cmdline")).ok();
    out.to_string_lossy().starts_with("pipe:")
        && cmdline(pid).is_some_and(|c| Some(c) == cmdline(parent))
        && reads(parent, &out)
}

/// `pid` runs a tool that starts the command as its child and exits with it.
fn is_forking_wrapper(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .is_ok_and(|c| matches!(c.trim(), "timeout" | "xargs" | "time"))
}

/// Whether process `pid` has the read end of pipe `link` (`pipe:[1234]`)
/// open. Both ends have the same link; the access mode in `fdinfo` tells
/// them apart (a parent that merely shares the child's stdout holds the
/// write end).
fn reads(pid: i32, link: &Path) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path()).is_ok_and(|l| l == link) && {
            let info = format!("/proc/{pid}/fdinfo/{}", fd.file_name().to_string_lossy());
            std::fs::read_to_string(info).is_ok_and(|text| {
                text.lines()
                    .find_map(|l| l.strip_prefix("flags:"))
                    .and_then(|f| u32::from_str_radix(f.trim(), 8).ok())
                    .is_some_and(|flags| flags & 0o3 != 0o1) // not O_WRONLY
            })
        }
    })
}
