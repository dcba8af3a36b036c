//! What a client sends: a submission, and which jobs to list.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The body of `POST /v1/jobs`. A field is given or absent: `null` is
/// refused (400), as the OpenAPI document says (`"template": null` is not
/// "the default template"); an absent field is left to the service, and is
/// not sent.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct SubmitRequest {
    /// The template to run (default: the service's default_template).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "schema", schemars(with = "String"))]
    pub template: Option<String>,
    /// Reaches the command as the template's `{prompt}` argv element, as
    /// `$BATON_PROMPT`, and on stdin. At most max_prompt_bytes (default 100
    /// KiB; larger: 400, code prompt_too_large). A prompt starting with '-'
    /// is refused (400) unless the template puts '--' before `{prompt}` or
    /// sets prompt_may_start_with_dash.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "schema", schemars(with = "String"))]
    pub prompt: Option<String>,
    /// A concurrency group (the same namespace as `baton run --group` on
    /// the service's baton dir).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "schema", schemars(with = "String"))]
    pub group: Option<String>,
    /// How the job joins its group (needs `group`; default queue): a
    /// mode's name (the service names the accepted ones when it refuses
    /// another).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "schema", schemars(with = "String"))]
    pub mode: Option<String>,
    /// The job's ordering key in its group (modes supersede and coalesce
    /// only, else 400), as `baton run --order`: an integer, or an RFC 3339
    /// time (the event the job answers; compared as the instant, to the
    /// microsecond). The highest key wins whatever the arrival order: a job
    /// whose key is older than the newest its group has seen (by a job or a
    /// `baton run --order`, even one that ended) ends superseded without
    /// running, and a newer job with an older key does not stop it; equal
    /// keys and jobs without a key go by arrival. Anything else: 400 naming
    /// the value.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "schema", schemars(schema_with = "order_schema"))]
    pub order: Option<Value>,
    /// Counted from the start of execution: a duration ("90s", "15m") or a
    /// number of seconds, at least 1 ms and at most the service's
    /// max_timeout (anything else is refused, never taken as no timeout).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "schema", schemars(schema_with = "timeout_schema"))]
    pub timeout: Option<Value>,
    /// Workspace options: only for a template with a workspace (else 400).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "schema", schemars(with = "WorkspaceOptions"))]
    pub workspace: Option<WorkspaceOptions>,
    /// Raw argv; refused (403) unless the service has allow_raw_commands.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "schema", schemars(with = "Vec<String>"))]
    pub command: Option<Vec<String>>,
}

impl SubmitRequest {
    /// `d` as a `timeout`: whole milliseconds, at least 1 (`"1500ms"`).
    pub fn timeout_value(d: Duration) -> Value {
        Value::String(format!("{}ms", d.as_millis().max(1)))
    }
}

/// Per-job workspace options (`workspace` of a [`SubmitRequest`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct WorkspaceOptions {
    /// The branch the job's workspace works on.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "schema", schemars(with = "String"))]
    pub branch: Option<String>,
    /// Start `branch` over, dropping its commits that were never pushed
    /// (as `baton run --workspace --reset-branch`): when it has commits
    /// that neither its pushed branch nor the template's branch has, it is
    /// moved to the pushed branch (if the template's branch lacks that
    /// one's commits) or to the template's branch, and its old tip is kept under `refs/baton/abandoned/<branch>/<time>-<job id>`
    /// (the job's `abandoned_ref`); refused while a live workspace holds
    /// the branch (the job fails). Needs `branch`, and a template whose
    /// workspace names a branch (else 400).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reset_branch: bool,
}

/// The query of `GET /v1/jobs` (`?status=&group=&limit=&cursor=`); an
/// absent (or empty) parameter does not filter.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Only jobs in this status (empty: any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Only jobs of this group (empty: any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// At most this many, 1 to 1000 (the service's default, 50, when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// The `next_cursor` of the previous page (empty: the first page).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

/// `timeout` of a [`SubmitRequest`]: a duration or a positive number of
/// seconds.
#[cfg(feature = "schema")]
fn timeout_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": ["string", "number"],
        "exclusiveMinimum": 0,
        "examples": ["90s", "15m", "1500ms", 30],
    })
}

#[cfg(feature = "schema")]
fn order_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "oneOf": [
            {"type": "integer", "minimum": i64::MIN, "maximum": i64::MAX},
            {"type": "string", "anyOf": [{"pattern": "^[+-]?[0-9]{1,18}$"}, {"format": "date-time"}]},
        ],
        "examples": [42, "2026-11-28T14:05:00Z"],
    })
}

impl SubmitRequest {
    /// The `order` field as an ordering key: an integer, or a string that
    /// [`crate::Order::parse`] takes. `Ok(None)` when absent.
    ///
    /// # Errors
    ///
    /// The message to answer 400 with, naming the value.
    pub fn order_value(&self) -> Result<Option<crate::Order>, String> {
        let text = match &self.order {
            None => return Ok(None),
            // A number JSON Schema calls an integer (`5`, `5.0`).
            Some(Value::Number(n)) => match (n.as_i64(), n.as_f64()) {
                (Some(i), _) => i.to_string(),
                (None, Some(f)) if f.fract() == 0.0 && f.abs() < 9.2e18 => (f as i64).to_string(),
                _ => n.to_string(),
            },
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
        };
        crate::Order::parse(&text)
            .map(Some)
            .map_err(|e| format!("invalid field 'order': {e}"))
    }
}

/// A field that, when given, has a value: `null` is refused as the wrong
/// type (`#[serde(default, deserialize_with = "present")]`), where plain
/// `Option` would take it for an absent field.
fn present<'de, D, T>(de: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    T::deserialize(de).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_fields_are_not_sent_and_null_is_refused() {
        let req = SubmitRequest {
            prompt: Some("hi".into()),
            workspace: Some(WorkspaceOptions {
                branch: Some("b".into()),
                reset_branch: false,
            }),
            ..SubmitRequest::default()
        };
        let v = serde_json::to_value(&req).unwrap_or_default();
        assert_eq!(
            v,
            serde_json::json!({"prompt": "hi", "workspace": {"branch": "b"}})
        );
        assert!(serde_json::from_value::<SubmitRequest>(v).is_ok());
        let reset: SubmitRequest =
            serde_json::from_str(r#"{"workspace": {"branch": "b", "reset_branch": true}}"#)
                .unwrap_or_default();
        assert!(reset.workspace.is_some_and(|w| w.reset_branch));
        assert!(serde_json::from_str::<SubmitRequest>(
            r#"{"workspace": {"branch": "b", "reset_branch": null}}"#
        )
        .is_err());
        assert!(serde_json::from_str::<SubmitRequest>(r#"{"template": null}"#).is_err());
        assert!(serde_json::from_str::<SubmitRequest>(r#"{"nope": 1}"#).is_err());
    }

    #[test]
    fn a_timeout_is_sent_in_whole_milliseconds() {
        assert_eq!(
            SubmitRequest::timeout_value(Duration::from_micros(10)),
            Value::String("1ms".into())
        );
        assert_eq!(
            SubmitRequest::timeout_value(Duration::from_secs(90)),
            Value::String("90000ms".into())
        );
    }
}
