//! Compatibility routes, so that clients written for other services work
//! unchanged:
//!
//! - `POST /execute {prompt, template?}` -> `202 {job_id, status}` and
//!   `GET /jobs/{id}` (and `DELETE /jobs/{id}`, which cancels as
//!   `DELETE /v1/jobs/{id}` does): the single-endpoint agent service this one replaces,
//!   in its vocabulary ([`legacy_status`]: its pollers wait for
//!   `completed`, `failed`, `timeout` or `error`); the precise state is in
//!   `baton_status`.
//! - `POST /v1/chat/completions`, `GET /v1/models`, `GET /v1/models/{model}`:
//!   the OpenAI shape, so stock OpenAI clients run templates (a model is a
//!   template). See [`chat`] for how messages become a prompt, how the call
//!   waits, streams, and what a client disconnect does.
//!
//! Errors on the OpenAI routes use OpenAI's error shape
//! (`{"error": {"message", "type", "param", "code"}}`), which keeps our
//! `code` and `message`, so both kinds of clients read them.

pub mod chat;

use std::sync::OnceLock;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::api::{self, ApiError, AppState, PathParam, SubmitRequest};
use crate::model::now_ms;

/// When this process built its routes (seconds since the epoch): the
/// `created` time of every model.
static STARTED: OnceLock<i64> = OnceLock::new();

/// The compatibility routes (behind auth).
pub fn routes() -> Router<AppState> {
    STARTED.get_or_init(|| now_ms() / 1000);
    Router::new()
        .route("/execute", post(execute))
        .route("/jobs/{id}", get(get_job).delete(cancel_job))
        .route("/v1/chat/completions", post(chat::completions))
        .route("/v1/models", get(models))
        .route("/v1/models/{model}", get(model))
}

/// The older service's body. Fields it ignored (timeout, ...) are ignored
/// here too, as its clients send them (each name is logged once).
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct ExecuteRequest {
    /// As the prompt of `POST /v1/jobs` (size limit, dash rule).
    pub prompt: String,
    /// The template (default: the configured default_template).
    pub template: Option<String>,
    /// What else the client sent.
    #[serde(flatten)]
    pub ignored: serde_json::Map<String, Value>,
}

/// Logs each ignored field name of `POST /execute` once per process.
fn log_ignored(fields: &serde_json::Map<String, Value>) {
    static LOGGED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    if fields.is_empty() {
        return;
    }
    let mut logged = LOGGED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for name in fields.keys() {
        if logged.len() < 64 && !logged.contains(name) {
            tracing::warn!(field = %name, "POST /execute: ignoring a field this service does not use (as the older service did)");
            logged.push(name.clone());
        }
    }
}

/// `POST /execute {prompt, template?}` -> `202 {job_id, status}`; `429` +
/// `Retry-After` when the queue is full.
pub async fn execute(
    State(service): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let req: ExecuteRequest = api::parse_body(body)?;
    log_ignored(&req.ignored);
    let job = api::resolve(
        &service,
        SubmitRequest {
            template: req.template,
            prompt: Some(req.prompt),
            ..SubmitRequest::default()
        },
    )?;
    let (job, _position) = api::submit(&service, job).await?;
    Ok((
        StatusCode::ACCEPTED,
        [(header::LOCATION, format!("/jobs/{}", job.spec.id))],
        Json(json!({"job_id": job.spec.id, "status": legacy_status(job.status)})),
    )
        .into_response())
}

/// A status in the older service's vocabulary: `queued`, `running`,
/// `completed`, `failed`, `timeout`, or `error` for every other end
/// (cancelled, superseded, skipped, interrupted).
pub fn legacy_status(status: crate::model::JobStatus) -> &'static str {
    use crate::model::JobStatus;
    match status {
        JobStatus::Queued => "queued",
        JobStatus::Running => "running",
        JobStatus::Succeeded => "completed",
        JobStatus::Failed => "failed",
        JobStatus::TimedOut => "timeout",
        JobStatus::Cancelled
        | JobStatus::Superseded
        | JobStatus::Skipped
        | JobStatus::Interrupted => "error",
    }
}

/// `GET /jobs/{id}`: the job as `GET /v1/jobs/{id}` shows it, plus `job_id`,
/// with `status` in the older vocabulary ([`legacy_status`]) and the
/// precise status in `baton_status`.
pub async fn get_job(
    State(service): State<AppState>,
    PathParam(id): PathParam,
) -> Result<Json<Value>, ApiError> {
    let job = api::find_job(&service, &id).await?;
    let mut v = json!(api::job_with_output(&service, &job));
    v["job_id"] = Value::String(job.spec.id.clone());
    v["baton_status"] = Value::String(job.status.as_str().to_string());
    v["status"] = Value::String(legacy_status(job.status).to_string());
    Ok(Json(v))
}

