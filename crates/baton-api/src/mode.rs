//! How a run or a job joins its concurrency group.

use serde::{Deserialize, Serialize};

/// How runs of one group key relate: the `--mode` of `baton run --group`,
/// the `mode` of a job, and the mode recorded in a group's document and the
/// service's store.
// One type and one name across the crates: `baton-run` and `baton-serve`
// use it as it is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
// Its schema keeps the name `schemas/` v1 published (`$defs/Mode`):
// renaming a definition breaks readers of that version.
#[cfg_attr(feature = "schema", schemars(rename = "Mode"))]
#[serde(rename_all = "snake_case")]
pub enum GroupMode {
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

impl GroupMode {
    /// Every mode.
    pub const ALL: [GroupMode; 4] = [
        GroupMode::Queue,
        GroupMode::Supersede,
        GroupMode::Coalesce,
        GroupMode::Skip,
    ];

    /// The mode's name (in the API, the store and group documents).
    pub fn as_str(self) -> &'static str {
        match self {
            GroupMode::Queue => "queue",
            GroupMode::Supersede => "supersede",
            GroupMode::Coalesce => "coalesce",
            GroupMode::Skip => "skip",
        }
    }

    /// The mode named `s`.
    pub fn parse(s: &str) -> Option<GroupMode> {
        GroupMode::ALL.into_iter().find(|m| m.as_str() == s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_uses_the_same_names() {
        for m in GroupMode::ALL {
            let json = serde_json::to_value(m).ok();
            assert_eq!(json.as_ref().and_then(|v| v.as_str()), Some(m.as_str()));
            assert_eq!(GroupMode::parse(m.as_str()), Some(m));
        }
    }
}
