//! The child of `clone(CLONE_VM)`: it runs in the caller's memory, on a
//! stack of its own, from the clone until it executes the command (or
//! exits), so the kernel copies no page table and the caller's threads take
//! no copy-on-write fault or TLB shootdown for it (in `baton serve`, a
//! multi-threaded process of several MiB, `fork` and its faults were the
//! biggest cost of a trivial job; bench/README.md, "Where the time goes").
//!
//! What that asks of the child, beyond what a forked child already keeps to
//! (async-signal-safe calls only, no allocation, no lock):
//!
//! - **Its own stack**, above a guard page ([`ChildStack`]): it never
//!   runs on, nor overflows into, memory the caller uses.
//! - **No write to memory the caller uses** (but the script slot of
//!   `Prepared::sh_argv`, which only the child uses). Not even `errno`: the child has
//!   the caller's thread pointer, so a libc wrapper that fails would write the
//!   caller's `errno`. Every call here is a raw system call: rustix's own
//!   (its Linux backend never touches `errno`) or [`sys`] below for the four
//!   rustix does not offer (`rt_sigaction`, `rt_sigprocmask`, `execve`,
//!   `exit_group`). The program is looked up in the command's `PATH` as
//!   `execvp` does, over candidate paths prepared before the clone (`execvp`
//!   would read the caller's `environ`).
//! - **No handler of the caller's may run in it.** The caller blocks every
//!   signal around the clone; the child sets every handled signal back to
//!   its default (as the exec would) before it restores the mask.
//! - **The caller keeps the memory alive** until the child has executed the
//!   command (the close-on-exec error pipe reads end of file only once the
//!   exec has replaced the child's memory) or been reaped: see
//!   `spawn::InFlight`.
//!
//! Only built where [`sys`] knows the system call instruction (x86_64,
//! aarch64); elsewhere, and for a child that takes the terminal, the crate
//! forks.

use std::ffi::{c_int, c_void};
use std::os::fd::{BorrowedFd, RawFd};

use rustix::io::Errno;
use rustix::process::Signal;

use super::prepared::Prepared;

/// Size of the child's stack: it makes system calls and little else (a
/// few KiB in a debug build: `the_child_uses_little_of_its_stack`).
pub(super) const STACK_BYTES: usize = 64 * 1024;

/// The child's stack: an anonymous mapping of [`STACK_BYTES`] above a
/// guard page nothing may read or write, so a child that overflows its
/// stack dies of SIGSEGV instead of writing into the caller's memory below
/// it (a stack in the caller's heap would have). Dropped, it becomes the
/// thread's spare, which the thread's next start takes: a mapping made and
/// unmapped per start would cost the caller's threads the TLB shootdowns
/// the clone is there to avoid. So it must only be dropped once no child
/// runs on it any more (it executed its command or was reaped).
pub(super) struct ChildStack(Option<Mapping>);

/// A mapping made by [`Mapping::new`], unmapped on drop.
struct Mapping {
    base: *mut c_void,
    len: usize,
}

// SAFETY: plain memory, used by one thread (and its child) at a time.
unsafe impl Send for Mapping {}

thread_local! {
    /// This thread's spare stack (see [`ChildStack`]).
    static SPARE: std::cell::Cell<Option<Mapping>> = const { std::cell::Cell::new(None) };
}

impl ChildStack {
    /// This thread's spare stack, or a new one.
    pub(super) fn take() -> Result<ChildStack, Errno> {
        let mapping = match SPARE.try_with(std::cell::Cell::take) {
            Ok(Some(spare)) => spare,
            _ => Mapping::new()?,
        };
        Ok(ChildStack(Some(mapping)))
    }

    /// The stack's top (page aligned, so 16-byte aligned); null for none.
    pub(super) fn top(&self) -> *mut c_void {
        match &self.0 {
            Some(m) => m.base.wrapping_byte_add(m.len),
            None => std::ptr::null_mut(),
        }
    }
}

