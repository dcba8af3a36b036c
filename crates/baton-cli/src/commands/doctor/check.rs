//! One check of `baton doctor` and how it came out (the JSON shape is
//! `baton_contract::json::DOCTOR`).

use serde::Serialize;
use serde_json::{json, Value};

/// How a check came out; a report's status is its worst check's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub(crate) enum Status {
    /// All is well.
    Ok,
    /// Not checked (the summary says why).
    Skipped,
    /// baton works, but something is not as it should be (see the remedy).
    Warning,
    /// baton cannot work there (see the remedy).
    Error,
}

/// One check of `baton doctor`.
#[derive(Debug, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub(crate) struct Check {
    /// Which check: `baton_dir`, `permissions`, `filesystem`, `locks`,
    /// `inotify`, `git`, `free_space`, `workspaces`, `pid_namespace` or
    /// `backend`, in the order they run.
    #[cfg_attr(
        feature = "schema",
        schemars(schema_with = "crate::commands::doctor::schema::doctor_check_name")
    )]
    pub(crate) name: &'static str,
    /// How it came out.
    pub(crate) status: Status,
    /// What it found, in one line.
    pub(crate) summary: String,
    /// What to do about it (`null` when all is well).
    pub(crate) remedy: Option<String>,
    /// The facts it judged, by name (they differ from check to check).
    detail: Value,
}

impl Check {
    pub(crate) fn new(name: &'static str, status: Status, summary: impl Into<String>) -> Check {
        Check {
            name,
            status,
            summary: summary.into(),
            remedy: None,
            detail: json!({}),
        }
    }

    pub(crate) fn remedy(mut self, remedy: impl Into<String>) -> Check {
        self.remedy = Some(remedy.into());
        self
    }

    pub(crate) fn detail(mut self, detail: Value) -> Check {
        self.detail = detail;
        self
    }

    pub(crate) fn skipped(name: &'static str, why: &str) -> Check {
        Check::new(name, Status::Skipped, format!("not checked: {why}"))
    }
}
