//! What the child of a spawn needs, made before the fork or clone (the
//! child only reads it: no allocation between fork and exec).

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

use crate::spec::{RunSpec, Stdio};

/// Everything the child needs, made before the fork: the child only reads it.
pub(super) struct Prepared {
    /// Owns the strings `argv` points to; the first is the program.
    pub(super) _args: Vec<CString>,
    /// NUL-terminated array of pointers into `_args`.
    pub(super) argv: Vec<*const libc::c_char>,
    /// Owns the strings `envp` points to.
    pub(super) _env: Vec<CString>,
    /// NUL-terminated array of pointers into `_env`.
    pub(super) envp: Vec<*const libc::c_char>,
    pub(super) cwd: Option<CString>,
    /// Descriptors (all >= 3, close-on-exec) to become 0, 1 and 2.
    pub(super) stdio: [Option<OwnedFd>; 3],
    pub(super) take_terminal: bool,
    /// `setsid` instead of `setpgid(0, 0)` ([`RunSpec::new_session`]).
    pub(super) new_session: bool,
    pub(super) parent: libc::pid_t,
    /// Where the program may be, in `execvp`'s order (for the cloned
    /// child, which cannot use `execvp`).
    #[cfg_attr(
        not(all(
            target_os = "linux",
            any(target_arch = "x86_64", target_arch = "aarch64")
        )),
        allow(dead_code)
    )]
    pub(super) exec_paths: Vec<CString>,
    /// `/bin/sh`, a slot for the path, the arguments, NUL-terminated: how
    /// a file the kernel cannot execute runs (a shell script). The cloned
    /// child puts the path in the slot (one array, whatever the number of
    /// paths: not one copy of the arguments per `PATH` entry); only it
    /// uses this array.
    #[cfg_attr(
        not(all(
            target_os = "linux",
            any(target_arch = "x86_64", target_arch = "aarch64")
        )),
        allow(dead_code)
    )]
    pub(super) sh_argv: Vec<std::cell::Cell<*const libc::c_char>>,
}

/// The `PATH` `execvp` uses when the environment has none.
const DEFAULT_PATH: &[u8] = b"/bin:/usr/bin";

/// Where `execvp` looks for `program` in the environment `env`
/// (`KEY=VALUE` strings): the program itself when its name has a slash,
/// else `dir/program` for each entry of `PATH` (an empty entry: the
/// working directory).
fn exec_paths(program: &CString, env: &[CString]) -> Vec<CString> {
    let name = program.as_bytes();
    if name.is_empty() {
        return Vec::new(); // not found, as execvp says
    }
    if name.contains(&b'/') {
        return vec![program.clone()];
    }
    let path = env
        .iter()
        .rev()
        .find_map(|e| e.as_bytes().strip_prefix(b"PATH="))
        .unwrap_or(DEFAULT_PATH);
    path.split(|b| *b == b':')
        .filter_map(|dir| {
            let mut full = Vec::with_capacity(dir.len() + name.len() + 1);
            full.extend_from_slice(dir);
            if !dir.is_empty() {
                full.push(b'/');
            }
            full.extend_from_slice(name);
            CString::new(full).ok()
        })
        .collect()
}

fn c_string(s: &OsStr, what: &str) -> io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("the {what} contains a NUL byte"),
        )
    })
}

/// A close-on-exec copy of `fd` numbered 3 or above, so that putting the
/// copies in place as 0, 1 and 2 in the child never overwrites another copy.
fn high_copy(fd: impl AsFd) -> io::Result<OwnedFd> {
    Ok(rustix::io::fcntl_dupfd_cloexec(fd, 3)?)
}

fn stdio_fd(s: &Stdio) -> io::Result<Option<OwnedFd>> {
    Ok(match s {
        Stdio::Inherit => None,
        Stdio::Null => {
            let null = rustix::fs::open(
                "/dev/null",
                rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )?;
            Some(high_copy(&null)?)
        }
        Stdio::Fd(fd) => Some(high_copy(fd.as_ref())?),
    })
}

impl Prepared {
    pub(super) fn new(spec: &RunSpec, take_terminal: bool) -> io::Result<Prepared> {
        let mut args = vec![c_string(&spec.program, "program name")?];
        for arg in &spec.args {
            args.push(c_string(arg, "argument")?);
        }
        let argv = args
            .iter()
            .map(|a| a.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect();
        // The inherited environment (none with `clear_env`) with the spec's
        // variables added or replaced, each as one `KEY=VALUE` string made
        // in one allocation.
        let entry = |k: &OsStr, v: &OsStr| {
            let mut kv = Vec::with_capacity(k.len() + v.len() + 2);
            kv.extend_from_slice(k.as_bytes());
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            CString::new(kv).map_err(|_| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "the environment contains a NUL byte",
                )
            })
        };
        let mut env = Vec::with_capacity(64);
        for (k, v) in std::env::vars_os().filter(|_| !spec.clear_env) {
            if !spec.env.iter().any(|(s, _)| *s == k) {
                env.push(entry(&k, &v)?);
            }
        }
        for (i, (k, v)) in spec.env.iter().enumerate() {
            // Set twice: the later one counts, as with `Command::env`.
            if !spec.env[i + 1..].iter().any(|(later, _)| later == k) {
                env.push(entry(k, v)?);
            }
        }
        let envp = env
            .iter()
            .map(|e| e.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect();
        let cwd = match &spec.cwd {
            Some(dir) => Some(c_string(dir.as_os_str(), "working directory")?),
            None => None,
        };
        let exec_paths = exec_paths(&args[0], &env);
        let sh_argv = [c"/bin/sh".as_ptr(), std::ptr::null()]
            .into_iter()
            .chain(args[1..].iter().map(|a| a.as_ptr()))
            .chain(std::iter::once(std::ptr::null()))
            .map(std::cell::Cell::new)
            .collect();
        Ok(Prepared {
            _args: args,
            argv,
            _env: env,
            envp,
            cwd,
            stdio: [
                stdio_fd(&spec.stdio.stdin)?,
                stdio_fd(&spec.stdio.stdout)?,
                stdio_fd(&spec.stdio.stderr)?,
            ],
            take_terminal: take_terminal && !spec.new_session,
            new_session: spec.new_session,
            parent: rustix::process::getpid().as_raw_nonzero().get(),
            exec_paths,
            sh_argv,
        })
    }
}
