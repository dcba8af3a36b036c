//! What the service needs of the system that differs between unix and
//! Windows, in one place (the crate's platform seam; the OS calls
//! themselves are in baton-fs and baton-proc where they can be shared):
//!
//! | | unix | Windows |
//! |---|---|---|
//! | a job's prompt on stdin | a memfd (Linux; an unlinked temp file elsewhere) holding it | a pipe fed by a thread of its own until the command has read it or ended |
//! | a job's output | a pipe whose first byte the runtime waits for, then a thread | a pipe drained by a thread from the start (tokio has no anonymous pipes there) |
//! | files with prompts or output | mode 0600, directories 0700 | the directory's inherited ACL (no mode bits) |
//! | the open files limit | `RLIMIT_NOFILE`, raised to its hard limit | none (handles are limited by memory only) |
//! | the service's environment (its token, templates' secrets) | Linux: hidden from the user's other processes, jobs included (not dumpable); macOS: readable by them (`ps -E`) | readable by them (no such setting) |
//! | a command too large to start | `E2BIG` (`ARG_MAX`, `MAX_ARG_STRLEN`) | `ERROR_FILENAME_EXCED_RANGE` (a command line has at most 32767 characters) |
//! | a job's guardian | `/proc/self/exe`, or the `baton` next to this binary | none: a command dies with its supervisor through its Job Object, and a guardian is refused (see the README, "Platforms") |

#[cfg(unix)]
pub(crate) use unix::*;
#[cfg(windows)]
pub(crate) use windows::*;

/// Whether a job's output pipes are watched on the async runtime (unix)
/// rather than by a thread each (Windows).
pub(crate) const PIPES_ON_RUNTIME: bool = cfg!(unix);

#[cfg(unix)]
mod unix {
    use std::fs::{DirBuilder, OpenOptions};
    use std::io;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
    use std::path::PathBuf;

    /// An open file or pipe end, as [`baton_proc::Stdio::Fd`] takes it.
    pub(crate) type Owned = std::os::fd::OwnedFd;

    /// Only the service's user may open a file this creates (mode 0600).
    pub(crate) fn private_file(options: &mut OpenOptions) -> &mut OpenOptions {
        options.mode(0o600)
    }

    /// Only the service's user may enter a directory this creates (0700).
    pub(crate) fn private_dir(builder: &mut DirBuilder) -> &mut DirBuilder {
        builder.mode(0o700)
    }

    /// An input for a command's stdin that yields `prompt`, then its end: a
    /// memfd holding it (nothing on disk).
    #[cfg(target_os = "linux")]
    pub(crate) fn prompt_input(prompt: &str) -> io::Result<Owned> {
        use std::io::{Seek, SeekFrom, Write};
        let fd = rustix::fs::memfd_create(c"baton-prompt", rustix::fs::MemfdFlags::CLOEXEC)?;
        let mut f = std::fs::File::from(fd);
        f.write_all(prompt.as_bytes())?;
        f.seek(SeekFrom::Start(0))?;
        Ok(f.into())
    }