impl Drop for ChildStack {
    fn drop(&mut self) {
        if let Some(mapping) = self.0.take() {
            // Without the thread's storage (the thread is ending), unmapped.
            let _ = SPARE.try_with(|spare| spare.replace(Some(mapping)));
        }
    }
}

impl Mapping {
    fn new() -> Result<Mapping, Errno> {
        let guard = rustix::param::page_size();
        let len = guard + STACK_BYTES.next_multiple_of(guard);
        // SAFETY: a new private anonymous mapping, at an address of the
        // kernel's choosing: no memory of ours is affected.
        let base = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                len,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::PRIVATE | rustix::mm::MapFlags::STACK,
            )
        }?;
        // Unmapped on drop from here on, also if the guard cannot be made.
        let mapping = Mapping { base, len };
        // SAFETY: the lowest page of the mapping just made, used by nothing.
        unsafe { rustix::mm::mprotect(base, guard, rustix::mm::MprotectFlags::empty()) }?;
        Ok(mapping)
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, which no child uses any more
        // (see `ChildStack`).
        let _ = unsafe { rustix::mm::munmap(self.base, self.len) };
    }
}

/// What the child needs: all made before the clone; it only reads it.
pub(super) struct VmChild<'a> {
    pub(super) prepared: &'a Prepared,
    /// The caller's signal mask before it blocked everything.
    pub(super) saved_mask: u64,
    pub(super) go_read: RawFd,
    pub(super) go_write: RawFd,
    pub(super) err: RawFd,
}

/// Clones the child, which runs [`child_main`] with `child` on `stack`.
/// Returns its pid, or the error of `clone`. The caller's signals are all
/// blocked meanwhile (see the module documentation); their mask before
/// goes into `child.saved_mask`, for the child to restore.
///
/// # Safety
///
/// `child`, the memory it points to and `stack` must stay alive and
/// unchanged until the child has executed its command or been reaped.
pub(super) unsafe fn clone_child(
    child: &mut VmChild<'_>,
    stack: &ChildStack,
) -> Result<i32, Errno> {
    let all = !0u64;
    // SAFETY: blocks this thread's signals; both sets are 8 bytes, the
    // kernel's sigset size on the architectures this module is built for.
    unsafe { sys::sigprocmask(libc::SIG_BLOCK, &all, &mut child.saved_mask) };
    let saved = child.saved_mask;
    let top = stack.top();
    // SAFETY: `child_main` runs on its own 16-byte aligned stack and only
    // reads `child`, which the caller keeps alive and unchanged (above).
    let pid = unsafe {
        libc::clone(
            child_main,
            top,
            libc::CLONE_VM | libc::SIGCHLD,
            std::ptr::from_mut(child).cast(),
        )
    };
    let result = match pid {
        -1 => Err(Errno::from_io_error(&std::io::Error::last_os_error()).unwrap_or(Errno::AGAIN)),
        pid => Ok(pid),
    };
    // SAFETY: restores the mask saved above.
    unsafe { sys::sigprocmask(libc::SIG_SETMASK, &saved, std::ptr::null_mut()) };
    result
}

