//! Starting the command: fork, the child's set-up, exec, on one thread.
//!
//! The command must never run unrecorded: if the supervisor dies between
//! the fork and the moment the caller has recorded the command's process
//! group (with its locks, so the next holder can stop what is left), the
//! command must not have started anything. So the child, once set up, waits
//! for one byte on a pipe before it executes the command, and the parent
//! sends it only after `on_start` has recorded the group. A supervisor that
//! dies before that byte leaves the child reading end of file (and the
//! parent-death signal kills it): it exits without running anything.
//!
//! The parent learns the pid from `fork` itself, so it records the group
//! while the child is still setting up, with no thread and no pipe to learn
//! the pid from the child: a helper thread and the standard library's
//! spawner (which only returns once the exec is done) cost about 0.15 ms of
//! the 2.3 ms a `baton run --lock L -- true` took (bench/README.md, "Where the
//! time goes").
//!
//! Between fork and exec the child makes only async-signal-safe system calls
//! on memory prepared before the fork (no allocation, no lock): sigaction,
//! signal and sigprocmask (the forwarded signals, blocked across the fork),
//! setpgid or setsid, dup2, chdir, ioctl (the terminal), prctl (Linux), getppid, close, read,
//! execvp; on failure write and _exit. That is what
//! makes the fork safe in a multi-threaded process too (`baton serve`).
//!
//! Where it can (Linux), the child is not forked but cloned with `CLONE_VM`: it
//! shares the caller's memory until the exec, so no page table is copied
//! and the caller's threads take no copy-on-write fault meanwhile (see
//! [`clone_vm`] for what that asks of the child). A child that takes the
//! terminal (an interactive `baton run`) is forked.

#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
mod clone_vm;
mod failed;
mod prepared;

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use rustix::io::Errno;
use rustix::process::Pid;

use crate::{ProcError, RunSpec, Started};
use prepared::Prepared;

/// Whether commands are cloned with `CLONE_VM` where they can be: yes,
/// unless `BATON_NO_CLONE_VM=1` (read once), the off-switch with which
/// `bench/devices_bench.py` measures what the clone buys over a fork
/// (`docs/src/design/service.md`, "Speed devices").
#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
fn clone_vm_wanted() -> bool {
    static WANTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *WANTED.get_or_init(|| std::env::var_os("BATON_NO_CLONE_VM").is_none_or(|v| v != "1"))
}

/// Forks the child, calls `on_start` with its process group while the child
/// waits, then lets it execute the command (unless `on_start` fails: then
/// the child exits without executing it, and the error is returned). Returns its pid once the exec
/// succeeded; if the exec (or the child's set-up) failed, the child has been
/// reaped and the error says why, as [`ProcError`]s from a spawn do.
pub(crate) fn spawn(
    spec: &RunSpec,
    take_terminal: bool,
    on_start: impl FnOnce(Started) -> Result<(), ProcError>,
) -> Result<Pid, ProcError> {
    let spawn_failed = |source: io::Error| ProcError::Spawn {
        program: spec.program.clone(),
        source,
    };
    let prepared = Prepared::new(spec, take_terminal).map_err(spawn_failed)?;
    let (go_read, go_write) =
        crate::sys::pipe_cloexec().map_err(|e| ProcError::io("create the start pipe", e))?;
    let (err_read, err_write) =
        crate::sys::pipe_cloexec().map_err(|e| ProcError::io("create the exec error pipe", e))?;
    // What a cloned child runs on: alive until `child` (declared after it,
    // so dropped before it) says the child executed or was reaped.
    #[cfg(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    ))]
    let mut vm = clone_vm::VmChild {
        prepared: &prepared,
        saved_mask: 0,
        go_read: go_read.as_raw_fd(),
        go_write: go_write.as_raw_fd(),
        err: err_write.as_raw_fd(),
    };
    #[cfg(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    ))]
    let stack = match take_terminal || !clone_vm_wanted() {
        false => Some(clone_vm::ChildStack::take().map_err(|e| spawn_failed(e.into()))?),
        true => None,
    };
    #[cfg(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    ))]
    let pid = match &stack {
        // SAFETY: `vm`, what it points to and `stack` outlive `child` below,
        // which kills and reaps the child unless it has executed.
        Some(stack) => unsafe { clone_vm::clone_child(&mut vm, stack) }.map_err(io::Error::from),
        None => fork_child(&prepared, &go_read, &go_write, &err_write),
    };
    #[cfg(not(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    )))]
    let pid = fork_child(&prepared, &go_read, &go_write, &err_write);
    let pid = pid.map_err(spawn_failed)?;
    let Some(pid) = Pid::from_raw(pid) else {
        return Err(spawn_failed(io::Error::from(io::ErrorKind::Other)));
    };
    let mut child = InFlight {
        pid,
        executed: false,
    };
    drop(go_read);
    drop(err_write);
    match prepared.new_session {
        // The group exists once the child made its session, which it says
        // on the error pipe (errno 0) before it waits for the go-ahead: the
        // group, its session and its leader are then what `on_start`
        // records. (A `setpgid` from here could come first and make the
        // child a group leader, which `setsid` refuses.)
        true => match read_errno(&err_read) {
            Some(0) => {}
            Some(errno) => {
                return Err(failed::spawn_error(
                    spec,
                    io::Error::from_raw_os_error(errno),
                ))
            }
            None => return Err(spawn_failed(io::Error::from(io::ErrorKind::BrokenPipe))),
        },
        // The child makes its own group too; doing it here as well means
        // the group exists when it is recorded, whoever runs first. An
        // error means the child already failed, which the error pipe
        // reports.
        false => {
            let _ = rustix::process::setpgid(Some(pid), Some(pid));
        }
    }
    // On an error (or a panic) the child, not yet given the go-ahead, is
    // killed and reaped by `child`: it never runs anything.
    on_start(Started {
        pgid: pid.as_raw_nonzero().get(),
    })?;
    // A child that died already makes this fail with EPIPE: the error pipe says why.
    while let Err(Errno::INTR) = rustix::io::write(&go_write, &[1u8]) {}
    drop(go_write);
    match read_errno(&err_read) {
        None => {
            child.executed = true;
            Ok(pid)
        }
        // The child exits at once after reporting: `child` reaps it.
        Some(errno) => Err(failed::spawn_error(
            spec,
            io::Error::from_raw_os_error(errno),
        )),
    }
}

