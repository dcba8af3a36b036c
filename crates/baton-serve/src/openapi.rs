//! `GET /openapi.json`: the service's contract, for **its running
//! configuration**.
//!
//! The document of every route is generated ([`generate`]): its operations
//! from the route table ([`routes`]), the schemas of its bodies from their
//! Rust types (`baton_api`'s, through the same `schemars` derives that write
//! `schemas/`), so that a job's fields are written once, on
//! `baton_api::JobView`. It is the form for a service with a token and
//! nothing known about its templates. [`document`] narrows it to what this
//! service accepts, so that a client (or a fuzzer such as schemathesis)
//! that follows the document gets no refusal it could not read there:
//!
//! - **Security**: the `bearer` scheme applies where the service asks for
//!   the token; with no token configured there is no security requirement
//!   (and no 401) at all.
//! - **Templates**: `template` (`/v1/jobs`, `/execute`), `model` (chat
//!   completions, `/v1/models/{model}`) are the configured names (`enum`),
//!   required where there is no `default_template`. `command` is present
//!   only with `allow_raw_commands` (else it is an unknown field, refused
//!   with 403); `workspace` only when some template has a workspace (for a
//!   template without one, a workspace is refused with 400, and the document
//!   says so with `if`/`then`). A prompt starting with `-` is refused for
//!   templates that would read it as an option, likewise.
//! - **Limits**: `timeout` within `max_timeout`, the prompt within
//!   `max_prompt_bytes` (a schema counts characters, the service bytes: a
//!   prompt of many-byte characters can still get 400, documented; 413 is
//!   only for a body over `max_body_bytes`).
//! - **Links**: a submitted job's id leads to `GET`/`DELETE /v1/jobs/{id}`,
//!   `POST /v1/jobs/{id}/cancel` and its log (and, from `/execute`, to `GET`/`DELETE /jobs/{id}`), so
//!   stateful clients can follow a job.
//!
//! `docs/src/reference/openapi.json` is the document a service with the
//! configuration of `tests/serve_openapi.rs` serves, checked in for
//! readers; that test fails when it differs from what the service serves
//! (`BATON_BLESS=1` rewrites it). The tests check the document with
//! openapi-spec-validator (`tests/serve_openapi.rs`) and fuzz the service
//! against it with schemathesis, all checks, with and without a token
//! (`tests/serve_schemathesis.rs`).

use std::sync::OnceLock;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};

use crate::api::AppState;
use crate::config::{Config, Template};

mod generate;
mod routes;
mod schemas;
mod shapes;

/// Control characters (Unicode category Cc, Rust's `char::is_control`), as
/// a regular-expression class body.
const CONTROL: &str = "\\u0000-\\u001f\\u007f-\\u009f";

/// `GET /openapi.json`.
pub async fn serve(State(service): State<AppState>) -> Response {
    match document(&service.config) {
        Ok(doc) => (
            [(header::CONTENT_TYPE, "application/json")],
            doc.to_string(),
        )
            .into_response(),
        Err(e) => {
            tracing::error!(error = %e, "cannot build the OpenAPI document");
            crate::api::ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "cannot build the OpenAPI document (see the service's log)",
            )
            .into_response()
        }
    }
}

/// The generated document (every route, for a service with a token),
/// made once.
///
/// # Errors
///
/// Two schemas of the document under one name (a build mistake the tests
/// catch).
pub fn base() -> Result<Value, String> {
    static GENERATED: OnceLock<Result<Value, String>> = OnceLock::new();
    GENERATED.get_or_init(generate::document).clone()
}

/// The document for `config`: see the module doc for what it narrows.
///
/// # Errors
///
/// The embedded document is not JSON or lacks a part this narrows.
pub fn document(config: &Config) -> Result<Value, String> {
    let mut doc = base()?;
    security(&mut doc, config.token.is_some())?;
    let names: Vec<Value> = config.templates.keys().map(|k| json!(k)).collect();
    submit_request(&mut doc, config, &names)?;
    execute_request(&mut doc, config, &names)?;
    models(&mut doc, &names)?;
    cursor(&mut doc)?;
    links(&mut doc)?;
    Ok(doc)
}

