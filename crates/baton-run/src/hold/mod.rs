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
/// subshell or a wrapper reads `/proc` on Linux and asks `proc_pidinfo` on
/// macOS ([`baton_ipc::lineage`]); on Windows, where a shell forks no
/// subshells, the caller is the parent process.
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

/// `pid` is a fork of `parent` that has not executed another program.
fn is_fork_of(pid: i32, parent: i32) -> bool {
    baton_ipc::lineage::is_fork_of(pid, parent)
}

/// `pid` is a forked subshell of `parent` writing into a pipe that `parent` reads.
fn is_substitution_subshell(pid: i32, parent: i32) -> bool {
    baton_ipc::lineage::is_fork_of(pid, parent) && baton_ipc::lineage::stdout_read_by(pid, parent)
}

/// `pid` runs a tool that starts the command as its child and exits with it.
fn is_forking_wrapper(pid: i32) -> bool {
    baton_ipc::lineage::command_name(pid)
        .is_some_and(|c| matches!(c.as_str(), "timeout" | "xargs" | "time"))
}