/// The child's entry point. Never returns: it executes the command or
/// reports why it could not on the error pipe and exits with 127.
extern "C" fn child_main(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the `VmChild` given to `clone_child`, alive and
    // unchanged until this child has executed or been reaped.
    let child = unsafe { &*arg.cast::<VmChild<'_>>() };
    let errno = set_up_and_exec(child);
    // SAFETY: the error pipe's write end, open in this child until it exits.
    let err = unsafe { BorrowedFd::borrow_raw(child.err) };
    let _ = rustix::io::write(err, &errno.to_ne_bytes());
    sys::exit_group(127)
}

/// The child's set-up, as `in_child` of the forked child, then the exec;
/// returns only on a failure, with its errno.
fn set_up_and_exec(c: &VmChild<'_>) -> i32 {
    let p = c.prepared;
    // Every handled signal back to its default, as the exec would do: no
    // handler of the caller's may run in this child (an ignored one stays
    // ignored, as across an exec).
    for signal in 1..=64 {
        if signal == libc::SIGKILL || signal == libc::SIGSTOP {
            continue;
        }
        let mut now = sys::KernelSigaction::default();
        // SAFETY: reads the action into a buffer of the kernel's size.
        let read = unsafe { sys::sigaction(signal, std::ptr::null(), &mut now) };
        if read == 0 && now.handler != libc::SIG_DFL && now.handler != libc::SIG_IGN {
            let default = sys::KernelSigaction::default();
            // SAFETY: installs SIG_DFL (all zeros: no flags, empty mask).
            unsafe { sys::sigaction(signal, &default, std::ptr::null_mut()) };
        }
    }
    // SAFETY: sets this child's mask back to the caller's.
    unsafe { sys::sigprocmask(libc::SIG_SETMASK, &c.saved_mask, std::ptr::null_mut()) };
    let raw = |e: Errno| e.raw_os_error();
    // Its own process group, so the whole command can be stopped at once;
    // in a session of its own if asked, which the parent waits for (errno
    // 0 on the error pipe).
    if p.new_session {
        if let Err(e) = rustix::process::setsid() {
            return raw(e);
        }
        // SAFETY: the error pipe's write end, open in this child until it
        // exits or executes.
        let err = unsafe { BorrowedFd::borrow_raw(c.err) };
        if let Err(e) = rustix::io::write(err, &0i32.to_ne_bytes()) {
            return raw(e);
        }
    } else if let Err(e) = rustix::process::setpgid(None, None) {
        return raw(e);
    }
    let dups = [
        rustix::stdio::dup2_stdin,
        rustix::stdio::dup2_stdout,
        rustix::stdio::dup2_stderr,
    ];
    for (source, dup) in p.stdio.iter().zip(dups) {
        if let Some(fd) = source {
            // dup2 clears close-on-exec on the target.
            if let Err(e) = dup(fd) {
                return raw(e);
            }
        }
    }
    if let Some(dir) = &p.cwd {
        if let Err(e) = rustix::process::chdir(dir.as_c_str()) {
            return raw(e);
        }
    }
    // Die with the supervisor, even by SIGKILL; if it died before the
    // prctl the signal will never come: give up rather than run
    // unsupervised.
    if let Err(e) = rustix::process::set_parent_process_death_signal(Some(Signal::KILL)) {
        return raw(e);
    }
    if rustix::process::getppid().map(|p| p.as_raw_nonzero().get()) != Some(p.parent) {
        return libc::ESRCH;
    }
    // Wait for the go-ahead; end of file means the supervisor is gone.
    // SAFETY: this child's copies of the start pipe; the write end is
    // closed once and never used after.
    unsafe { rustix::io::close(c.go_write) };
    // SAFETY: as above, the read end stays open until the exec.
    let go = unsafe { BorrowedFd::borrow_raw(c.go_read) };
    loop {
        let mut byte = [0u8];
        match rustix::io::read(go, &mut byte) {
            Ok(1) => break,
            Ok(_) => sys::exit_group(127),
            Err(Errno::INTR) => continue,
            Err(e) => return raw(e),
        }
    }
    // The command starts with no signal blocked and SIGPIPE at its
    // default (Rust programs ignore it), as the standard library does.
    let default = sys::KernelSigaction::default();
    // SAFETY: an empty mask; SIG_DFL for SIGPIPE.
    unsafe {
        sys::sigprocmask(libc::SIG_SETMASK, &0, std::ptr::null_mut());
        sys::sigaction(libc::SIGPIPE, &default, std::ptr::null_mut());
    }
    exec(p)
}

/// Executes the program as `execvp` does (glibc's rules): a name with a
/// slash as it is, else each candidate of the command's `PATH` in turn; a
/// file the kernel cannot execute (ENOEXEC) through `/bin/sh`. Returns the
/// errno when nothing could be executed.
fn exec(p: &Prepared) -> i32 {
    let mut denied = false;
    let mut last = libc::ENOENT;
    for path in &p.exec_paths {
        // SAFETY: NUL-terminated arrays of pointers to NUL-terminated
        // strings, all made before the clone and alive until the exec.
        let mut errno = unsafe { sys::execve(path, p.argv.as_ptr(), p.envp.as_ptr()) };
        if errno == libc::ENOEXEC {
            // The one write to the caller's memory: an array only this
            // child uses (see `Prepared::sh_argv`).
            if let Some(slot) = p.sh_argv.get(1) {
                slot.set(path.as_ptr());
            }
            // SAFETY: as above; `sh_argv` is `/bin/sh`, this path, the args
            // (`Cell` has the layout of what it holds).
            let sh_argv = p.sh_argv.as_ptr().cast::<*const std::ffi::c_char>();
            errno = unsafe { sys::execve(c"/bin/sh", sh_argv, p.envp.as_ptr()) };
        }
        match errno {
            libc::EACCES => denied = true,
            libc::ENOENT | libc::ESTALE | libc::ENOTDIR | libc::ENODEV | libc::ETIMEDOUT => {}
            other => return other,
        }
        last = errno;
    }
    match denied {
        true => libc::EACCES,
        false => last,
    }
}

/// The four raw system calls rustix does not offer outside its unstable
/// runtime module; none touches `errno` (see the module documentation).
mod sys {
    use std::ffi::{c_char, c_long, CStr};

    /// The kernel's `struct sigaction` with room to spare (32 bytes; the
    /// kernel reads and writes the first 24 or 32 by architecture). All
    /// zeros is SIG_DFL with no flags and an empty mask.
    #[repr(C)]
    #[derive(Default)]
    pub(super) struct KernelSigaction {
        pub(super) handler: usize,
        rest: [u64; 3],
    }

    /// `rt_sigaction(signal, new, old, 8)`: 0 or a negated errno.
    ///
    /// # Safety
    ///
    /// `new` and `old` are null or valid.
    pub(super) unsafe fn sigaction(
        signal: i32,
        new: *const KernelSigaction,
        old: *mut KernelSigaction,
    ) -> isize {
        // SAFETY: as the caller promises; 8 is the kernel's sigset size.
        unsafe {
            syscall4(
                libc::SYS_rt_sigaction,
                signal as usize,
                new as usize,
                old as usize,
                8,
            )
        }
    }

    /// `rt_sigprocmask(how, set, old, 8)`.
    ///
    /// # Safety
    ///
    /// `set` is valid; `old` is null or valid.
    pub(super) unsafe fn sigprocmask(how: i32, set: *const u64, old: *mut u64) {
        // SAFETY: as the caller promises; 8 is the kernel's sigset size.
        unsafe {
            syscall4(
                libc::SYS_rt_sigprocmask,
                how as usize,
                set as usize,
                old as usize,
                8,
            )
        };
    }

    /// `execve`; returns its errno (it only returns on a failure).
    ///
    /// # Safety
    ///
    /// `argv` and `envp` are NUL-terminated arrays of pointers to
    /// NUL-terminated strings.
    pub(super) unsafe fn execve(
        path: &CStr,
        argv: *const *const c_char,
        envp: *const *const c_char,
    ) -> i32 {
        // SAFETY: as the caller promises.
        let ret = unsafe {
            syscall4(
                libc::SYS_execve,
                path.as_ptr() as usize,
                argv as usize,
                envp as usize,
                0,
            )
        };
        // (No arithmetic that could panic: a panic here would run the
        // panic machinery on the caller's memory.)
        i32::try_from(ret.wrapping_neg()).unwrap_or(libc::EINVAL)
    }

    /// `exit_group(code)`.
    pub(super) fn exit_group(code: i32) -> ! {
        loop {
            // SAFETY: ends the process; no memory is involved.
            unsafe { syscall4(libc::SYS_exit_group, code as usize, 0, 0, 0) };
        }
    }

    #[cfg(target_arch = "x86_64")]
    unsafe fn syscall4(n: c_long, a1: usize, a2: usize, a3: usize, a4: usize) -> isize {
        let ret: isize;
        // SAFETY: the x86_64 system call convention; the caller vouches for
        // the arguments.
        unsafe {
            std::arch::asm!(
                "syscall",
                inlateout("rax") n as isize => ret,
                in("rdi") a1,
                in("rsi") a2,
                in("rdx") a3,
                in("r10") a4,
                lateout("rcx") _,
                lateout("r11") _,
                options(nostack),
            );
        }
        ret
    }

    #[cfg(target_arch = "aarch64")]
    unsafe fn syscall4(n: c_long, a1: usize, a2: usize, a3: usize, a4: usize) -> isize {
        let ret: isize;
        // SAFETY: the aarch64 system call convention; the caller vouches
        // for the arguments.
        unsafe {
            std::arch::asm!(
                "svc 0",
                in("x8") n,
                inlateout("x0") a1 as isize => ret,
                in("x1") a2,
                in("x2") a3,
                in("x3") a4,
                options(nostack),
            );
        }
        ret
    }
}

#[cfg(test)]
mod tests {
    use super::{ChildStack, STACK_BYTES};

    /// A child that overflowed its stack would write just below it.
    #[test]
    fn below_the_childs_stack_is_a_page_that_faults() {
        let stack = ChildStack::take().expect("a stack");
        let below = stack.top().cast::<u8>().wrapping_sub(STACK_BYTES + 1);
        // SAFETY: a test; the forked child only makes raw system calls and
        // writes one byte (its copy of the memory) before it exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: as above; no core file for the expected fault.
            unsafe {
                let none = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                libc::setrlimit(libc::RLIMIT_CORE, &none);
                below.write_volatile(1);
                libc::_exit(0)
            }
        }
        assert!(pid > 0, "fork");
        let mut status = 0;
        // SAFETY: waits for the child just forked.
        let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(waited, pid);
        assert!(
            libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGSEGV,
            "a write below the child's stack did not fault (status {status:#x})"
        );
    }

    /// The child's stack needs a few KiB (debug build), far from its size.
    #[test]
    fn the_child_uses_little_of_its_stack() {
        const UNTOUCHED: u8 = 0xa5;
        let stack = ChildStack::take().expect("a stack");
        let bottom = stack.top().cast::<u8>().wrapping_sub(STACK_BYTES);
        // SAFETY: this thread's spare stack, no child on it.
        unsafe { bottom.write_bytes(UNTOUCHED, STACK_BYTES) };
        drop(stack); // the spare again: the start below takes it
        let mut spec = crate::RunSpec::new("sh").arg("-c").arg("exit 3");
        spec.env
            .push(("BATON_TEST".into(), "x".repeat(10_000).into()));
        let outcome = crate::Supervisor::new(spec).run().expect("run");
        assert_eq!(outcome, crate::Outcome::Exited(3));
        let stack = ChildStack::take().expect("the spare");
        let bottom = stack.top().cast::<u8>().wrapping_sub(STACK_BYTES);
        // SAFETY: the spare stack, no child on it any more.
        let bytes = unsafe { std::slice::from_raw_parts(bottom, STACK_BYTES) };
        let used = STACK_BYTES - bytes.iter().take_while(|b| **b == UNTOUCHED).count();
        eprintln!("the child used {used} bytes of its stack");
        assert!(used > 0, "the child did not run on this stack");
        assert!(used < STACK_BYTES / 4, "the child used {used} bytes");
    }
}