/// `doc` at the JSON pointer `at`, which must exist.
fn at<'a>(doc: &'a mut Value, at: &str) -> Result<&'a mut Value, String> {
    doc.pointer_mut(at)
        .ok_or_else(|| format!("the OpenAPI document has no {at}"))
}

/// The object at `at`.
fn object<'a>(doc: &'a mut Value, pointer: &str) -> Result<&'a mut Map<String, Value>, String> {
    at(doc, pointer)?
        .as_object_mut()
        .ok_or_else(|| format!("the OpenAPI document: {pointer} is not an object"))
}

/// Every operation of the document.
fn operations(doc: &mut Value) -> Result<Vec<&mut Map<String, Value>>, String> {
    let paths = object(doc, "/paths")?;
    Ok(paths
        .values_mut()
        .filter_map(Value::as_object_mut)
        .flat_map(|item| item.iter_mut())
        .filter(|(method, _)| ["get", "post", "put", "delete", "patch"].contains(&method.as_str()))
        .filter_map(|(_, op)| op.as_object_mut())
        .collect())
}

/// Without a token: no security requirement, no scheme, no 401 anywhere.
/// With one: the base document's (`bearer` everywhere but the routes that
/// say `security: []`).
fn security(doc: &mut Value, token: bool) -> Result<(), String> {
    if token {
        return Ok(());
    }
    let root = object(doc, "")?;
    root.remove("security");
    for op in operations(doc)? {
        op.remove("security");
        if let Some(responses) = op.get_mut("responses").and_then(Value::as_object_mut) {
            responses.remove("401");
        }
    }
    let components = object(doc, "/components")?;
    components.remove("securitySchemes");
    if let Some(r) = components
        .get_mut("responses")
        .and_then(Value::as_object_mut)
    {
        r.remove("Unauthorized");
    }
    Ok(())
}

/// A template-name schema: one of `names` (none configured: no name is
/// valid).
fn name_schema(names: &[Value], description: &str) -> Value {
    if names.is_empty() {
        json!({"not": {}, "description": description})
    } else {
        json!({"type": "string", "enum": names, "description": description})
    }
}

/// Text without a NUL byte (no command argument can hold one).
fn no_nul() -> String {
    "^[^\\u0000]*$".to_string()
}

/// Whether a prompt starting with `-` is refused for template `t`
/// (see [`crate::api::check_prompt`]).
fn dash_refused(t: &Template) -> bool {
    t.command.iter().any(|a| a == "{prompt}")
        && !t.prompt_after_double_dash()
        && !t.prompt_may_start_with_dash
}

/// `timeout`: seconds within `[0.001, max]`, or a duration text
/// `<n><unit>` (ms, s, m, h) whose value is within `max`: exactly the
/// integers `1..=max` in that unit. (The service reads more forms,
/// humantime's, such as "1h 30m"; the document names the plain ones.)
fn timeout_schema(max: Duration) -> Value {
    let mut forms = Vec::new();
    for (unit, per_ms) in [("ms", 1u128), ("s", 1000), ("m", 60_000), ("h", 3_600_000)] {
        let most = max.as_millis() / per_ms;
        if most > 0 {
            forms.push(format!("(?:{}){unit}", up_to(most)));
        }
    }
    let pattern = if forms.is_empty() {
        // max_timeout shorter than 1 ms cannot be configured; say "none".
        "^$".to_string()
    } else {
        format!("^({})$", forms.join("|"))
    };
    json!({
        "oneOf": [
            {"type": "string", "pattern": pattern, "examples": ["90s", "15m"]},
            {"type": "number", "minimum": 0.001, "maximum": max.as_secs_f64()},
        ],
        "description": format!(
            "Counted from the start of execution: a number of seconds or a duration such as \"90s\", \
             at least 1 ms and at most this service's max_timeout ({}); anything else is refused (400), \
             never taken as no timeout.",
            humantime::format_duration(max)
        ),
    })
}

