//! The schemas of `baton doctor --json`'s fields whose values are a fixed
//! list (feature `schema`; `crate::schema` makes the files).

use baton_contract::json;
use schemars::{json_schema, Schema, SchemaGenerator};
use serde_json::Value;

/// `name` of a check of `baton doctor --json`: one of
/// [`json::DOCTOR_CHECKS`].
pub(crate) fn doctor_check_name(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "enum": json::DOCTOR_CHECKS,
    })
}

/// `rule` of `baton doctor --json`: one of [`json::DIR_RULES`], or `null`.
pub(crate) fn doctor_rule(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": ["string", "null"],
        "enum": json::DIR_RULES.iter().map(|r| Value::from(*r)).chain([Value::Null]).collect::<Vec<Value>>(),
    })
}

/// `status` of `baton doctor --json`: its worst check's (a skipped check
/// counts as none).
pub(crate) fn doctor_status(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "enum": ["ok", "warning", "error"],
    })
}
