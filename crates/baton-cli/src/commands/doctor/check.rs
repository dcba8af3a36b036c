//! One check of `baton doctor` and how it came out (the JSON shape is
//! `baton_contract::json::DOCTOR`).

use serde::Serialize;
use serde_json::{json, Value};

/// How a check came out; a report's status is its worst check's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Status {
    Ok,
    Skipped,
    Warning,
    Error,
}

#[derive(Debug, Serialize)]
pub(crate) struct Check {
    pub(crate) name: &'static str,
    pub(crate) status: Status,
    pub(crate) summary: String,
    pub(crate) remedy: Option<String>,
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
