//! Reading a request: its JSON body (every error naming the field), and
//! the checks of the values that reach a command (the prompt, the timeout,
//! the branch, a reset of it).

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use serde_json::Value;

use super::ApiError;
use crate::model::NewJob;
use crate::service::Service;

/// A JSON body, with every way it can be wrong reported as an [`ApiError`].
pub fn parse_body<T: serde::de::DeserializeOwned>(
    body: Result<Bytes, BytesRejection>,
) -> Result<T, ApiError> {
    let bytes = body.map_err(|r| {
        let status = r.status();
        let code = if status == StatusCode::PAYLOAD_TOO_LARGE {
            "body_too_large"
        } else {
            "invalid_body"
        };
        ApiError::new(
            status,
            code,
            format!("cannot read the request body: {}", r.body_text()),
        )
    })?;
    let mut de = serde_json::Deserializer::from_slice(&bytes);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        // A path names a field of the body's object (not an element of a
        // body that is no object at all).
        let field = path != "." && !path.starts_with('[');
        if inner.classify() == serde_json::error::Category::Data && field {
            ApiError::bad(format!("invalid field '{path}': {inner}"))
        } else {
            ApiError::bad(format!("invalid JSON body: {inner}"))
        }
    })
}

/// Refuses a prompt the template's command could not take safely: larger
/// than `max_prompt_bytes` (400 naming the field: 413 is for a body over
/// `max_body_bytes`, a limit of the transport), or starting with `-` where the command
/// could read it as an option (400: allowed only after an `--` in the
/// template's command, or with `prompt_may_start_with_dash`). `field` is
/// the request's field the prompt came from.
pub fn check_prompt(
    service: &Service,
    template: Option<&crate::config::Template>,
    prompt: &str,
    field: &str,
) -> Result<(), ApiError> {
    let limit = service.config.max_prompt_bytes;
    if prompt.len() > limit {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "prompt_too_large",
            format!(
                "field '{field}': the prompt is {} bytes; the limit is {limit} (max_prompt_bytes)",
                prompt.len()
            ),
        ));
    }
    if let Some(t) = template {
        let substituted = t.command.iter().any(|a| a == "{prompt}");
        if prompt.starts_with('-')
            && substituted
            && !t.prompt_after_double_dash()
            && !t.prompt_may_start_with_dash
        {
            return Err(ApiError::bad(format!(
                "invalid field '{field}': it starts with '-', which the template's command would read as an option \
                 (the template needs '--' before {{prompt}}, or prompt_may_start_with_dash = true)"
            )));
        }
    }
    Ok(())
}

/// A request's timeout: a positive number of seconds or a duration text,
/// at least 1 ms (the store keeps milliseconds: a shorter one would become
/// 0, no timeout) and at most `max`.
pub(crate) fn parse_timeout(v: &Value, max: Duration) -> Result<Duration, ApiError> {
    let d = match v {
        Value::Number(n) => n
            .as_f64()
            .filter(|s| s.is_finite() && *s > 0.0)
            .map(|s| Duration::try_from_secs_f64(s).unwrap_or(Duration::MAX)),
        Value::String(s) => humantime::parse_duration(s.trim()).ok(),
        _ => None,
    }
    .filter(|d| !d.is_zero())
    .ok_or_else(|| {
        ApiError::bad(format!(
            "invalid field 'timeout': {v} (use a duration such as \"90s\" or \"15m\", or a number of seconds)"
        ))
    })?;
    if d > max {
        return Err(ApiError::bad(format!(
            "invalid field 'timeout': {v} is longer than this service's max_timeout ({})",
            humantime::format_duration(max)
        )));
    }
    if d < Duration::from_millis(1) {
        return Err(ApiError::bad(format!(
            "invalid field 'timeout': {v} is shorter than 1ms (the shortest timeout)"
        )));
    }
    Ok(d)
}

/// The most characters of a group name that is not all ASCII: a name is
/// at most [`baton_lock::MAX_NAME_LEN`] (200) bytes, which a schema cannot
/// count; 50 characters of up to 4 bytes always fit. So the API takes an
/// ASCII name of up to 200 characters or any name of up to 50, exactly what
/// the OpenAPI document says (`crate::openapi`).
pub const MAX_NON_ASCII_GROUP_CHARS: usize = baton_lock::MAX_NAME_LEN / 4;