/// A regular expression matching exactly the decimal integers `1..=n`
/// (no leading zero; `n` >= 1).
fn up_to(n: u128) -> String {
    let digits: Vec<u32> = n
        .to_string()
        .chars()
        .filter_map(|c| c.to_digit(10))
        .collect();
    let k = digits.len();
    let mut alts = Vec::new();
    // Fewer digits than n: any such number.
    if k > 1 {
        alts.push(format!("[1-9][0-9]{{0,{}}}", k - 2));
    }
    // As many digits: a prefix of n, a smaller digit, then anything.
    let mut prefix = String::new();
    for (i, &d) in digits.iter().enumerate() {
        let low = u32::from(i == 0);
        if d > low {
            let rest = k - i - 1;
            let tail = if rest > 0 {
                format!("[0-9]{{{rest}}}")
            } else {
                String::new()
            };
            alts.push(format!("{prefix}[{low}-{}]{tail}", d - 1));
        }
        prefix.push_str(&d.to_string());
    }
    // n itself.
    alts.push(prefix);
    alts.join("|")
}

/// The names baton-git refuses beyond git's syntax
/// (`baton_git::branch_name_refusal` without the base's own remotes): a
/// first component of `baton_git::RESERVED_BRANCH_PREFIXES` followed by
/// more, or `origin` alone or followed by more.
fn shadowing_pattern() -> String {
    format!(
        "^(?:(?:{})/|{}(?:/|$))",
        baton_git::RESERVED_BRANCH_PREFIXES.join("|"),
        baton_git::DEFAULT_REMOTE
    )
}

/// Exactly the names `api::input::valid_branch` takes (length aside):
/// '/'-separated components made of words of `[A-Za-z0-9_+-]` joined by
/// single dots; a component may end with a dot but for the last, and none
/// ends with `.lock` (its last dotted word is not `lock`); the first word
/// does not start with '-'; one component alone is not `HEAD`. No
/// lookahead, so that any regex engine takes it.
fn branch_pattern() -> String {
    let x = "[A-Za-z0-9_+-]";
    let f = "[A-Za-z0-9_+]";
    let word = format!("{x}+");
    let first = format!("{f}{x}*");
    let not_lock = format!(
        "(?:{x}{{1,3}}|{x}{{5,}}|[A-Za-km-z0-9_+-]{x}{{3}}|l[A-Za-np-z0-9_+-]{x}{{2}}|lo[A-Zabd-z0-9_+-]{x}|loc[A-Za-jl-z0-9_+-])"
    );
    let not_head = format!(
        "(?:{f}{x}{{0,2}}|{f}{x}{{4,}}|[A-GI-Za-z0-9_+]{x}{{3}}|H[A-DF-Za-z0-9_+-]{x}{{2}}|HE[B-Za-z0-9_+-]{x}|HEA[A-CE-Za-z0-9_+-])"
    );
    // A component before a '/', and the last one.
    let inner = |w: &str| format!("(?:{w}(?:\\.{word})*\\.|{w}(?:(?:\\.{word})*\\.{not_lock})?)");
    let last = |w: &str| format!("{w}(?:(?:\\.{word})*\\.{not_lock})?");
    format!(
        "^(?:{}/(?:{}/)*{}|{not_head}|{first}(?:\\.{word})*\\.{not_lock})$",
        inner(&first),
        inner(&word),
        last(&word)
    )
}

/// The invisible and bidi formatting characters of the BMP that
/// `baton_lock::LockName` refuses (its `invisible`), as a class body.
const INVISIBLE: &str = "\\u00ad\\u0600-\\u0605\\u061c\\u06dd\\u070f\\u0890-\\u0891\\u08e2\\u180e\\u200b-\\u200f\\u2028-\\u202e\\u2060-\\u2064\\u2066-\\u206f\\ufeff\\ufff9-\\ufffb";

