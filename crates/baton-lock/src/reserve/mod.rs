//! Path reservations: a lock manager for paths and globs of one repository,
//! on top of the kernel locks (docs/src/design/architecture.md, decision 18).
//!
//! A reservation names paths or globs inside a repository ([`Space`]),
//! exclusive (the default) or shared. Two reservations conflict when some
//! file could be covered by both ([`Pattern::overlaps`]) and at least one
//! is exclusive; disjoint ones never wait on each other. A request for
//! several patterns is one row: granted all at once or not at all, so two
//! requesters asking overlapping sets in different orders never deadlock.
//! Overlapping requests are served first come, first served; each grant
//! gets a fencing token larger than any before in the space; a holder that
//! dies releases at once (its row's liveness is a kernel lock) and the next
//! grant over its paths learns it ([`Reservation::previous_holder_died`]).
//!
//! Reservations are advice for the agents and scripts that ask: one that
//! never asks is not stopped, except at commit time by the pre-commit guard
//! (`baton git guard`). The protocol, and what it does and does not
//! guarantee, are in `docs/src/design/reservations.md`.
//!
//! ```no_run
//! use baton_lock::reserve::{reserve, ReservationHolder, ReserveRequest, Space};
//! use baton_lock::{BatonDir, Mode, WaitPolicy};
//!
//! let dir = BatonDir::resolve(None)?;
//! let space = Space::new("https://example.com/repo.git", "/src/repo");
//! let req = ReserveRequest {
//!     patterns: vec![space.pattern("src/**/*.rs")?, space.pattern("Cargo.toml")?],
//!     mode: Mode::Exclusive,
//!     wait: WaitPolicy::AtMost(std::time::Duration::from_secs(10)),
//!     holder: ReservationHolder::current("alice@host", "session-1"),
//!     cancel: None,
//! };
//! let held = reserve(&dir, &space, &req)?;
//! // ... edit the files; pass held.token() to stores that check fencing ...
//! held.release()?;
//! # Ok::<(), baton_lock::reserve::ReserveError>(())
//! ```

mod engine;
mod error;
mod pattern;
pub mod rules;
mod space;
mod store;
mod table;

use serde::{Deserialize, Serialize};

pub use engine::{break_reservation, check, check_files, reservations, reserve, Reservation};
pub use error::ReserveError;
pub use pattern::Pattern;
pub use space::Space;
pub use store::{HeldReservation, LocalReservations, ReservationStore};

use crate::cancel::CancelToken;
use crate::identity::ProcessIdentity;
use crate::request::Mode;
use crate::wait::WaitPolicy;

/// Who holds (or waits for) a reservation: for people and tools.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReservationHolder {
    /// Who acts: `claude-code-1234`, `alice@host` ...
    pub agent: String,
    /// The process holding it (`baton reserve`, `baton mcp`).
    pub pid: i32,
    /// For `baton mcp`: its client (the parent of `baton mcp`).
    #[serde(default)]
    pub client_pid: Option<i32>,
    /// The host it runs on.
    pub host: String,
    /// RFC 3339 UTC: when granted (or queued, while waiting). The engine
    /// sets it.
    pub since: String,
    /// Why, free text.
    #[serde(default)]
    pub reason: Option<String>,
    /// The process whose descendants count as the holder itself (the
    /// pre-commit guard's "own commit"): `baton reserve`'s own identity for
    /// `reserve -- CMD`, the MCP client's identity for `baton mcp`.
    #[serde(default)]
    pub principal: Option<ProcessIdentity>,
    /// The session: reservations of one session never conflict with each
    /// other.
    pub session: String,
}

impl ReservationHolder {
    /// A holder for the calling process: its pid and host, itself as the
    /// principal, no reason.
    pub fn current(agent: impl Into<String>, session: impl Into<String>) -> ReservationHolder {
        let me = ProcessIdentity::current();
        ReservationHolder {
            agent: agent.into(),
            pid: me.pid,
            client_pid: None,
            host: crate::identity::hostname().to_string(),
            since: now_rfc3339(),
            reason: None,
            principal: Some(me),
            session: session.into(),
        }
    }
}

/// What to reserve and for whom.
#[derive(Clone, Debug)]
pub struct ReserveRequest {
    /// At least one; all are granted together or none.
    pub patterns: Vec<Pattern>,
    /// [`Mode::Exclusive`] (the default) or [`Mode::Shared`]; a semaphore
    /// mode counts as exclusive.
    pub mode: Mode,
    /// How long to wait.
    pub wait: WaitPolicy,
    /// Who asks.
    pub holder: ReservationHolder,
    /// Stops a wait ([`ReserveError::Cancelled`]).
    pub cancel: Option<CancelToken>,
}

/// One live row of the table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReservationRecord {
    /// Arrival order in the space.
    pub ticket: u64,
    /// The fencing token, once granted (per space, strictly increasing).
    pub token: Option<u64>,
    /// What it covers.
    pub patterns: Vec<Pattern>,
    /// `"exclusive"` or `"shared"`.
    #[serde(with = "mode_name")]
    pub mode: Mode,
    /// `false`: still waiting.
    pub granted: bool,
    /// Who.
    pub holder: ReservationHolder,
}

/// A conflict reported to a caller that did not get what it asked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Conflict {
    /// The other reservation's pattern that overlaps.
    pub pattern: Pattern,
    /// The other reservation's mode.
    #[serde(with = "mode_name")]
    pub mode: Mode,
    /// Who holds or waits for it.
    pub holder: ReservationHolder,
    /// `false`: an earlier waiter the caller queues behind.
    pub granted: bool,
}

impl Conflict {
    /// One line for people: the path, and who holds it (agent, pid, host,
    /// since, reason).
    pub fn describe(&self) -> String {
        let h = &self.holder;
        let verb = if self.granted {
            "reserved"
        } else {
            "waited for (earlier in line)"
        };
        let reason = h
            .reason
            .as_deref()
            .map(|r| format!(", reason: {}", quoted(r)))
            .unwrap_or_default();
        format!(
            "'{}' is {verb} {} by {} (pid {} on {}, since {}{reason})",
            self.pattern.as_str().escape_debug(),
            self.mode.as_str(),
            quoted(&h.agent),
            h.pid,
            quoted(&h.host),
            h.since,
        )
    }
}

/// Text another holder wrote (its agent name, its reason), as it appears in
/// a one-line message: control characters escaped, at most 200 characters.
/// The message stays one line, and what reaches an agent reading it is
/// visibly quoted data, not a paragraph someone else wrote for it.
fn quoted(text: &str) -> String {
    const MAX: usize = 200;
    let escaped: String = text.escape_debug().collect();
    match escaped.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}...", &escaped[..cut]),
        None => escaped,
    }
}

/// The effective mode of a reservation: shared, or exclusive.
pub(crate) fn effective(mode: Mode) -> Mode {
    match mode {
        Mode::Shared => Mode::Shared,
        _ => Mode::Exclusive,
    }
}

/// Now, RFC 3339 UTC to the second.
pub(crate) fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// Serializes a reservation's [`Mode`] as `"exclusive"` / `"shared"`.
mod mode_name {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::request::Mode;

    pub fn serialize<S: Serializer>(mode: &Mode, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(super::effective(*mode).as_str())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Mode, D::Error> {
        let name = String::deserialize(d)?;
        match name.as_str() {
            "exclusive" => Ok(Mode::Exclusive),
            "shared" => Ok(Mode::Shared),
            other => Err(serde::de::Error::custom(format!(
                "unknown reservation mode '{other}'"
            ))),
        }
    }
}
