//! What a guardian is started with and ends with: its [`GuardSpec`] (the
//! program, and the [`Fence`] its supervisor vouches through) and its exit
//! codes. Below both the guardian (`guardian.rs`) and the rest of
//! [`guard`](super), which use it.

#[cfg(unix)]
use std::io;
#[cfg(unix)]
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

#[cfg(unix)]
use rustix::io::Errno;
#[cfg(unix)]
use rustix::net::send;

#[cfg(unix)]
use crate::sys::SEND_FLAGS;

/// The first argument that makes a program run `guardian_main` (Unix).
pub const GUARD_ARG: &str = "__baton-guard";

/// Exit code of a guardian that was disarmed: the command ended normally.
pub const GUARD_DISARMED: i32 = 0;
/// Exit code of a guardian that stopped the command because its supervisor
/// stopped vouching for it in time (it stalled, or lost its session).
pub const GUARD_FENCED: i32 = 3;
/// Exit code of a guardian that stopped the command because its supervisor
/// died.
pub const GUARD_ORPHANED: i32 = 4;

/// How a guardian is started, and who vouches for the supervisor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuardSpec {
    /// The program to execute with [`GUARD_ARG`]: one whose `main` calls
    /// [`guardian_main`](crate::guardian_main) for it (`/proc/self/exe` for baton's binaries).
    pub program: PathBuf,
    /// The dead-man's switch fed by the supervisor's proofs of liveness.
    pub fence: Fence,
}

impl GuardSpec {
    /// The program running now (`/proc/self/exe`: the same file even if it
    /// was replaced on disk meanwhile; on macOS its path), whose `main` must call
    /// [`guardian_main`](crate::guardian_main) when its first argument is [`GUARD_ARG`].
    pub fn this_program(fence: Fence) -> GuardSpec {
        GuardSpec {
            program: crate::sys::this_program(),
            fence,
        }
    }
}

/// A dead-man's switch: the command may run until the earliest of its
/// sources' deadlines; each [`FenceSource::vouch`] moves its source's
/// deadline to the proof's sending time plus the bound. Clones share it.
#[derive(Clone)]
pub struct Fence {
    shared: Arc<FenceShared>,
}

impl std::fmt::Debug for Fence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fence")
            .field("bound", &self.shared.bound)
            .finish()
    }
}

impl PartialEq for Fence {
    fn eq(&self, other: &Fence) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }
}

impl Eq for Fence {}

struct FenceShared {
    bound: Duration,
    state: Mutex<FenceState>,
}

#[derive(Default)]
pub(super) struct FenceState {
    /// Each source's deadline (monotonic nanoseconds).
    sources: Vec<u64>,
    /// The armed guardian's socket, while there is one.
    #[cfg(unix)]
    pub(super) socket: Option<Arc<OwnedFd>>,
    /// The deadline the guardian was last told.
    pub(super) told: u64,
}

impl FenceState {
    /// The earliest deadline of the sources.
    pub(super) fn until(&self) -> Option<u64> {
        self.sources.iter().copied().min()
    }
}

impl Fence {
    /// A fence that lets the command run at most `bound` past the sending
    /// of the last proof of each source. With no source, only the
    /// supervisor's death stops the command.
    pub fn new(bound: Duration) -> Fence {
        Fence {
            shared: Arc::new(FenceShared {
                bound,
                state: Mutex::new(FenceState::default()),
            }),
        }
    }

    /// The bound.
    pub fn bound(&self) -> Duration {
        self.shared.bound
    }

    /// A new source of proofs (one per database session, say), vouching
    /// from now: its deadline starts at now plus the bound.
    pub fn source(&self) -> FenceSource {
        let mut s = self.lock();
        s.sources
            .push(mono_ns().saturating_add(nanos(self.shared.bound)));
        FenceSource {
            fence: self.clone(),
            index: s.sources.len() - 1,
        }
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, FenceState> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Tells the guardian a later deadline, if there is one.
    #[cfg(unix)]
    fn tell(state: &mut FenceState) {
        let (Some(until), Some(socket)) = (state.until(), state.socket.as_ref()) else {
            return;
        };
        if until > state.told && write_all(socket, format!("F {until}\n").as_bytes()).is_ok() {
            state.told = until;
        }
    }

    /// No guardian runs on Windows ([`RunSpec::guard`](crate::RunSpec::guard)
    /// is refused there): nobody to tell.
    #[cfg(windows)]
    fn tell(state: &mut FenceState) {
        state.told = state.told.max(state.until().unwrap_or(0));
    }
}

/// One source of a [`Fence`].
#[derive(Clone, Debug)]
pub struct FenceSource {
    fence: Fence,
    index: usize,
}

impl FenceSource {
    /// The supervisor was alive, and whatever this source watches (its
    /// database session) answered a proof sent at `sent`: the command may
    /// run until `sent` plus the bound.
    pub fn vouch(&self, sent: Instant) {
        let until = mono_ns()
            .saturating_sub(nanos(sent.elapsed()))
            .saturating_add(nanos(self.fence.shared.bound));
        let mut s = self.fence.lock();
        if let Some(d) = s.sources.get_mut(self.index) {
            *d = (*d).max(until);
        }
        Fence::tell(&mut s);
    }
}

/// Monotonic nanoseconds: on Unix `CLOCK_MONOTONIC`, the same clock in
/// every process of the machine (what `Instant` uses on Linux).
pub(super) fn mono_ns() -> u64 {
    crate::sys::mono_ns()
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Writes all of `bytes` (a message is far below the socket's buffer);
/// never raises `SIGPIPE`.
#[cfg(unix)]
pub(super) fn write_all(socket: &OwnedFd, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        match send(socket.as_fd(), bytes, SEND_FLAGS) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
            Ok(n) => bytes = &bytes[n..],
            Err(Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fence_takes_the_earliest_source_and_never_moves_back() {
        let fence = Fence::new(Duration::from_secs(7));
        let a = fence.source();
        let b = fence.source();
        let start = fence.lock().until().unwrap_or(0);
        a.vouch(Instant::now() + Duration::from_secs(0));
        // b has not vouched again: the deadline is still b's first one.
        let after_a = fence.lock().until().unwrap_or(0);
        assert!(after_a >= start && after_a <= start + 1_000_000_000);
        let old = Instant::now().checked_sub(Duration::from_secs(60));
        if let Some(old) = old {
            b.vouch(old);
            assert_eq!(
                fence.lock().until().unwrap_or(0),
                after_a,
                "an old proof changes nothing"
            );
        }
        b.vouch(Instant::now());
        assert!(fence.lock().until().unwrap_or(0) >= after_a);
    }
}