/// A lock name (`baton_lock::LockName`): '/'-separated parts, none empty,
/// `.` or `..`, no control character, at most 200 bytes. A schema counts
/// characters, not bytes: an ASCII name has up to 200, any other up to 50
/// (the API refuses a longer one, see `api::input::check_group_length`).
fn group_schema() -> Value {
    let name = |c: &str, first: &str| {
        let part = format!("(?:{first}{c}*|\\.{first}{c}*|\\.\\.{c}+)");
        format!("^{part}(?:/{part})*$")
    };
    // Nor an invisible or bidi formatting character (`LockName` refuses
    // them; those outside the BMP are left to the API's 400).
    let any = name(
        &format!("[^/{CONTROL}{INVISIBLE}]"),
        &format!("[^./{CONTROL}{INVISIBLE}]"),
    );
    let ascii = name(
        "[\\u0020-\\u002e\\u0030-\\u007e]",
        "[\\u0020-\\u002d\\u0030-\\u007e]",
    );
    json!({
        "anyOf": [
            {"type": "string", "minLength": 1, "maxLength": baton_lock::MAX_NAME_LEN, "pattern": ascii},
            {"type": "string", "minLength": 1,
             "maxLength": crate::api::MAX_NON_ASCII_GROUP_CHARS, "pattern": any},
        ],
        "description": "A concurrency group (the same namespace as `baton run --group` on this baton dir): \
                        '/'-separated parts, none empty, '.' or '..', no control character; \
                        at most 200 characters when all ASCII, else at most 50 (400 otherwise).",
    })
}

/// `SubmitRequest` (`POST /v1/jobs`) for `config`.
fn submit_request(doc: &mut Value, config: &Config, names: &[Value]) -> Result<(), String> {
    let schema = object(doc, "/components/schemas/SubmitRequest")?;
    let props = schema
        .get_mut("properties")
        .and_then(Value::as_object_mut)
        .ok_or("the OpenAPI document: SubmitRequest has no properties")?;
    props.insert(
        "template".into(),
        name_schema(
            names,
            "The template to run: one of this service's templates (default: its default_template). \
             null is refused.",
        ),
    );
    let prompt_limit = config.max_prompt_bytes;
    if let Some(p) = props.get_mut("prompt").and_then(Value::as_object_mut) {
        p.insert("pattern".into(), json!(no_nul()));
        p.insert("maxLength".into(), json!(prompt_limit));
    }
    props.insert("group".into(), group_schema());
    props.insert("timeout".into(), timeout_schema(config.max_timeout));
    let any_workspace = config.templates.values().any(|t| t.workspace.is_some());
    if any_workspace {
        props.insert(
            "workspace".into(),
            json!({
                "type": "object",
                "additionalProperties": false,
                "properties": {"branch": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 200,
                    "pattern": branch_pattern(),
                    // A name that would shadow another namespace.
                    "not": {"pattern": shadowing_pattern()},
                    "description": "A branch name the service takes: ASCII letters, digits and '._/+-', \
                                    not starting with '-', '/' or '.', without '..' or '//', \
                                    not ending with '/', '.' or '.lock'; never one that would shadow \
                                    another namespace: 'origin' or 'origin/...', 'refs/...', 'heads/...', \
                                    'remotes/...', 'tags/...', nor one starting with the name of another \
                                    remote of the template's base (else 400)."
                }, "reset_branch": {
                    "type": "boolean",
                    "default": false,
                    "description": "Start 'branch' over, dropping its commits that were never pushed: \
                                    when it has commits that neither its pushed branch nor the template's \
                                    branch has, it is moved to the pushed branch (if the template's branch \
                                    lacks that one's commits) or to the template's branch, and its old tip \
                                    is kept under \
                                    refs/baton/abandoned/<branch>/<time>-<job id> (the job's abandoned_ref). \
                                    true needs 'branch' and a template whose workspace names a branch \
                                    (else 400); while a live workspace holds the branch, the job fails."
                }},
                // true needs a branch.
                "if": {"properties": {"reset_branch": {"const": true}}, "required": ["reset_branch"]},
                "then": {"required": ["branch"]},
                "description": "Only for a template with a workspace (else 400)."
            }),
        );
    } else {
        props.remove("workspace");
    }
    if config.allow_raw_commands {
        props.insert(
            "command".into(),
            json!({
                "type": "array",
                "items": {"type": "string", "pattern": no_nul()},
                "prefixItems": [{"type": "string", "minLength": 1}],
                "minItems": 1,
                "description": "Raw argv (this service has allow_raw_commands)."
            }),
        );
    } else {
        props.remove("command");
    }
    // A mode needs a group; an ordering key, a group in mode supersede or
    // coalesce.
    schema.insert(
        "dependentRequired".into(),
        json!({"mode": ["group"], "order": ["group", "mode"]}),
    );
    let mut rules = Vec::new();
    let mut required = Vec::new();
    if config.default_template.is_none() {
        if config.allow_raw_commands {
            schema.insert(
                "anyOf".into(),
                json!([{"required": ["template"]}, {"required": ["command"]}]),
            );
        } else {
            required.push(json!("template"));
        }
    }
    if !required.is_empty() {
        schema.insert("required".into(), json!(required));
    }
    // What depends on the template chosen: a workspace, the dash rule.
    for (name, t) in &config.templates {
        let mut then = Map::new();
        if any_workspace && t.workspace.is_none() {
            then.insert("not".into(), json!({"required": ["workspace"]}));
        }
        // A workspace that names no branch has none to start a job's over at.
        let mut props = Map::new();
        if t.workspace.as_ref().is_some_and(|w| w.branch.is_none()) {
            props.insert(
                "workspace".into(),
                json!({"properties": {"reset_branch": {"const": false}}}),
            );
        }
        if dash_refused(t) {
            props.insert(
                "prompt".into(),
                json!({"pattern": "^(?:[^-\\u0000][^\\u0000]*)?$"}),
            );
        }
        if !props.is_empty() {
            then.insert("properties".into(), Value::Object(props));
        }
        if then.is_empty() {
            continue;
        }
        let chosen = if config.default_template.as_deref() == Some(name.as_str()) {
            json!({"anyOf": [
                {"properties": {"template": {"const": name}}, "required": ["template"]},
                {"not": {"required": ["template"]}}
            ]})
        } else {
            json!({"properties": {"template": {"const": name}}, "required": ["template"]})
        };
        let mut cond = chosen;
        if config.allow_raw_commands {
            cond = json!({"allOf": [cond, {"not": {"required": ["command"]}}]});
        }
        rules.push(json!({"if": cond, "then": Value::Object(then)}));
    }
    rules.push(json!({
        "if": {"required": ["order"]},
        "then": {"properties": {"mode": {"enum": ["supersede", "coalesce"]}}}
    }));
    schema.insert("allOf".into(), json!(rules));
    Ok(())
}

