//! How a run or a job joins its concurrency group.

use serde::{Deserialize, Serialize};

/// How runs of one group key relate: the `--mode` of `baton run --group`
/// (`baton_run::GroupMode` is this type), the `mode` of a job, and the mode
/// recorded in a group's document and the service's store.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Every run executes, one at a time (or `max` at a time), in arrival order.
    #[default]
    Queue,
    /// A new run cancels the running one and every older waiting one.
    Supersede,
    /// The running run finishes; at most one waits; a newer arrival replaces it.
    Coalesce,
    /// If the group is running or has a waiter, the new run does not run.
    Skip,
}

impl Mode {
    /// Every mode.
    pub const ALL: [Mode; 4] = [Mode::Queue, Mode::Supersede, Mode::Coalesce, Mode::Skip];

    /// The mode's name (in the API, the store and group documents).
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Queue => "queue",
            Mode::Supersede => "supersede",
            Mode::Coalesce => "coalesce",
            Mode::Skip => "skip",
        }
    }

    /// The mode named `s`.
    pub fn parse(s: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.as_str() == s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_uses_the_same_names() {
        for m in Mode::ALL {
            let json = serde_json::to_value(m).ok();
            assert_eq!(json.as_ref().and_then(|v| v.as_str()), Some(m.as_str()));
            assert_eq!(Mode::parse(m.as_str()), Some(m));
        }
    }
}
