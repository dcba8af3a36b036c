//! One session: who it is (the `baton mcp` process and its client), what it
//! holds (named locks, path reservations) and what it waits for. Everything
//! is held by this process's kernel locks: when the process ends, however it
//! ends, the kernel releases it all; [`Session::close`] releases it at once
//! when the client closes stdin.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use baton_lock::reserve::{HeldReservation, ReservationStore};
use baton_lock::{BatonDir, CancelToken, LockGuard, ProcessIdentity};

/// What `baton mcp` was started with.
#[derive(Clone, Debug)]
pub struct Config {
    /// The baton dir: locks, state-file locks, reservations.
    pub dir: BatonDir,
    /// Where workspaces are made and recorded (`baton_git::workspaces_of`).
    pub workspaces: BatonDir,
    /// The repository's work-tree top: state files and paths are relative to it.
    pub repo: PathBuf,
    /// The reservations' namespace: the repository's identity (normalized
    /// origin URL, else its canonical common git dir).
    pub repo_key: String,
    /// The agent's name (`--agent`); `None`: the client's name from
    /// `initialize` and the client's pid.
    pub agent: Option<String>,
    /// Where path reservations are kept: the baton dir's (the default), or
    /// a database's (`baton mcp --backend`), shared by every machine using it.
    pub reservations: Arc<dyn ReservationStore>,
}

/// The identity of this `baton mcp` process and its client.
#[derive(Clone, Debug)]
pub struct Identity {
    /// This process.
    pub pid: i32,
    /// The client (the parent process), if it could be told.
    pub client_pid: Option<i32>,
    /// The client's identity (pid, start time, boot id): whose descendants
    /// count as the holder of this session's reservations.
    pub principal: Option<ProcessIdentity>,
    /// Unique per `baton mcp` process.
    pub session: String,
    /// This host.
    pub host: String,
}

impl Identity {
    /// This process's identity.
    pub fn current() -> Identity {
        let pid = i32::try_from(std::process::id()).unwrap_or(i32::MAX);
        let client_pid = baton_lock::parent_of(pid).filter(|p| *p > 0);
        Identity {
            pid,
            client_pid,
            principal: client_pid.and_then(ProcessIdentity::of_pid),
            session: format!("mcp-{}", baton_lock::new_run_id()),
            host: baton_lock::hostname().to_string(),
        }
    }
}

/// A session's state, shared by its tools.
pub struct Session {
    /// How it was started.
    pub config: Config,
    /// Who it is.
    pub identity: Identity,
    /// The client's name from `initialize`, once known.
    client_name: OnceLock<String>,
    /// Named locks held, by name.
    locks: Mutex<BTreeMap<String, LockGuard>>,
    /// Reservations held, by token.
    reservations: Mutex<BTreeMap<u64, Held>>,
    /// The waits in progress, cancelled by [`Session::close`].
    waits: Mutex<Vec<CancelToken>>,
    /// Set by [`Session::close`]: nothing more is taken.
    closed: AtomicBool,
}

/// Locks a mutex, going on with the data if another thread panicked while
/// holding it (the maps stay consistent: every change is one insert or remove).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Session {
    /// A new session of this process.
    pub fn new(config: Config) -> Session {
        Session {
            config,
            identity: Identity::current(),
            client_name: OnceLock::new(),
            locks: Mutex::new(BTreeMap::new()),
            reservations: Mutex::new(BTreeMap::new()),
            waits: Mutex::new(Vec::new()),
            closed: AtomicBool::new(false),
        }
    }

    /// The baton dir.
    pub fn dir(&self) -> &BatonDir {
        &self.config.dir
    }

    /// The repository's work-tree top.
    pub fn repo(&self) -> &Path {
        &self.config.repo
    }

    /// Records the client's name from `initialize` (the first one counts).
    pub fn set_client_name(&self, name: &str) {
        let _ = self.client_name.set(name.to_string());
    }

    /// The agent's name: `--agent`, else the client's name and its pid
    /// (`claude-code-4242`), else `mcp-<pid>`.
    pub fn agent(&self) -> String {
        if let Some(a) = &self.config.agent {
            return a.clone();
        }
        let pid = self.identity.client_pid.unwrap_or(self.identity.pid);
        match self.client_name.get() {
            Some(name) if !name.is_empty() => format!("{name}-{pid}"),
            _ => format!("mcp-{pid}"),
        }
    }

    /// Whether the session has ended (stdin closed).
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// A cancel token for a wait, cancelled when the session closes.
    pub fn wait_token(&self) -> CancelToken {
        let token = CancelToken::new();
        let mut waits = lock(&self.waits);
        waits.retain(|t| !t.is_cancelled());
        if self.is_closed() {
            token.cancel();
        }
        waits.push(token.clone());
        token
    }

    /// Keeps a granted lock; releases it instead (and says `false`) if the
    /// session has closed meanwhile, or one of that name is held.
    pub fn keep_lock(&self, name: String, guard: LockGuard) -> bool {
        let mut locks = lock(&self.locks);
        if self.is_closed() || locks.contains_key(&name) {
            drop(locks);
            if let Err(e) = guard.release() {
                tracing::warn!(lock = %name, "releasing a lock the session cannot keep: {e}");
            }
            return false;
        }
        locks.insert(name, guard);
        true
    }

    /// Takes a held lock out of the session.
    pub fn take_lock(&self, name: &str) -> Option<LockGuard> {
        lock(&self.locks).remove(name)
    }

    /// Whether the session holds the lock `name`.
    pub fn holds_lock(&self, name: &str) -> bool {
        lock(&self.locks).contains_key(name)
    }

    /// The reservations held, for a change.
    pub(crate) fn reservations(&self) -> MutexGuard<'_, BTreeMap<u64, Held>> {
        lock(&self.reservations)
    }

    /// Ends the session: no wait goes on, nothing more is taken, and every
    /// lock and reservation is let go now. When the client has died (killed:
    /// its end closed stdin), they are let go as a dead holder's, so that
    /// the next holder is told `previous_holder_died`: locks are abandoned,
    /// reservations left to the kernel, which frees them as this process
    /// exits, moments later. Otherwise (the client closed stdin) released.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        for t in lock(&self.waits).drain(..) {
            t.cancel();
        }
        let client_died = self
            .identity
            .principal
            .as_ref()
            .is_some_and(|p| p.liveness() == baton_lock::Liveness::Dead);
        let locks = std::mem::take(&mut *lock(&self.locks));
        for (name, guard) in locks {
            let done = if client_died {
                guard.abandon()
            } else {
                guard.release()
            };
            if let Err(e) = done {
                tracing::warn!(lock = %name, "letting go at the end of the session: {e}");
            }
        }
        let held = std::mem::take(&mut *lock(&self.reservations));
        for (_, h) in held {
            if client_died {
                h.abandon();
            } else {
                h.release_quietly();
            }
        }
    }
}

/// A reservation held by the session.
pub(crate) struct Held(pub(crate) Box<dyn HeldReservation>);

impl Held {
    /// Releases it; a failure is logged (the liveness lock is freed anyway,
    /// so others see the row dead).
    pub(crate) fn release_quietly(self) {
        let token = self.0.token();
        if let Err(e) = self.0.release() {
            tracing::warn!(token, "releasing a reservation: {e}");
        }
    }

    /// Leaves it as a dead holder's (its client died; the session is
    /// ending): its row stays, so that the next holder is told
    /// `previous_holder_died` ([`HeldReservation::abandon`]).
    pub(crate) fn abandon(self) {
        self.0.abandon();
    }
}
