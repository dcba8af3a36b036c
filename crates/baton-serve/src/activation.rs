//! Socket activation: the service's listening socket passed by a service
//! manager (systemd's `LISTEN_FDS` protocol, `sd_listen_fds(3)`), so that a
//! restart refuses no connection.
//!
//! The manager (a `.socket` unit, or `systemd-socket-activate`) binds the
//! address and keeps the socket open across the service's restarts; a
//! client that connects while no instance runs waits in the socket's
//! queue and is answered by the next one. The protocol: the socket is
//! descriptor 3 (`SD_LISTEN_FDS_START`), `LISTEN_FDS` says how many were
//! passed, `LISTEN_PID` names the process they are for (a child that
//! inherited the variables ignores them), `LISTEN_FDNAMES` their names.
//!
//! `baton serve` takes one socket: a TCP stream socket already listening
//! (IPv4 or IPv6: the [`crate::browser`] checks and the token rule need an
//! IP address); anything else is refused with the reason, at start.
//! Written over rustix rather than with a crate (`listenfd`,
//! `sd-notify`): the protocol is three variables and one descriptor, and
//! the checks that matter here (listening, TCP, close-on-exec so that jobs
//! never inherit it) are ours either way.
//!
//! Unix only: there is no such protocol on Windows, where
//! [`inherited_listener`] always answers `None`.

/// The first descriptor a service manager passes (`SD_LISTEN_FDS_START`).
pub const LISTEN_FDS_START: i32 = 3;

/// Why a socket passed by the service manager cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum ActivationError {
    /// `LISTEN_FDS` is not a number.
    #[error("LISTEN_FDS is '{0}': not a number of sockets (socket activation)")]
    BadCount(String),
    /// More than one socket was passed.
    #[error(
        "the service manager passed {0} sockets (LISTEN_FDS); `baton serve` listens on one: \
         give its socket unit a single ListenStream="
    )]
    TooMany(usize),
    /// The passed descriptor is not what the service can serve.
    #[error("the socket passed by the service manager (descriptor {fd}) {reason}")]
    Unusable {
        /// The descriptor.
        fd: i32,
        /// What is wrong with it.
        reason: String,
    },
}

/// What the environment says was passed to this process (pure: the
/// variables' values and this process's id are given).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Passed {
    /// Nothing was passed (no `LISTEN_FDS`, or zero).
    Nothing,
    /// The variables are another process's (`LISTEN_PID` is not ours, or
    /// absent: `sd_listen_fds` ignores them then, and so does the service).
    NotOurs,
    /// One socket, at [`LISTEN_FDS_START`], with its name if it has one.
    One {
        /// `LISTEN_FDNAMES`' first name (`FileDescriptorName=`).
        name: Option<String>,
    },
}

/// Reads the protocol's variables (see the module doc).
pub(crate) fn passed(
    listen_pid: Option<&str>,
    listen_fds: Option<&str>,
    names: Option<&str>,
    pid: u32,
) -> Result<Passed, ActivationError> {
    let Some(count) = listen_fds else {
        return Ok(Passed::Nothing);
    };
    if listen_pid.and_then(|p| p.trim().parse::<u32>().ok()) != Some(pid) {
        return Ok(Passed::NotOurs);
    }
    let count: usize = count
        .trim()
        .parse()
        .map_err(|_| ActivationError::BadCount(count.to_string()))?;
    match count {
        0 => Ok(Passed::Nothing),
        1 => Ok(Passed::One {
            name: names
                .and_then(|n| n.split(':').next())
                .filter(|n| !n.is_empty())
                .map(str::to_string),
        }),
        n => Err(ActivationError::TooMany(n)),
    }
}

/// The listening socket the service manager passed to this process, if it
/// passed one: made close-on-exec (jobs never inherit it) and
/// non-blocking, and the protocol's variables removed from the
/// environment. `None` when nothing was passed (the service binds its
/// `listen` address itself) or the variables name another process.
///
/// Changes the process (its environment, the descriptor): called once, by
/// the binary, before it starts threads; later calls answer `None`.
///
/// # Errors
///
/// [`ActivationError`]: the variables are malformed, several sockets were
/// passed, or the socket is not a listening TCP socket.
pub fn inherited_listener() -> Result<Option<std::net::TcpListener>, ActivationError> {
    let var = |name: &str| std::env::var(name).ok();
    let found = passed(
        var("LISTEN_PID").as_deref(),
        var("LISTEN_FDS").as_deref(),
        var("LISTEN_FDNAMES").as_deref(),
        std::process::id(),
    )?;
    if found == Passed::NotOurs {
        tracing::warn!(
            "LISTEN_FDS is set for another process (LISTEN_PID): not using it, \
             binding the listen address"
        );
    }
    for name in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] {
        // Before any thread runs (see the doc): nothing reads the
        // environment concurrently.
        std::env::remove_var(name);
    }
    match found {
        Passed::Nothing | Passed::NotOurs => Ok(None),
        Passed::One { name } => {
            let listener = take_listener(LISTEN_FDS_START)?;
            tracing::info!(
                fd = LISTEN_FDS_START,
                name = name.as_deref().unwrap_or(""),
                "serving the socket passed by the service manager (socket activation)"
            );
            Ok(Some(listener))
        }
    }
}