/// `ExecuteRequest` (`POST /execute`): `template` as configured; `null`
/// stands for the default (the service this route is compatible with took
/// it), so it is allowed where there is one.
fn execute_request(doc: &mut Value, config: &Config, names: &[Value]) -> Result<(), String> {
    let schema = object(doc, "/components/schemas/ExecuteRequest")?;
    let mut template = name_schema(names, "One of this service's templates.");
    if config.default_template.is_some() {
        template = json!({"anyOf": [template, {"type": "null"}],
            "description": "One of this service's templates; absent or null: its default_template."});
    } else {
        schema.insert("required".into(), json!(["prompt", "template"]));
    }
    let props = schema
        .get_mut("properties")
        .and_then(Value::as_object_mut)
        .ok_or("the OpenAPI document: ExecuteRequest has no properties")?;
    props.insert("template".into(), template);
    if let Some(p) = props.get_mut("prompt").and_then(Value::as_object_mut) {
        p.insert("pattern".into(), json!(no_nul()));
        p.insert("maxLength".into(), json!(config.max_prompt_bytes));
    }
    Ok(())
}

/// `model` of chat completions and `/v1/models/{model}`: the templates.
fn models(doc: &mut Value, names: &[Value]) -> Result<(), String> {
    let model = name_schema(names, "A template's name (a model is a template).");
    *at(
        doc,
        "/components/schemas/ChatCompletionRequest/properties/model",
    )? = model.clone();
    let params = at(doc, "/paths/~1v1~1models~1{model}/parameters")?
        .as_array_mut()
        .ok_or("the OpenAPI document: /v1/models/{model} parameters are no list")?;
    for p in params {
        if p["name"] == "model" {
            p["schema"] = model.clone();
        }
    }
    Ok(())
}

