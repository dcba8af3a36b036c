//! Linux: deadline waits with a per-thread POSIX timer signal, inotify for
//! semaphore waiters (`watch.rs`), and `/proc` for holders the lock files
//! do not name (`procfs.rs`).
//!
//! Blocking waits happen in the kernel (`F_OFD_SETLKW`). A wait with a
//! deadline arms a per-thread POSIX timer that delivers a dedicated real-time
//! signal to the waiting thread; the signal's handler does nothing and is
//! installed without `SA_RESTART`, so the blocked `fcntl` returns `EINTR` and
//! the wait loop sees that the deadline has passed. The timer re-fires every
//! few milliseconds after the deadline, which closes the window where the
//! signal arrives just before the thread enters `fcntl`.

mod procfs;
mod watch;

pub(crate) use procfs::{holders_elsewhere, kernel_holders};
pub(crate) use watch::{try_inotify, watch_slots};

use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

use crate::cancel::CancelToken;
use crate::fork_safe::ForkSafe;
use crate::ofd::{cancelled, Kind};

/// Whether byte-range locks work here: on Linux OFD locks always do
/// (Linux 3.15 and later).
pub(crate) fn locks_work(_dir: &std::path::Path) -> Result<(), String> {
    Ok(())
}

/// Blocks in the kernel until the lock is taken (`Ok(true)`) or `deadline`
/// passes (`Ok(false)`); a cancel ends it with [`cancelled`].
pub(crate) fn lock_wait(
    file: &File,
    kind: Kind,
    start: u64,
    len: u64,
    deadline: Option<Instant>,
    cancel: Option<&CancelToken>,
) -> io::Result<bool> {
    let _alarm = match Alarm::for_wait(deadline, cancel)? {
        AlarmFor::Expired => return Ok(false),
        AlarmFor::Cancelled => return Err(cancelled()),
        AlarmFor::Armed(alarm) => alarm,
    };
    loop {
        match super::lock_blocking(file, kind, start, len) {
            Ok(()) => return Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => {
                if cancel.is_some_and(CancelToken::is_cancelled) {
                    return Err(cancelled());
                }
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return Ok(false);
                }
            }
            Err(e) => return Err(e),
        }
    }
}

/// What [`Alarm::for_wait`] found.
pub(crate) enum AlarmFor {
    /// The deadline has already passed.
    Expired,
    /// The token was cancelled before the wait.
    Cancelled,
    /// Wait; the alarm (if any) interrupts the thread at the deadline or on cancel.
    Armed(Option<Alarm>),
}

/// The per-thread timer of one wait, registered with its cancel token.
pub(crate) struct Alarm {
    timer: DeadlineAlarm,
    cancel: Option<CancelToken>,
}

impl Alarm {
    /// Prepares a blocking wait of this thread: a timer armed for `deadline`
    /// (disarmed when there is none) that `cancel` can fire at once.
    pub(crate) fn for_wait(
        deadline: Option<Instant>,
        cancel: Option<&CancelToken>,
    ) -> io::Result<AlarmFor> {
        let after = match deadline {
            None => None,
            Some(d) => {
                let now = Instant::now();
                if now >= d {
                    return Ok(AlarmFor::Expired);
                }
                Some(d - now)
            }
        };
        if cancel.is_some_and(CancelToken::is_cancelled) {
            return Ok(AlarmFor::Cancelled);
        }
        if after.is_none() && cancel.is_none() {
            return Ok(AlarmFor::Armed(None));
        }
        let timer = DeadlineAlarm::arm(after)?;
        let alarm = Alarm {
            cancel: cancel.cloned(),
            timer,
        };
        if let Some(token) = &alarm.cancel {
            let id = TimerId(alarm.timer.timer as usize);
            if token.attach(Box::new(move || id.fire_now())) {
                return Ok(AlarmFor::Cancelled);
            }
        }
        Ok(AlarmFor::Armed(Some(alarm)))
    }
}

impl Drop for Alarm {
    fn drop(&mut self) {
        // Before the timer is deleted: `cancel` holds the token's lock while
        // it fires the timer, so it never touches a deleted one.
        if let Some(token) = &self.cancel {
            token.detach();
        }
    }
}

/// A timer id that can be sent to the thread that cancels.
struct TimerId(usize);

impl TimerId {
    fn fire_now(&self) {
        let spec = libc::itimerspec {
            it_interval: timespec(REFIRE),
            it_value: timespec(Duration::from_nanos(1)),
        };
        // SAFETY: the id is a live timer: it is registered with the token only
        // between its creation and, under the token's lock, before its deletion.
        unsafe {
            libc::timer_settime(self.0 as libc::timer_t, 0, &spec, std::ptr::null_mut());
        }
    }
}

/// After the first expiry the alarm repeats at this interval until disarmed.
const REFIRE: Duration = Duration::from_millis(2);

/// A per-thread timer that interrupts blocking system calls of this thread
/// once a deadline passes. Disarmed and deleted on drop.
struct DeadlineAlarm {
    timer: libc::timer_t,
    signal: libc::c_int,
    old_mask: libc::sigset_t,
}

