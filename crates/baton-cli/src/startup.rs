//! What the process needs before any command runs, done by baton itself so
//! that the `baton` binary can skip Rust's runtime start-up (`#![no_main]`
//! in main.rs): that start-up reads the whole of /proc/self/maps to find the
//! main thread's stack, about a tenth of the instructions of a `baton run`
//! (bench/README.md, "Where the time goes"). The two things of it baton
//! relies on are done here, as Rust does them. Windows has no SIGPIPE and
//! no such start-up cost: `baton.exe` has a normal `main`, and only
//! [`restore_default_sigpipe`] is here (doing nothing).

#[cfg(unix)]
use std::os::fd::IntoRawFd;

/// Makes the process ready for the CLI ([`crate::main`]): standard descriptors that
/// were closed are opened on /dev/null (so that no lock file or pipe of
/// baton's becomes a child's stdin, stdout or stderr), and SIGPIPE is
/// ignored, so that writing to a closed pipe is an error baton reports.
#[cfg(unix)]
fn prepare_process() -> Result<(), std::io::Error> {
    let mut fds = [0, 1, 2].map(|fd| libc::pollfd {
        fd,
        events: 0,
        revents: 0,
    });
    // SAFETY: `fds` is a valid array of three pollfd for the duration of the
    // call; poll only writes their `revents`. A zero timeout never blocks.
    let n = loop {
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 3, 0) };
        if n >= 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            break n;
        }
    };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    for p in &fds {
        if p.revents & libc::POLLNVAL != 0 {
            // The lowest free descriptor is the one that is closed: the file
            // takes its place and stays open for the life of the process,
            // inherited by the command (no O_CLOEXEC) as the descriptor was.
            let null = rustix::fs::open(
                "/dev/null",
                rustix::fs::OFlags::RDWR,
                rustix::fs::Mode::empty(),
            )?;
            let _ = null.into_raw_fd();
        }
    }
    ignore_sigpipe();
    Ok(())
}

/// Runs `main` in a process that Rust's runtime did not start (see the
/// module's documentation): prepares the process, turns a panic into exit
/// code 101 as Rust's runtime does (`main` flushes stdout).
#[cfg(unix)]
pub(crate) fn without_runtime(main: fn() -> u8) -> u8 {
    if let Err(e) = prepare_process() {
        // stderr may be one of the descriptors that could not be opened.
        errln!("baton: cannot open /dev/null for a closed standard descriptor: {e}");
        return crate::exit_codes::BATON_FAILED;
    }
    std::panic::catch_unwind(main).unwrap_or(101)
}

#[cfg(unix)]
fn ignore_sigpipe() {
    // SAFETY: setting SIGPIPE's disposition to "ignore" installs no handler
    // and only changes how writes to a closed pipe fail (EPIPE).
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

/// Lets a command whose output may be cut short (`baton lock status | head`,
/// `baton state get | head`) end quietly on SIGPIPE, as Unix tools do,
/// instead of failing on the closed pipe. Not for `run`, whose output is
/// the command's own, nor for edits, which must survive such a reader.
#[cfg(unix)]
pub(crate) fn restore_default_sigpipe() {
    // SAFETY: setting the disposition of SIGPIPE to its default is
    // async-signal-safe and affects only how this process reacts to writes to
    // a closed pipe; no handler of ours is replaced.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Windows has no SIGPIPE: a write to a closed pipe is an error there
/// (which `say` reports or, for output cut short, ends quietly on).
#[cfg(windows)]
pub(crate) fn restore_default_sigpipe() {}
