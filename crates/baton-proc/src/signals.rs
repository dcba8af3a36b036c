//! Catching the termination signals while a child runs, through a self-pipe.
//!
//! See `docs/src/design/signals.md` for why it works this way.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use signal_hook::consts::signal::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};
use signal_hook::iterator::backend::SignalDelivery;
use signal_hook::iterator::exfiltrator::SignalOnly;

/// The signals a supervisor forwards to its child's process group.
pub const FORWARDED_SIGNALS: [i32; 4] = [SIGINT, SIGTERM, SIGHUP, SIGQUIT];

/// What this process did with a signal before baton-proc first touched it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Disposition {
    Default,
    Ignored,
    Handled,
}

/// Process-wide state, set up on first use and kept for the life of the process.
struct Global {
    /// Signals to forward: those not ignored when we started (honours `nohup` and `cmd &`).
    forwarded: Vec<i32>,
    /// True while no supervisor runs: then the signals that had their default disposition
    /// get it back through `register_conditional_default`, since signal-hook cannot uninstall
    /// its handler.
    idle: Arc<AtomicBool>,
    /// Supervisors running now (several threads may each supervise a child).
    active: usize,
}

static GLOBAL: Mutex<Option<Global>> = Mutex::new(None);

/// Ask the kernel for the current disposition of `signal`, without changing it.
#[allow(unsafe_code)] // sigaction(2), read only: the SAFETY comment below
fn disposition(signal: i32) -> io::Result<Disposition> {
    // SAFETY: `sigaction` with a null new action only reads the disposition into `old`, a
    // zero-initialised plain C struct we own; nothing is installed or changed.
    let (rc, handler) = unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        let rc = libc::sigaction(signal, std::ptr::null(), &mut old);
        (rc, old.sa_sigaction)
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(match handler {
        libc::SIG_DFL => Disposition::Default,
        libc::SIG_IGN => Disposition::Ignored,
        _ => Disposition::Handled,
    })
}

fn init_global() -> io::Result<Global> {
    let idle = Arc::new(AtomicBool::new(true));
    let mut forwarded = Vec::new();
    for signal in FORWARDED_SIGNALS {
        match disposition(signal)? {
            Disposition::Ignored => continue,
            Disposition::Default => {
                // Kept for the life of the process: when no supervisor runs, the signal acts
                // as if no handler had ever been installed.
                signal_hook::flag::register_conditional_default(signal, Arc::clone(&idle))?;
            }
            // Someone else handles it; signal-hook's handler chains to theirs.
            Disposition::Handled => {}
        }
        forwarded.push(signal);
    }
    Ok(Global {
        forwarded,
        idle,
        active: 0,
    })
}

/// Catches the forwarded signals for as long as it lives; dropping it unregisters the
/// handlers and, once no supervisor is left, gives the signals their previous behaviour back.
pub(crate) struct SignalCatcher {
    delivery: SignalDelivery<UnixStream, SignalOnly>,
}

impl SignalCatcher {
    /// Start catching [`FORWARDED_SIGNALS`] (except those this process ignored to begin with).
    pub(crate) fn new() -> io::Result<Self> {
        let forwarded = {
            let mut global = GLOBAL.lock().unwrap_or_else(PoisonError::into_inner);
            if global.is_none() {
                *global = Some(init_global()?);
            }
            let Some(global) = global.as_mut() else {
                return Err(io::Error::other(
                    "signal state missing after initialisation",
                ));
            };
            global.active += 1;
            global.idle.store(false, Ordering::SeqCst);
            global.forwarded.clone()
        };
        // Build `Self` at once so that an error below still runs `Drop` and rebalances `active`.
        let delivery = UnixStream::pair().and_then(|(read, write)| {
            SignalDelivery::with_pipe(read, write, SignalOnly, forwarded)
        });
        match delivery {
            Ok(delivery) => Ok(SignalCatcher { delivery }),
            Err(err) => {
                leave_global();
                Err(err)
            }
        }
    }

    /// The read end of the self-pipe: readable when a signal arrived.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.delivery.get_read().as_fd()
    }

    /// The signals that arrived since the last call (each at most once, in no particular order).
    pub(crate) fn pending(&mut self) -> Vec<i32> {
        self.delivery.pending().collect()
    }
}

fn leave_global() {
    let mut global = GLOBAL.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(global) = global.as_mut() {
        global.active = global.active.saturating_sub(1);
        if global.active == 0 {
            global.idle.store(true, Ordering::SeqCst);
        }
    }
}

impl Drop for SignalCatcher {
    fn drop(&mut self) {
        // Default behaviour comes back first, then `delivery` is dropped right after this
        // body, which unregisters our actions (their `SigId`s) from signal-hook.
        leave_global();
    }
}