/// `cursor` of `GET /v1/jobs`: an earlier `next_cursor` (digits).
fn cursor(doc: &mut Value) -> Result<(), String> {
    let params = at(doc, "/paths/~1v1~1jobs/get/parameters")?
        .as_array_mut()
        .ok_or("the OpenAPI document: GET /v1/jobs parameters are no list")?;
    for p in params {
        if p["name"] == "cursor" {
            p["schema"] = json!({"type": "string", "pattern": "^[0-9]{0,18}$"});
            p["description"] = json!(
                "next_cursor of the previous page (digits; empty: the first page). Anything else is refused (400)."
            );
        }
    }
    Ok(())
}

/// Links from a job's creation to what can be done with it.
fn links(doc: &mut Value) -> Result<(), String> {
    let job = |id: &str| {
        json!({
            "GetJob": {"operationId": "getJob", "parameters": {"id": id},
                       "description": "The job just submitted."},
            "CancelJob": {"operationId": "cancelJob", "parameters": {"id": id},
                          "description": "Cancel it."},
            "DeleteJob": {"operationId": "deleteJob", "parameters": {"id": id},
                          "description": "Remove it, once it has ended."},
            "JobLog": {"operationId": "jobLog", "parameters": {"id": id},
                       "description": "Its output."},
        })
    };
    at(doc, "/paths/~1v1~1jobs/post/responses/202")?["links"] = job("$response.body#/id");
    let mut from_execute = job("$response.body#/job_id");
    from_execute["CompatJob"] = json!({"operationId": "compatJob",
        "parameters": {"id": "$response.body#/job_id"},
        "description": "The job, as /execute's clients read it."});
    from_execute["CompatCancelJob"] = json!({"operationId": "compatCancelJob",
        "parameters": {"id": "$response.body#/job_id"},
        "description": "Cancel it, answered as /execute's clients read it."});
    at(doc, "/paths/~1execute/post/responses/202")?["links"] = from_execute;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_base_document_is_json_and_has_every_part_narrowed() {
        let base = base().unwrap();
        assert!(base["paths"]["/v1/jobs"]["post"].is_object());
    }

    #[test]
    fn the_branch_pattern_is_pinned() {
        // tests/serve_openapi.rs checks it against the service's answers;
        // pinned here as text so that a change is a deliberate one.
        assert_eq!(
            branch_pattern(),
            concat!(
                "^(?:(?:[A-Za-z0-9_+][A-Za-z0-9_+-]*(?:\\.[A-Za-z0-9_+-]+)*\\.|[A-Za-z0-9_+][A-Za",
                "-z0-9_+-]*(?:(?:\\.[A-Za-z0-9_+-]+)*\\.(?:[A-Za-z0-9_+-]{1,3}|[A-Za-z0-9_+-]{5,}",
                "|[A-Za-km-z0-9_+-][A-Za-z0-9_+-]{3}|l[A-Za-np-z0-9_+-][A-Za-z0-9_+-]{2}|lo[A-Zab",
                "d-z0-9_+-][A-Za-z0-9_+-]|loc[A-Za-jl-z0-9_+-]))?)/(?:(?:[A-Za-z0-9_+-]+(?:\\.[A-",
                "Za-z0-9_+-]+)*\\.|[A-Za-z0-9_+-]+(?:(?:\\.[A-Za-z0-9_+-]+)*\\.(?:[A-Za-z0-9_+-]{",
                "1,3}|[A-Za-z0-9_+-]{5,}|[A-Za-km-z0-9_+-][A-Za-z0-9_+-]{3}|l[A-Za-np-z0-9_+-][A-",
                "Za-z0-9_+-]{2}|lo[A-Zabd-z0-9_+-][A-Za-z0-9_+-]|loc[A-Za-jl-z0-9_+-]))?)/)*[A-Za",
                "-z0-9_+-]+(?:(?:\\.[A-Za-z0-9_+-]+)*\\.(?:[A-Za-z0-9_+-]{1,3}|[A-Za-z0-9_+-]{5,}",
                "|[A-Za-km-z0-9_+-][A-Za-z0-9_+-]{3}|l[A-Za-np-z0-9_+-][A-Za-z0-9_+-]{2}|lo[A-Zab",
                "d-z0-9_+-][A-Za-z0-9_+-]|loc[A-Za-jl-z0-9_+-]))?|(?:[A-Za-z0-9_+][A-Za-z0-9_+-]{",
                "0,2}|[A-Za-z0-9_+][A-Za-z0-9_+-]{4,}|[A-GI-Za-z0-9_+][A-Za-z0-9_+-]{3}|H[A-DF-Za",
                "-z0-9_+-][A-Za-z0-9_+-]{2}|HE[B-Za-z0-9_+-][A-Za-z0-9_+-]|HEA[A-CE-Za-z0-9_+-])|",
                "[A-Za-z0-9_+][A-Za-z0-9_+-]*(?:\\.[A-Za-z0-9_+-]+)*\\.(?:[A-Za-z0-9_+-]{1,3}|[A-",
                "Za-z0-9_+-]{5,}|[A-Za-km-z0-9_+-][A-Za-z0-9_+-]{3}|l[A-Za-np-z0-9_+-][A-Za-z0-9_",
                "+-]{2}|lo[A-Zabd-z0-9_+-][A-Za-z0-9_+-]|loc[A-Za-jl-z0-9_+-]))$",
            )
        );
    }

    /// Every `$ref` in `v`.
    fn refs<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
        match v {
            Value::Object(map) => {
                if let Some(Value::String(r)) = map.get("$ref") {
                    out.push(r);
                }
                map.values().for_each(|v| refs(v, out));
            }
            Value::Array(items) => items.iter().for_each(|v| refs(v, out)),
            _ => {}
        }
    }

    #[test]
    fn every_reference_of_the_document_resolves() {
        for token in [None, Some("t".to_string())] {
            let mut config = Config::load(None, &crate::config::Overrides::default()).unwrap();
            config.token = token;
            let doc = document(&config).unwrap();
            let mut found = Vec::new();
            refs(&doc, &mut found);
            assert!(found.len() > 20, "{found:?}");
            for r in found {
                let pointer = r.strip_prefix('#').unwrap();
                assert!(doc.pointer(pointer).is_some(), "{r} does not resolve");
            }
        }
    }

    #[test]
    fn the_job_schema_is_the_wire_models() {
        // Generated from `baton_api::JobView`: its fields, the ones always
        // sent required.
        let base = base().unwrap();
        let job = &base["components"]["schemas"]["JobView"];
        let fields: Vec<&String> = job["properties"].as_object().unwrap().keys().collect();
        assert!(fields.iter().any(|f| *f == "abandoned_ref"), "{fields:?}");
        let required = job["required"].as_array().unwrap();
        assert_eq!(
            required.len() + 1,
            fields.len(),
            "all but output: {required:?}"
        );
        assert_eq!(
            base["components"]["schemas"]["SubmitRequest"]["properties"]["mode"]["$ref"],
            "#/components/schemas/Mode"
        );
    }

    #[test]
    fn up_to_matches_exactly_one_to_n() {
        assert_eq!(up_to(1), "1");
        assert_eq!(up_to(9), "[1-8]|9");
        assert_eq!(up_to(60), "[1-9][0-9]{0,0}|[1-5][0-9]{1}|60");
        assert_eq!(
            up_to(3600),
            "[1-9][0-9]{0,2}|[1-2][0-9]{3}|3[0-5][0-9]{2}|3600"
        );
    }

    #[test]
    fn timeout_patterns_stay_within_max_timeout() {
        let s = timeout_schema(Duration::from_secs(3600));
        let p = s["oneOf"][0]["pattern"].as_str().unwrap();
        assert!(
            p.contains("(?:[1-9][0-9]{0,2}|[1-2][0-9]{3}|3[0-5][0-9]{2}|3600)s"),
            "{p}"
        );
        assert!(p.contains("(?:1)h"), "{p}");
        assert_eq!(s["oneOf"][1]["maximum"], 3600.0);
    }
}