/// A started child until it has executed the command. Dropped before that
/// (an error, a panic of `on_start`), it kills and reaps the child, which
/// so never runs anything unrecorded, nor on memory that is freed (a
/// cloned child runs on the caller's until its exec).
struct InFlight {
    pid: Pid,
    executed: bool,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if !self.executed {
            let _ = rustix::process::kill_process(self.pid, rustix::process::Signal::KILL);
            // Until it is reaped: a cloned child may still run on the
            // caller's memory, which is freed right after.
            while let Err(Errno::INTR) =
                rustix::process::waitpid(Some(self.pid), rustix::process::WaitOptions::empty())
            {
            }
        }
    }
}

/// Forks the child, which sets itself up and waits for the go-ahead
/// (`in_child`); returns its pid.
fn fork_child(
    prepared: &Prepared,
    go_read: &OwnedFd,
    go_write: &OwnedFd,
    err_write: &OwnedFd,
) -> io::Result<i32> {
    // The forwarded signals stay blocked from before the fork until the
    // child has put their default actions back (`in_child`), so that one
    // sent to the new group at any moment is neither run by the supervisor's
    // handler in the child (and lost) nor missed: it waits, then kills.
    // SAFETY: plain sigset_t values, filled by sigemptyset/sigaddset; this
    // thread's mask is restored right after the fork.
    let saved_mask = unsafe {
        let mut block: libc::sigset_t = std::mem::zeroed();
        let mut saved: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut block);
        for signal in crate::signals::FORWARDED_SIGNALS {
            libc::sigaddset(&mut block, signal);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &block, &mut saved);
        saved
    };
    // SAFETY: `fork` has no preconditions; in the child we only call
    // `in_child`, which makes async-signal-safe calls on memory made before
    // the fork and never returns (see the module documentation).
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: we are the child of the fork just above.
        unsafe {
            in_child(
                prepared,
                &saved_mask,
                go_read.as_raw_fd(),
                go_write.as_raw_fd(),
                err_write.as_raw_fd(),
            )
        }
    }
    let fork_error = io::Error::last_os_error();
    // SAFETY: restores this thread's mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &saved_mask, std::ptr::null_mut()) };
    match pid {
        -1 => Err(fork_error),
        pid => Ok(pid),
    }
}

/// The errno the child wrote before exiting, or `None` at end of file: the
/// exec succeeded (the pipe's write end closed with it).
fn read_errno(from: &OwnedFd) -> Option<i32> {
    let mut buf = [0u8; 4];
    let mut got = 0;
    while got < buf.len() {
        match rustix::io::read(from, &mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(Errno::INTR) => continue,
            Err(_) => break,
        }
    }
    (got == buf.len()).then(|| i32::from_ne_bytes(buf))
}