impl DeadlineAlarm {
    /// A timer for this thread that fires after `after` and then every
    /// [`REFIRE`]; created disarmed when `after` is `None`.
    fn arm(after: Option<Duration>) -> io::Result<Self> {
        let signal = wakeup_signal()?;
        // SAFETY: sigset_t is a plain C type; sigemptyset/sigaddset initialise it.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above; old_mask is written by pthread_sigmask before use.
        let mut old_mask: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: pointers are to live, properly sized sigset_t values; unblocking
        // our own wakeup signal in the current thread only affects this thread.
        unsafe {
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, signal);
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, &mut old_mask);
        }
        // SAFETY: sigevent is a plain C struct; all-zero is valid before we fill it.
        let mut sev: libc::sigevent = unsafe { std::mem::zeroed() };
        sev.sigev_notify = libc::SIGEV_THREAD_ID;
        sev.sigev_signo = signal;
        sev.sigev_notify_thread_id = rustix::thread::gettid().as_raw_nonzero().get();
        let mut timer: libc::timer_t = std::ptr::null_mut();
        // SAFETY: `sev` and `timer` are valid for the call; on success the kernel
        // gives us a timer id that we own and delete in Drop.
        let rc = unsafe { libc::timer_create(libc::CLOCK_MONOTONIC, &mut sev, &mut timer) };
        if rc == -1 {
            let err = io::Error::last_os_error();
            restore_mask(&old_mask);
            return Err(err);
        }
        let alarm = DeadlineAlarm {
            timer,
            signal,
            old_mask,
        };
        let Some(after) = after else {
            return Ok(alarm);
        };
        let spec = libc::itimerspec {
            it_interval: timespec(REFIRE),
            it_value: timespec(after.max(Duration::from_nanos(1))),
        };
        // SAFETY: `alarm.timer` is the live timer created above; `spec` is valid.
        let rc = unsafe { libc::timer_settime(alarm.timer, 0, &spec, std::ptr::null_mut()) };
        if rc == -1 {
            return Err(io::Error::last_os_error());
        }
        Ok(alarm)
    }
}

impl Drop for DeadlineAlarm {
    fn drop(&mut self) {
        // SAFETY: the timer was created by timer_create and is deleted exactly once.
        unsafe {
            libc::timer_delete(self.timer);
        }
        // A signal may still be pending for this thread; consume it so it does
        // not interrupt an unrelated system call later.
        drain_pending(self.signal);
        restore_mask(&self.old_mask);
    }
}

fn restore_mask(old: &libc::sigset_t) {
    // SAFETY: `old` is a mask previously returned by pthread_sigmask.
    unsafe {
        libc::pthread_sigmask(libc::SIG_SETMASK, old, std::ptr::null_mut());
    }
}

fn drain_pending(signal: libc::c_int) {
    // SAFETY: plain sigset manipulation on local values; sigtimedwait with a
    // zero timeout only dequeues our own pending wakeup signal, if any.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, signal);
        let zero = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        while libc::sigtimedwait(&set, std::ptr::null_mut(), &zero) == signal {}
    }
}

fn timespec(d: Duration) -> libc::timespec {
    libc::timespec {
        tv_sec: libc::time_t::try_from(d.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: libc::c_long::from(d.subsec_nanos() as i32),
    }
}

extern "C" fn on_wakeup(_: libc::c_int) {}

/// The real-time signal used to interrupt deadline waits, installed once.
///
/// We pick the highest real-time signal whose disposition is still the
/// default, so we never take over a signal the application uses.
fn wakeup_signal() -> io::Result<libc::c_int> {
    // The choice is kept in an atomic, not a Once: a child forked while
    // another thread chose must not hang on a Once copied running. A child
    // inherits the signal's handler, so the parent's choice holds there; a
    // child whose parent was still choosing chooses again under a fresh
    // lock (see `fork_safe`).
    const UNSET: i32 = 0;
    const NONE: i32 = -1;
    static SIGNAL: AtomicI32 = AtomicI32::new(UNSET);
    static CHOOSING: ForkSafe<()> = ForkSafe::new(());
    let known = |v: i32| match v {
        NONE => Some(None),
        UNSET => None,
        sig => Some(Some(sig)),
    };
    let chosen = match known(SIGNAL.load(Ordering::Acquire)) {
        Some(chosen) => chosen,
        None => {
            let _choosing = CHOOSING.lock();
            match known(SIGNAL.load(Ordering::Acquire)) {
                Some(chosen) => chosen,
                None => {
                    let chosen = choose_wakeup_signal();
                    SIGNAL.store(chosen.unwrap_or(NONE), Ordering::Release);
                    chosen
                }
            }
        }
    };
    chosen.ok_or_else(|| io::Error::other("no free real-time signal to time out lock waits"))
}

/// Installs the wake-up handler on the highest real-time signal still at its
/// default disposition.
fn choose_wakeup_signal() -> Option<libc::c_int> {
    {
        let (lo, hi) = (libc::SIGRTMIN() + 2, libc::SIGRTMAX());
        for sig in (lo..=hi).rev() {
            // SAFETY: querying and setting a signal action with valid pointers;
            // the handler is an `extern "C"` function that does nothing, which is
            // async-signal-safe.
            unsafe {
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
                    continue;
                }
                if old.sa_sigaction != libc::SIG_DFL {
                    continue;
                }
                let mut act: libc::sigaction = std::mem::zeroed();
                act.sa_sigaction = on_wakeup as *const () as libc::sighandler_t;
                act.sa_flags = 0; // no SA_RESTART: the blocked fcntl must return EINTR
                libc::sigemptyset(&mut act.sa_mask);
                if libc::sigaction(sig, &act, std::ptr::null_mut()) == 0 {
                    return Some(sig);
                }
            }
        }
        None
    }
}