/// Refuses a non-ASCII group name longer than [`MAX_NON_ASCII_GROUP_CHARS`].
pub(crate) fn check_group_length(group: &str) -> Result<(), ApiError> {
    let chars = group.chars().count();
    if !group.is_ascii() && chars > MAX_NON_ASCII_GROUP_CHARS {
        return Err(ApiError::bad(format!(
            "invalid field 'group': a name with non-ASCII characters is at most {MAX_NON_ASCII_GROUP_CHARS} characters \
             (this one has {chars}); an ASCII name is at most {} characters",
            baton_lock::MAX_NAME_LEN
        )));
    }
    Ok(())
}

/// Refuses `workspace.reset_branch` where there is nothing to start over:
/// a template without a workspace (or a raw command), a job without
/// `workspace.branch`, or a workspace that names no branch to start it over
/// at (where `baton run --reset-branch` needs `--ref`).
pub(crate) fn check_reset(
    template_name: &str,
    workspace: Option<&crate::config::WorkspaceTemplate>,
    branch: Option<&str>,
) -> Result<(), ApiError> {
    let Some(w) = workspace else {
        return Err(ApiError::bad(format!(
            "invalid field 'workspace.reset_branch': template '{template_name}' has no workspace, so there is no branch to start over"
        )));
    };
    if branch.is_none() {
        return Err(ApiError::bad(
            "invalid field 'workspace.reset_branch': it needs 'workspace.branch' (the branch to start over)",
        ));
    }
    if w.branch.is_none() {
        return Err(ApiError::bad(format!(
            "invalid field 'workspace.reset_branch': the workspace of template '{template_name}' names no branch to start the job's branch over at (set its workspace's branch)"
        )));
    }
    Ok(())
}

/// Why the service refuses `b` as a job's `workspace.branch`, if it does:
/// baton-git's rule first ([`baton_git::branch_name_refusal`]: what git
/// refuses, and a name that would shadow another namespace, such as
/// `origin/main` or `refs/...`), then the service's narrower alphabet
/// ([`valid_branch`], the OpenAPI document's pattern).
pub(crate) fn branch_refusal(b: &str) -> Option<String> {
    if let Some(why) = baton_git::branch_name_refusal(b, &[]) {
        return Some(why);
    }
    (!valid_branch(b)).then(|| {
        "the service takes ASCII letters, digits and '._/+-' only, at most 200 characters".into()
    })
}

/// Refuses (400) a job's `workspace.branch` that starts with the name of a
/// remote of its template's base other than `origin` (which
/// [`branch_refusal`] refuses already): read with `git remote` off the
/// async workers, only for a job that names a branch. A base that cannot be
/// read is left to the job's workspace set-up, which checks again (as it
/// does a remote added after submission) and fails the job naming why.
pub(crate) async fn check_remote_shadow(service: &Service, job: &NewJob) -> Result<(), ApiError> {
    let Some(branch) = job.branch.clone() else {
        return Ok(());
    };
    let Some(repo) = service
        .config
        .templates
        .get(&job.template)
        .and_then(|t| t.workspace.as_ref())
        .map(|w| w.repo.clone())
    else {
        return Ok(());
    };
    let remotes = tokio::task::spawn_blocking(move || baton_git::remote_names(&repo))
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
    let remotes: Vec<&str> = remotes.iter().map(String::as_str).collect();
    match baton_git::branch_name_refusal(&branch, &remotes) {
        None => Ok(()),
        Some(why) => Err(ApiError::bad(format!(
            "invalid field 'workspace.branch': '{branch}' is refused: {why}"
        ))),
    }
}

/// What `git check-ref-format --branch` would accept, conservatively:
/// ASCII words, '.', '/', '+', '-' and '_'; '/'-separated components, none
/// empty, starting with '.' or ending with `.lock`; no `..`; not starting
/// with '-' nor ending with '.'; not `HEAD`.
pub(crate) fn valid_branch(b: &str) -> bool {
    !b.is_empty()
        && b.len() <= 200
        && b != "HEAD"
        && !b.starts_with('-')
        && !b.ends_with('.')
        && !b.contains("..")
        && b.chars()
            .all(|c| c.is_ascii_alphanumeric() || "._/-+".contains(c))
        && b.split('/')
            .all(|c| !c.is_empty() && !c.starts_with('.') && !c.ends_with(".lock"))
}