/// The child's side, between fork and exec. Never returns.
///
/// # Safety
///
/// Only to be called in the child of a `fork`, with `p` and the descriptors
/// made before it. Makes only async-signal-safe calls.
unsafe fn in_child(
    p: &Prepared,
    saved_mask: &libc::sigset_t,
    go_read: RawFd,
    go_write: RawFd,
    err: RawFd,
) -> ! {
    // SAFETY (all blocks below): raw system calls on descriptors and
    // NUL-terminated strings made before the fork, which the child owns a
    // copy of; `fail` writes 4 bytes from the stack and exits.
    let errno = crate::sys::errno;
    let fail = |code: i32| -> ! {
        unsafe {
            libc::write(err, (&raw const code).cast(), 4);
            libc::_exit(127)
        }
    };
    unsafe {
        // The supervisor's handlers for the forwarded signals came with the
        // fork; here they would only mark the signal in this copy of its
        // memory, and a TERM sent to the group before the exec would be lost.
        // The default action, as after the exec: the child dies of it, and
        // the supervisor reports that.
        // (A signal ignored from the start stays ignored, as an exec keeps it.)
        for signal in crate::signals::FORWARDED_SIGNALS {
            let mut now: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(signal, std::ptr::null(), &mut now) == 0
                && now.sa_sigaction != libc::SIG_IGN
            {
                libc::signal(signal, libc::SIG_DFL);
            }
        }
        // Blocked since before the fork: one that arrived meanwhile acts now.
        libc::pthread_sigmask(libc::SIG_SETMASK, saved_mask, std::ptr::null_mut());
        // Its own process group, so the whole command can be stopped at
        // once; in a session of its own if asked, which the parent waits
        // for (errno 0 on the error pipe).
        if p.new_session {
            if libc::setsid() < 0 {
                fail(errno());
            }
            let made: i32 = 0;
            libc::write(err, (&raw const made).cast(), 4);
        } else if libc::setpgid(0, 0) != 0 {
            fail(errno());
        }
        for (target, source) in p.stdio.iter().enumerate() {
            if let Some(fd) = source {
                // dup2 clears close-on-exec on the target.
                if libc::dup2(fd.as_raw_fd(), target as libc::c_int) < 0 {
                    fail(errno());
                }
            }
        }
        if let Some(dir) = &p.cwd {
            if libc::chdir(dir.as_ptr()) != 0 {
                fail(errno());
            }
        }
        if p.take_terminal {
            let _ = crate::terminal::take_in_child();
        }
        // Die with the supervisor, even by SIGKILL; if it died before the
        // prctl the signal will never come: give up rather than run
        // unsupervised. (macOS has no such signal: there this only checks
        // that the supervisor is still there.)
        if let Err(e) = crate::sys::die_with_parent(p.parent) {
            fail(e);
        }
        // Wait for the go-ahead; end of file means the supervisor is gone.
        libc::close(go_write);
        loop {
            let mut byte = 0u8;
            match libc::read(go_read, (&raw mut byte).cast(), 1) {
                1 => break,
                0 => libc::_exit(127),
                _ if errno() == libc::EINTR => continue,
                _ => fail(errno()),
            }
        }
        // The command starts with no signal blocked and SIGPIPE at its
        // default (Rust programs ignore it), as the standard library does.
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        // execvp looks the program up in the PATH of `environ`: the command's.
        crate::sys::set_environ(p.envp.as_ptr());
        libc::execvp(p.argv[0], p.argv.as_ptr());
        fail(errno())
    }
}

#[cfg(test)]
mod tests {
    use super::Prepared;

    impl Prepared {
        /// How many argument pointers the start holds.
        fn argument_pointers(&self) -> usize {
            self.argv.len() + self.sh_argv.len()
        }
    }

    /// 4096 arguments and a `PATH` of 100 entries: the start holds the
    /// arguments a few times over, not once per entry.
    #[test]
    fn a_long_path_does_not_multiply_the_arguments() {
        let mut spec = crate::RunSpec::new("baton-test-prog");
        spec.args = (0..4096).map(|i| format!("arg{i}").into()).collect();
        let path: Vec<String> = (0..100).map(|i| format!("/nonexistent/{i}")).collect();
        spec.env.push(("PATH".into(), path.join(":").into()));
        let prepared = Prepared::new(&spec, false).expect("prepared");
        assert_eq!(prepared.exec_paths.len(), 100);
        let pointers = prepared.argument_pointers();
        assert!(pointers < 3 * 4097, "{pointers} argument pointers");
    }
}