/// `DELETE /jobs/{id}`: cancels the job exactly as `POST
/// /v1/jobs/{id}/cancel` does (the older service's meaning of DELETE, kept
/// for its clients) (the same errors: 404 unknown, 409 already ended or on another
/// node), and answers with the job as `GET /jobs/{id}` shows it.
pub async fn cancel_job(
    State(service): State<AppState>,
    PathParam(id): PathParam,
) -> Result<Json<Value>, ApiError> {
    api::cancel(&service, &id).await?;
    get_job(State(service), PathParam(id)).await
}

/// `GET /v1/models`: every template, as an OpenAI model list.
pub async fn models(State(service): State<AppState>) -> Json<Value> {
    let data: Vec<Value> = service
        .config
        .templates
        .keys()
        .map(|t| model_json(t))
        .collect();
    Json(json!({"object": "list", "data": data}))
}

/// `GET /v1/models/{model}`: one template as an OpenAI model; 404 if unknown.
pub async fn model(
    State(service): State<AppState>,
    PathParam(name): PathParam,
) -> Result<Json<Value>, OpenAiError> {
    if service.config.templates.contains_key(&name) {
        Ok(Json(model_json(&name)))
    } else {
        Err(OpenAiError::unknown_model(&service, &name))
    }
}

fn model_json(name: &str) -> Value {
    json!({
        "id": name,
        "object": "model",
        "created": STARTED.get().copied().unwrap_or(0),
        "owned_by": "baton",
    })
}

/// An error in OpenAI's shape: `{"error": {"message", "type", "param",
/// "code"}}` (plus `job_id` when a job is concerned), with `Retry-After` and
/// `x-should-retry` headers where they apply.
#[derive(Debug)]
pub struct OpenAiError {
    /// The error, as our own routes would report it.
    pub inner: ApiError,
    /// The request field at fault, if any.
    pub param: Option<&'static str>,
    /// The job concerned, if any.
    pub job_id: Option<String>,
    /// Whether a client should retry (OpenAI clients read `x-should-retry`).
    pub retry: Option<bool>,
}

impl OpenAiError {
    /// 404 for a model that is not a template, naming the templates.
    pub fn unknown_model(service: &crate::service::Service, name: &str) -> OpenAiError {
        let known: Vec<&str> = service
            .config
            .templates
            .keys()
            .map(String::as_str)
            .collect();
        OpenAiError {
            inner: ApiError::new(
                StatusCode::NOT_FOUND,
                "model_not_found",
                format!(
                    "no model '{name}': models are this service's templates (configured: {})",
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                ),
            ),
            param: Some("model"),
            job_id: None,
            retry: Some(false),
        }
    }
}

impl From<ApiError> for OpenAiError {
    fn from(inner: ApiError) -> OpenAiError {
        OpenAiError {
            inner,
            param: None,
            job_id: None,
            retry: None,
        }
    }
}

impl From<crate::store::StoreError> for OpenAiError {
    fn from(e: crate::store::StoreError) -> OpenAiError {
        ApiError::from(e).into()
    }
}

impl OpenAiError {
    /// The body's `error` object.
    pub fn error_json(&self) -> Value {
        let kind = if self.inner.status.is_server_error() {
            "server_error"
        } else {
            "invalid_request_error"
        };
        let mut e = json!({
            "message": self.inner.message,
            "type": kind,
            "param": self.param,
            "code": self.inner.code,
        });
        if let Some(id) = &self.job_id {
            e["job_id"] = Value::String(id.clone());
        }
        e
    }
}

impl IntoResponse for OpenAiError {
    fn into_response(self) -> Response {
        let body = json!({"error": self.error_json()});
        let mut resp = (self.inner.status, Json(body)).into_response();
        if let Some(logged) = self.inner.logged {
            // For `api::log_errors`, as an `ApiError`'s response carries it.
            resp.extensions_mut().insert(logged);
        }
        let headers = resp.headers_mut();
        if let Some(s) = self.inner.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        if let Some(r) = self.retry {
            headers.insert(
                "x-should-retry",
                HeaderValue::from_static(if r { "true" } else { "false" }),
            );
        }
        resp
    }
}
