//! Waiting for a byte-range lock by trying it at growing intervals: where
//! the kernel cannot bound a blocking lock wait (macOS has no per-thread
//! timers to interrupt `F_OFD_SETLKW`, and baton takes no signal from the
//! application to do it; wine does not complete pending `LockFileEx`
//! requests).
//!
//! The pause starts at 1 ms and doubles up to [`MAX_PAUSE`], so a lock freed
//! during a long wait is taken at most that late; waiters stay in their FIFO
//! order regardless, because a newcomer never takes a slot while anyone
//! waits (`docs/src/design/locking.md`, "Acquiring"). A cancel wakes the waiting thread at
//! once (it parks between attempts and the token unparks it).

use std::io;
use std::time::{Duration, Instant};

use crate::cancel::CancelToken;
use crate::ofd::cancelled;

/// Longest pause between two attempts.
pub(crate) const MAX_PAUSE: Duration = Duration::from_millis(50);

/// Calls `attempt` until it succeeds (`Ok(true)`), `deadline` passes
/// (`Ok(false)`) or `cancel` is cancelled (the [`cancelled`] error).
pub(crate) fn until(
    deadline: Option<Instant>,
    cancel: Option<&CancelToken>,
    mut attempt: impl FnMut() -> io::Result<bool>,
) -> io::Result<bool> {
    let _wake = match cancel {
        Some(token) => {
            let me = std::thread::current();
            if token.attach(Box::new(move || me.unpark())) {
                return Err(cancelled());
            }
            Some(Detach(token))
        }
        None => None,
    };
    let mut pause = Duration::from_millis(1);
    loop {
        if attempt()? {
            return Ok(true);
        }
        if cancel.is_some_and(CancelToken::is_cancelled) {
            return Err(cancelled());
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            return Ok(false);
        }
        std::thread::park_timeout(deadline.map_or(pause, |d| pause.min(d - now)));
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

/// Forgets the waiter registered with a token when the wait ends.
struct Detach<'a>(&'a CancelToken);

impl Drop for Detach<'_> {
    fn drop(&mut self) {
        self.0.detach();
    }
}