    /// An input for a command's stdin that yields `prompt`, then its end:
    /// no memfd here, so a temp file (0600), unlinked at once.
    #[cfg(not(target_os = "linux"))]
    pub(crate) fn prompt_input(prompt: &str) -> io::Result<Owned> {
        use std::io::{Seek, SeekFrom, Write};
        let dir = std::env::temp_dir();
        loop {
            let name = dir.join(format!(".baton-prompt-{:016x}", baton_fs::random_u64()));
            let opened = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&name);
            match opened {
                Ok(mut f) => {
                    std::fs::remove_file(&name)?;
                    f.write_all(prompt.as_bytes())?;
                    f.seek(SeekFrom::Start(0))?;
                    return Ok(f.into());
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// The soft limit on this process's open files, `None` when unlimited.
    pub(crate) fn open_files_limit() -> Option<u64> {
        rustix::process::getrlimit(rustix::process::Resource::Nofile).current
    }

    /// Raises the soft limit on open files to the hard limit; returns the
    /// soft limit now in force (`None`: unlimited or unknown).
    pub(crate) fn raise_open_files_limit() -> Option<u64> {
        use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
        let now = getrlimit(Resource::Nofile);
        if now.current != now.maximum {
            let raised = Rlimit {
                current: now.maximum,
                maximum: now.maximum,
            };
            match setrlimit(Resource::Nofile, raised) {
                Ok(()) => return now.maximum,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot raise the limit on open files");
                }
            }
        }
        now.current
    }

    /// Makes this process's `/proc` files (its environment above all:
    /// the token, the secrets templates take from it) readable by no other
    /// process of its user, a job included (`PR_SET_DUMPABLE` 0, as
    /// ssh-agent does; no core dump either). A job's command is not
    /// affected: an exec makes a process dumpable again.
    #[cfg(target_os = "linux")]
    pub(crate) fn hide_from_same_user() {
        use rustix::process::{set_dumpable_behavior, DumpableBehavior};
        if let Err(e) = set_dumpable_behavior(DumpableBehavior::NotDumpable) {
            tracing::warn!(error = %e, "cannot hide the service's /proc files from its jobs");
        }
    }

    /// A child subreaper shared by the jobs (`PR_SET_CHILD_SUBREAPER`):
    /// each job's end stops the processes its command left outside its
    /// process group, found by their `BATON_RUN_ID` (baton-proc's
    /// `orphans.rs` says how those without one are handled).
    #[cfg(target_os = "linux")]
    pub(crate) fn adopt_orphans() {
        if let Err(e) = baton_proc::become_shared_subreaper("BATON_RUN_ID") {
            tracing::warn!(
                error = %e,
                "cannot become a child subreaper: processes that leave a job's process group \
                 are not stopped at its end"
            );
        }
    }

    /// Not done here: macOS has no child subreaper (a process that leaves
    /// a job's process group is not stopped at its end).
    #[cfg(not(target_os = "linux"))]
    pub(crate) fn adopt_orphans() {}

    /// Not done here: macOS has no such setting (`ps -E` shows a process's
    /// environment to its user's other processes).
    #[cfg(not(target_os = "linux"))]
    pub(crate) fn hide_from_same_user() {}

    /// Whether the system refused to start a command because its arguments
    /// and environment are too large (`E2BIG`).
    pub(crate) fn is_too_large(e: &io::Error) -> bool {
        e.raw_os_error() == Some(libc::E2BIG)
    }

    /// What limits a command's size, for the message of [`is_too_large`]:
    /// (the refusal, the limit of one argument, the limit of them all).
    pub(crate) fn size_limits() -> (&'static str, String, String) {
        // SAFETY: sysconf only reads a system limit.
        let arg_max = unsafe { libc::sysconf(libc::_SC_ARG_MAX) };
        (
            "E2BIG",
            format!("{} bytes, MAX_ARG_STRLEN", 128 * 1024),
            format!("ARG_MAX {arg_max}"),
        )
    }

    /// The program that runs a job's guardian: the `baton` installed next
    /// to this binary when there is one, else this program.
    pub(crate) fn guard_program() -> PathBuf {
        std::env::current_exe()
            .ok()
            .map(|me| me.with_file_name("baton"))
            .filter(|small| {
                std::fs::metadata(small)
                    .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            })
            .unwrap_or_else(|| PathBuf::from("/proc/self/exe"))
    }
}

#[cfg(windows)]
mod windows {
    use std::fs::{DirBuilder, OpenOptions};
    use std::io;
    use std::path::PathBuf;

    /// An open file or pipe end, as [`baton_proc::Stdio::Fd`] takes it.
    pub(crate) type Owned = std::os::windows::io::OwnedHandle;

    /// The file inherits its directory's ACL (there are no mode bits).
    pub(crate) fn private_file(options: &mut OpenOptions) -> &mut OpenOptions {
        options
    }

    /// The directory inherits its parent's ACL (there are no mode bits).
    pub(crate) fn private_dir(builder: &mut DirBuilder) -> &mut DirBuilder {
        builder
    }

    /// An input for a command's stdin that yields `prompt`, then its end: a
    /// pipe that a thread of its own writes the prompt into, ending when
    /// the command has read it all or the read end is closed (the command
    /// ended and the caller dropped its copy).
    pub(crate) fn prompt_input(prompt: &str) -> io::Result<Owned> {
        use std::io::Write;
        let (read, write) = baton_proc::pipe().map_err(io::Error::other)?;
        let bytes = prompt.as_bytes().to_vec();
        std::thread::Builder::new()
            .name("baton-serve-prompt".into())
            .spawn(move || {
                let mut pipe = std::fs::File::from(write);
                let _ = pipe.write_all(&bytes);
            })?;
        Ok(read)
    }

    /// Windows has no limit on open files (handles are limited by memory).
    pub(crate) fn open_files_limit() -> Option<u64> {
        None
    }

    /// Nothing to raise (see [`open_files_limit`]).
    pub(crate) fn raise_open_files_limit() -> Option<u64> {
        None
    }

    /// Not done: Windows has no such setting (a process of the same user
    /// may open this one and read its memory).
    pub(crate) fn hide_from_same_user() {}

    /// Not needed: a job's Job Object holds every process its command
    /// starts, and its end closes it.
    pub(crate) fn adopt_orphans() {}

    /// Whether the system refused to start a command because its command
    /// line is too long (`ERROR_FILENAME_EXCED_RANGE`).
    pub(crate) fn is_too_large(e: &io::Error) -> bool {
        e.raw_os_error() == Some(206)
    }

    /// What limits a command's size, for the message of [`is_too_large`].
    pub(crate) fn size_limits() -> (&'static str, String, String) {
        (
            "ERROR_FILENAME_EXCED_RANGE",
            "32767 characters: the whole command line".to_string(),
            "a command line of 32767 characters".to_string(),
        )
    }

    /// The program that runs a job's guardian: `baton.exe` next to this
    /// binary when it is there, else this program (a guardian is refused
    /// on Windows all the same: see the module's documentation).
    pub(crate) fn guard_program() -> PathBuf {
        let me = std::env::current_exe().ok();
        me.as_ref()
            .map(|me| me.with_file_name("baton.exe"))
            .filter(|small| small.is_file())
            .or(me)
            .unwrap_or_else(|| PathBuf::from("baton.exe"))
    }
}
