//! `state_read`, `state_update`, `state_append`: baton-state's crash-safe
//! state files, relative to the repository's root. An update is a JSON merge
//! patch (RFC 7396) applied under the file's lock, optionally a
//! compare-and-swap against the version the agent read.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use baton_state::{EditError, Format, Options, StateFile, Version};
use serde_json::Value;

use crate::session::Session;
use crate::types::{AppendOut, StateAppendArgs, StateOut, StateReadArgs, StateUpdateArgs};
use crate::{Outcome, ToolError};

/// How long a state call waits for the file's lock (held by others only for
/// the length of one edit).
const LOCK_WAIT: Duration = Duration::from_secs(30);

/// The file named `file`, relative to the repository's root, by the rule
/// of reservation paths: inside the repository (no `..`, no absolute path
/// elsewhere, no symlink leading out), and one file, not a glob. A name a
/// prompt could have written (`../../home/me/.bashrc`) never reaches a file
/// outside the repository.
fn path_of(session: &Session, file: &str) -> Result<PathBuf, ToolError> {
    if file.is_empty() {
        return Err(ToolError::Invalid(
            "state file: the name is empty".to_string(),
        ));
    }
    let space = crate::reserve::space(session);
    let pattern = space.pattern(file).map_err(|e| match e {
        baton_lock::reserve::ReserveError::BadPath { path, reason } => {
            ToolError::Invalid(format!("state file '{}': {reason}", path.escape_debug()))
        }
        other => ToolError::from(other).prefixed(&format!("state file '{file}'")),
    })?;
    if pattern.as_str().is_empty() || pattern.is_glob() {
        return Err(ToolError::Invalid(format!(
            "state file '{file}': name one file inside the repository (not its root, not a glob)"
        )));
    }
    Ok(session.repo().join(pattern.as_str()))
}

fn options() -> Options {
    Options::new().wait(LOCK_WAIT)
}

/// Applies the JSON merge patch `patch` to `target` (RFC 7396, section 2).
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(members) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(serde_json::Map::new());
    }
    if let Value::Object(t) = target {
        for (name, value) in members {
            if value.is_null() {
                t.remove(name);
            } else {
                merge_patch(t.entry(name.clone()).or_insert(Value::Null), value);
            }
        }
    }
}

/// `state_read`.
pub(crate) fn read(session: &Arc<Session>, args: StateReadArgs) -> Outcome<StateOut> {
    let path = path_of(session, &args.file)?;
    let snap = baton_state::get(session.dir(), &path, &options())?;
    let content = snap.content_json()?;
    let summary = format!("read '{}' (version {})", args.file, snap.version);
    Ok((
        StateOut {
            content,
            version: snap.version.to_string(),
        },
        summary,
    ))
}

/// `state_update`.
pub(crate) fn update(session: &Arc<Session>, args: StateUpdateArgs) -> Outcome<StateOut> {
    let path = path_of(session, &args.file)?;
    let file = StateFile::resolve(&path)?;
    if file.format() != Format::Json {
        return Err(ToolError::Invalid(format!(
            "state file '{}': a merge patch applies to a JSON document (a .json file); append to a .jsonl file with state_append",
            args.file
        )));
    }
    let mut opts = options();
    if let Some(v) = &args.expected_version {
        let v: Version = v.parse()?;
        opts = opts.if_version(v);
    }
    let mut content = Value::Null;
    let edited = baton_state::edit(session.dir(), &path, &opts, |old| {
        let mut doc = match old {
            Some(bytes) => serde_json::from_slice(bytes).map_err(|e| {
                ToolError::Engine(format!("state file '{}' is not JSON: {e}", args.file))
            })?,
            None => Value::Null,
        };
        merge_patch(&mut doc, &args.merge_patch);
        let mut text = serde_json::to_vec_pretty(&doc)
            .map_err(|e| ToolError::Engine(format!("state file '{}': {e}", args.file)))?;
        text.push(b'\n');
        content = doc;
        Ok::<_, ToolError>(Some(text))
    })
    .map_err(|e| match e {
        EditError::State(s) => ToolError::from(s),
        EditError::Aborted(m) => m,
    })?;
    let summary = if edited.changed {
        format!(
            "updated '{}' (version {} -> {})",
            args.file, edited.previous, edited.version
        )
    } else {
        format!("'{}' unchanged (version {})", args.file, edited.version)
    };
    Ok((
        StateOut {
            content,
            version: edited.version.to_string(),
        },
        summary,
    ))
}

/// `state_append`.
pub(crate) fn append(session: &Arc<Session>, args: StateAppendArgs) -> Outcome<AppendOut> {
    let path = path_of(session, &args.file)?;
    let line = serde_json::to_string(&args.record)
        .map_err(|e| ToolError::Invalid(format!("state file '{}': the record: {e}", args.file)))?;
    let appended = baton_state::append(session.dir(), &path, &options(), &[line])?;
    let summary = format!("appended 1 record to '{}'", args.file);
    Ok((
        AppendOut {
            file: args.file,
            records: appended.records,
        },
        summary,
    ))
}

#[cfg(test)]
mod tests {
    use super::merge_patch;
    use serde_json::json;

    /// The examples of RFC 7396, appendix A.
    #[test]
    fn merge_patch_follows_the_rfc_examples() {
        let cases = [
            (json!({"a":"b"}), json!({"a":"c"}), json!({"a":"c"})),
            (json!({"a":"b"}), json!({"b":"c"}), json!({"a":"b","b":"c"})),
            (json!({"a":"b"}), json!({"a":null}), json!({})),
            (
                json!({"a":"b","b":"c"}),
                json!({"a":null}),
                json!({"b":"c"}),
            ),
            (json!({"a":["b"]}), json!({"a":"c"}), json!({"a":"c"})),
            (json!({"a":"c"}), json!({"a":["b"]}), json!({"a":["b"]})),
            (
                json!({"a":{"b":"c"}}),
                json!({"a":{"b":"d","c":null}}),
                json!({"a":{"b":"d"}}),
            ),
            (json!({"a":[{"b":"c"}]}), json!({"a":[1]}), json!({"a":[1]})),
            (json!(["a", "b"]), json!(["c", "d"]), json!(["c", "d"])),
            (json!({"a":"b"}), json!(["c"]), json!(["c"])),
            (json!({"a":"foo"}), json!(null), json!(null)),
            (json!({"a":"foo"}), json!("bar"), json!("bar")),
            (json!({"e":null}), json!({"a":1}), json!({"e":null,"a":1})),
            (json!([1, 2]), json!({"a":"b","c":null}), json!({"a":"b"})),
            (
                json!({}),
                json!({"a":{"bb":{"ccc":null}}}),
                json!({"a":{"bb":{}}}),
            ),
        ];
        for (mut target, patch, want) in cases {
            merge_patch(&mut target, &patch);
            assert_eq!(target, want, "patch {patch}");
        }
    }
}