#[cfg(unix)]
fn take_listener(fd: i32) -> Result<std::net::TcpListener, ActivationError> {
    use rustix::fd::{BorrowedFd, FromRawFd, OwnedFd};
    use rustix::net::{sockopt, SocketType};
    static TAKEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

    let unusable = |reason: String| ActivationError::Unusable { fd, reason };
    if TAKEN.swap(true, std::sync::atomic::Ordering::SeqCst) {
        return Err(unusable("was taken already".into()));
    }
    {
        // SAFETY: the descriptor is only borrowed for these calls, while
        // nothing else in the process uses or closes it (the manager passed
        // it to this process, which has not touched it yet); a descriptor
        // that is not open makes the first call fail with EBADF.
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
        rustix::io::fcntl_getfd(borrowed).map_err(|e| unusable(format!("is not open: {e}")))?;
        let kind = sockopt::socket_type(borrowed)
            .map_err(|e| unusable(format!("is not a socket: {e}")))?;
        if kind != SocketType::STREAM {
            return Err(unusable(
                "is not a stream socket: use ListenStream= in the socket unit".into(),
            ));
        }
        #[cfg(not(target_vendor = "apple"))]
        if !sockopt::socket_acceptconn(borrowed).unwrap_or(false) {
            return Err(unusable("is not listening".into()));
        }
        rustix::io::fcntl_setfd(borrowed, rustix::io::FdFlags::CLOEXEC)
            .map_err(|e| unusable(format!("cannot be made close-on-exec: {e}")))?;
    }
    // SAFETY: the descriptor is open (checked above) and the process takes
    // ownership of it once (TAKEN): nothing else owns or closes it.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let listener = std::net::TcpListener::from(owned);
    match listener.local_addr() {
        Ok(addr) if addr.is_ipv4() || addr.is_ipv6() => {}
        _ => {
            return Err(unusable(
                "is not a TCP socket (IPv4 or IPv6): use ListenStream=IP:PORT".into(),
            ))
        }
    }
    listener
        .set_nonblocking(true)
        .map_err(|e| unusable(format!("cannot be made non-blocking: {e}")))?;
    Ok(listener)
}

#[cfg(not(unix))]
fn take_listener(fd: i32) -> Result<std::net::TcpListener, ActivationError> {
    Err(ActivationError::Unusable {
        fd,
        reason: "cannot be used: socket activation (LISTEN_FDS) is for unix systems".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::{passed, ActivationError, Passed};

    #[test]
    fn no_listen_fds_means_nothing_passed() {
        assert_eq!(passed(None, None, None, 7).unwrap(), Passed::Nothing);
        assert_eq!(
            passed(Some("7"), Some("0"), None, 7).unwrap(),
            Passed::Nothing
        );
    }

    #[test]
    fn variables_for_another_process_are_not_ours() {
        assert_eq!(
            passed(Some("8"), Some("1"), None, 7).unwrap(),
            Passed::NotOurs
        );
        assert_eq!(passed(None, Some("1"), None, 7).unwrap(), Passed::NotOurs);
        assert_eq!(
            passed(Some("x"), Some("1"), None, 7).unwrap(),
            Passed::NotOurs
        );
    }

    #[test]
    fn one_socket_with_its_name() {
        assert_eq!(
            passed(Some("7"), Some("1"), Some("http"), 7).unwrap(),
            Passed::One {
                name: Some("http".into())
            }
        );
        assert_eq!(
            passed(Some("7"), Some("1"), None, 7).unwrap(),
            Passed::One { name: None }
        );
    }

    #[test]
    fn several_sockets_or_a_bad_count_are_refused() {
        assert!(matches!(
            passed(Some("7"), Some("2"), Some("a:b"), 7),
            Err(ActivationError::TooMany(2))
        ));
        let e = passed(Some("7"), Some("many"), None, 7).unwrap_err();
        assert_eq!(
            e.to_string(),
            "LISTEN_FDS is 'many': not a number of sockets (socket activation)"
        );
    }
}
