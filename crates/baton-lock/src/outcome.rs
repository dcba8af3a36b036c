//! How a holder's work under a lock ended, as the next holder learns it
//! (`BATON_PREVIOUS_OUTCOME`, `previous_outcome`).
//!
//! A releasing holder leaves its outcome in the lock's document in the same
//! write that removes its record (one `pwrite` under META, before the slot
//! is unlocked: never half written). A holder that dies leaves its record
//! instead, and the next grant reads that as [`HolderOutcome::Died`]. So the
//! next holder is told `died` for a dead supervisor and `killed:SIGKILL` for
//! a command killed inside a living one, just as plainly (`docs/src/design/locking.md`,
//! "Releasing").

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// How the holder before a grant ended: its text form is what
/// `BATON_PREVIOUS_OUTCOME` and `previous_outcome` hold.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum HolderOutcome {
    /// `released`: it released the lock after its work succeeded (or, for
    /// a holder that tells nothing more, simply released it).
    Released,
    /// `failed:<code>`: its command exited with this non-zero code (for
    /// `baton run`, the code it exits with: 124 for a timeout, 79 when
    /// superseded), then the lock was released.
    Failed(i32),
    /// `killed:<signal>`: its command was killed by this signal (`SIGKILL`,
    /// or the number when it has no name here), then the lock was released.
    Killed(String),
    /// `died`: the holder ended without releasing (its process died, or the
    /// script it held the lock for exited without releasing it).
    Died,
}

impl HolderOutcome {
    /// The outcome of a command that exited with `code` (0: released).
    pub fn of_exit(code: i32) -> HolderOutcome {
        if code == 0 {
            HolderOutcome::Released
        } else {
            HolderOutcome::Failed(code)
        }
    }

    /// The outcome of a command killed by signal number `signal`.
    pub fn of_signal(signal: i32) -> HolderOutcome {
        HolderOutcome::Killed(
            signal_name(signal).map_or_else(|| signal.to_string(), str::to_string),
        )
    }

    /// Whether the work under the lock may be half done: anything but
    /// [`HolderOutcome::Released`].
    pub fn is_bad(&self) -> bool {
        *self != HolderOutcome::Released
    }
}

impl fmt::Display for HolderOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HolderOutcome::Released => f.write_str("released"),
            HolderOutcome::Failed(code) => write!(f, "failed:{code}"),
            HolderOutcome::Killed(signal) => write!(f, "killed:{signal}"),
            HolderOutcome::Died => f.write_str("died"),
        }
    }
}

/// Text that is not an outcome.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not an outcome (released, failed:<code>, killed:<signal>, died)")]
pub struct BadOutcome(pub String);

impl FromStr for HolderOutcome {
    type Err = BadOutcome;

    fn from_str(s: &str) -> Result<HolderOutcome, BadOutcome> {
        let bad = || BadOutcome(s.to_string());
        match s.split_once(':') {
            None if s == "released" => Ok(HolderOutcome::Released),
            None if s == "died" => Ok(HolderOutcome::Died),
            Some(("failed", code)) => code
                .parse()
                .ok()
                .filter(|c| *c != 0)
                .map(HolderOutcome::Failed)
                .ok_or_else(bad),
            Some(("killed", sig))
                if !sig.is_empty() && sig.bytes().all(|b| b.is_ascii_alphanumeric()) =>
            {
                Ok(HolderOutcome::Killed(sig.to_string()))
            }
            _ => Err(bad()),
        }
    }
}

impl Serialize for HolderOutcome {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for HolderOutcome {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<HolderOutcome, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(feature = "schema")]
impl schemars::JsonSchema for HolderOutcome {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "HolderOutcome".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": "^(released|died|failed:-?[0-9]+|killed:[A-Za-z0-9]+)$"
        })
    }
}

/// The name of signal `signal` on this system (`SIGKILL`).
#[cfg(unix)]
fn signal_name(signal: i32) -> Option<&'static str> {
    const NAMES: &[(i32, &str)] = &[
        (libc::SIGHUP, "SIGHUP"),
        (libc::SIGINT, "SIGINT"),
        (libc::SIGQUIT, "SIGQUIT"),
        (libc::SIGILL, "SIGILL"),
        (libc::SIGTRAP, "SIGTRAP"),
        (libc::SIGABRT, "SIGABRT"),
        (libc::SIGBUS, "SIGBUS"),
        (libc::SIGFPE, "SIGFPE"),
        (libc::SIGKILL, "SIGKILL"),
        (libc::SIGUSR1, "SIGUSR1"),
        (libc::SIGSEGV, "SIGSEGV"),
        (libc::SIGUSR2, "SIGUSR2"),
        (libc::SIGPIPE, "SIGPIPE"),
        (libc::SIGALRM, "SIGALRM"),
        (libc::SIGTERM, "SIGTERM"),
        (libc::SIGXCPU, "SIGXCPU"),
        (libc::SIGXFSZ, "SIGXFSZ"),
        (libc::SIGSYS, "SIGSYS"),
    ];
    NAMES.iter().find(|(n, _)| *n == signal).map(|(_, s)| *s)
}

/// Windows: no signals.
#[cfg(windows)]
fn signal_name(_signal: i32) -> Option<&'static str> {
    None
}

/// The outcome a releasing holder leaves on its slot for the next grant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotOutcome {
    /// The slot it released.
    pub slot: u32,
    /// The fencing token of the grant that ended so.
    pub token: u64,
    /// How it ended.
    pub outcome: HolderOutcome,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_read_back_as_written() {
        for o in [
            HolderOutcome::Released,
            HolderOutcome::Died,
            HolderOutcome::Failed(3),
            HolderOutcome::Failed(-1),
            HolderOutcome::of_signal(9),
            HolderOutcome::of_signal(77),
        ] {
            assert_eq!(o.to_string().parse::<HolderOutcome>(), Ok(o));
        }
        // Named where signals have names; Windows has only the number.
        let killed = if cfg!(unix) {
            "killed:SIGKILL"
        } else {
            "killed:9"
        };
        assert_eq!(HolderOutcome::of_signal(9).to_string(), killed);
        assert_eq!(HolderOutcome::of_exit(0), HolderOutcome::Released);
        for bad in ["", "failed:0", "failed:x", "killed:", "killed:a b", "gone"] {
            assert!(bad.parse::<HolderOutcome>().is_err(), "{bad}");
        }
    }
}
