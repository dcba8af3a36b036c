//! The HTTP API (`/v1/jobs`, `/health`, `/metrics`): JSON in and out, in
//! the types of `baton-api` (a job is a [`JobView`], made from the stored
//! [`Job`]), errors as [`ErrorBody`] `{"error": {"code", "message"}}`.
//!
//! Errors follow axum's `examples/error-handling`: a handler returns an
//! [`ApiError`], which turns into its response with no side effect; an
//! internal error keeps its detail out of the answer (a generic message)
//! and hands it to the [`log_errors`] middleware, which logs it once with
//! the request. A JSON body is read by [`JsonBody`], whose rejection is an
//! [`ApiError`] naming the field.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use baton_api::{ErrorBody, GroupMode, JobList, JobView, Queued};
pub use baton_api::{ListQuery, SubmitRequest, WorkspaceOptions};
use serde::Deserialize;
use serde_json::json;

use crate::model::{now_ms, Counts, Job, JobStatus, ListFilter, NewJob, Submitted};
use crate::output::{self, Stream};
use crate::service::{Cancelled, Service};
use crate::store::StoreError;

mod input;

use input::{branch_refusal, check_group_length, check_remote_shadow, check_reset, parse_timeout};
pub use input::{check_prompt, parse_body, MAX_NON_ASCII_GROUP_CHARS};

/// Shared state of the handlers.
pub type AppState = Arc<Service>;

/// The most stdout shown with a job.
pub const OUTPUT_TAIL_BYTES: u64 = 64 * 1024;

/// An API error: status, a stable code, a one-line message.
#[derive(Debug)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// A stable, machine-readable code.
    pub code: &'static str,
    /// What went wrong, naming the thing and the reason.
    pub message: String,
    /// Seconds to wait before retrying (429, 503).
    pub retry_after: Option<u64>,
    /// What only the log may see (an internal error's cause): see
    /// [`ApiError::internal`].
    pub logged: Option<Logged>,
}

/// An error's detail for the service's log, carried by its response to the
/// [`log_errors`] middleware.
#[derive(Clone, Debug)]
pub struct Logged {
    /// What failed ("store error", ...).
    pub what: &'static str,
    /// Its cause, in full.
    pub detail: String,
}

impl ApiError {
    /// An error with no retry hint.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            retry_after: None,
            logged: None,
        }
    }

    /// 500 whose answer says only that the service failed (`code`, and
    /// what it was doing), while `detail` goes to the log.
    pub fn internal(code: &'static str, doing: &str, detail: impl std::fmt::Display) -> ApiError {
        let mut e = ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            code,
            format!("internal error while trying to {doing} (the service's log has the cause)"),
        );
        e.logged = Some(Logged {
            what: "internal error",
            detail: format!("cannot {doing}: {detail}"),
        });
        e
    }

    /// 400 naming a bad field.
    pub fn bad(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }

    /// 404 for a job id.
    pub fn no_job(id: &str) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no job '{id}' (unknown, or evicted after job_ttl)"),
        )
    }
}

/// 503 `store_unavailable` (retry in 1 s). The store's message names what
/// failed, not a secret, and tells a client whether retrying may help: it
/// is the answer's message; it is logged too.
impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        let message = e.to_string();
        let mut err = ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "store_unavailable",
            message.clone(),
        );
        err.retry_after = Some(1);
        err.logged = Some(Logged {
            what: "store error",
            detail: message,
        });
        err
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody::new(self.code, self.message);
        let mut resp = (self.status, Json(body)).into_response();
        if let Some(s) = self.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        if let Some(logged) = self.logged {
            resp.extensions_mut().insert(logged);
        }
        resp
    }
}

/// Logs the detail of every error response that carries one (see
/// [`ApiError::logged`]), with the request's method and path.
pub async fn log_errors(req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let resp = next.run(req).await;
    if let Some(logged) = resp.extensions().get::<Logged>() {
        tracing::error!(error = %logged.detail, %method, %path, "{}", logged.what);
    }
    resp
}

/// A JSON body of type `T`, read with [`parse_body`]: every way it can be
/// wrong is an [`ApiError`] naming the field.
#[derive(Debug)]
pub struct JsonBody<T>(pub T);

impl<S, T> FromRequest<S> for JsonBody<T>
where
    S: Send + Sync,
    T: serde::de::DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<JsonBody<T>, ApiError> {
        parse_body(Bytes::from_request(req, state).await).map(JsonBody)
    }
}

/// The one parameter of a route's path (a job id, a model), with a bad
/// one (not UTF-8) reported as an [`ApiError`] naming it.
#[derive(Debug)]
pub struct PathParam(pub String);

impl<S: Send + Sync> FromRequestParts<S> for PathParam {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<PathParam, ApiError> {
        match Path::<String>::from_request_parts(parts, state).await {
            Ok(Path(p)) => Ok(PathParam(p)),
            Err(e) => Err(ApiError::bad(format!("invalid path: {}", e.body_text()))),
        }
    }
}

/// Validates a submission and resolves it into a job to store.
pub fn resolve(service: &Service, req: SubmitRequest) -> Result<NewJob, ApiError> {
    let config = &service.config;
    let order = req.order_value();
    let template_name = match req.template.or_else(|| config.default_template.clone()) {
        Some(t) => t,
        None if req.command.is_some() => "raw".to_string(),
        None => {
            return Err(ApiError::bad(
                "missing field 'template': the service has no default_template",
            ))
        }
    };
    let template = config.templates.get(&template_name);
    // The prompt becomes an argument and a variable, where a NUL byte
    // cannot go: refuse it here rather than fail the job at its start.
    if req.prompt.as_deref().is_some_and(|p| p.contains('\0')) {
        return Err(ApiError::bad(
            "invalid field 'prompt': it contains a NUL byte (U+0000), which no command argument can hold",
        ));
    }
    if let Some(p) = &req.prompt {
        let substituted = template.filter(|_| req.command.is_none());
        check_prompt(service, substituted, p, "prompt")?;
    }
    if let Some(cmd) = &req.command {
        if cmd.iter().any(|a| a.contains('\0')) {
            return Err(ApiError::bad(
                "invalid field 'command': an argument contains a NUL byte (U+0000)",
            ));
        }
        if !config.allow_raw_commands {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "raw_command_forbidden",
                "field 'command' is refused: this service runs configured templates only (allow_raw_commands = false)",
            ));
        }
        if cmd.is_empty() || cmd[0].is_empty() {
            return Err(ApiError::bad(
                "invalid field 'command': it must name a program",
            ));
        }
    } else if template.is_none() {
        let known: Vec<&str> = config.templates.keys().map(String::as_str).collect();
        return Err(ApiError::bad(format!(
            "invalid field 'template': no template '{template_name}' (configured: {})",
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        )));
    }
    if let Some(g) = &req.group {
        baton_lock::LockName::new(g)
            .map_err(|e| ApiError::bad(format!("invalid field 'group': {e}")))?;
        check_group_length(g)?;
    }
    let mode = match req.mode.as_deref() {
        None => GroupMode::Queue,
        Some(m) => {
            let mode = GroupMode::parse(m).ok_or_else(|| {
                ApiError::bad(format!(
                    "invalid field 'mode': '{m}' (use queue, supersede, coalesce or skip)"
                ))
            })?;
            if req.group.is_none() {
                return Err(ApiError::bad(
                    "invalid field 'mode': a mode needs a 'group'",
                ));
            }
            mode
        }
    };
    let order = order.map_err(ApiError::bad)?;
    if let Some(o) = &order {
        if !matches!(mode, GroupMode::Supersede | GroupMode::Coalesce) {
            return Err(ApiError::bad(format!(
                "invalid field 'order': '{o}' applies to modes supersede and coalesce only, not {}",
                mode.as_str()
            )));
        }
    }
    let timeout = match &req.timeout {
        None => template
            .and_then(|t| t.timeout)
            .unwrap_or(config.default_timeout),
        Some(v) => parse_timeout(v, config.max_timeout)?,
    };
    let options = req.workspace.unwrap_or_default();
    let workspace = template
        .and_then(|t| t.workspace.as_ref())
        .filter(|_| req.command.is_none());
    let reset_branch = options.reset_branch;
    if reset_branch {
        check_reset(&template_name, workspace, options.branch.as_deref())?;
    }
    let branch = match options.branch {
        None => None,
        Some(b) => {
            if workspace.is_none() {
                return Err(ApiError::bad(format!(
                    "invalid field 'workspace.branch': template '{template_name}' has no workspace"
                )));
            }
            if let Some(why) = branch_refusal(&b) {
                return Err(ApiError::bad(format!(
                    "invalid field 'workspace.branch': '{b}' is refused: {why}"
                )));
            }
            Some(b)
        }
    };
    Ok(NewJob {
        id: baton_lock::new_run_id(),
        template: template_name,
        prompt: req.prompt,
        group: req.group,
        mode,
        order: order.map(|o| o.text().to_string()),
        timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
        branch,
        reset_branch,
        command: req.command,
        created_at: now_ms(),
        waiter: None,
    })
}

/// Stores a job, refusing when draining or full.
pub async fn submit(service: &Service, job: NewJob) -> Result<(Job, u64), ApiError> {
    if service.is_draining() {
        let mut e = ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "draining",
            "the service is shutting down and accepts no new jobs",
        );
        e.retry_after = Some(5);
        return Err(e);
    }
    match service
        .store
        .submit(job, service.config.max_queue_depth)
        .await?
    {
        Submitted::Queued {
            job,
            position,
            superseded,
        } => {
            if !superseded.is_empty() {
                tracing::info!(job = %job.spec.id, superseded = ?superseded, "queued jobs superseded");
            }
            // The group's running jobs stop now, even when the new one has
            // to wait for a slot (a shared store tells every node instead).
            if let (GroupMode::Supersede, Some(group), None) =
                (job.spec.mode, &job.spec.group, service.store.events())
            {
                service.supersede_running(&job.spec.id, job.seq, job.spec.order.as_deref(), group);
            }
            service.wake();
            Ok((*job, position))
        }
        Submitted::Full { counts } => {
            let mut e = ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "queue_full",
                format!(
                    "the queue is full: {} running + {} queued reach max_queue_depth {}",
                    counts.running, counts.queued, service.config.max_queue_depth
                ),
            );
            e.retry_after = Some(1);
            Err(e)
        }
    }
}

/// `POST /v1/jobs`: `202` [`Queued`].
pub async fn post_job(
    State(service): State<AppState>,
    JsonBody(req): JsonBody<SubmitRequest>,
) -> Result<Response, ApiError> {
    let t0 = std::time::Instant::now();
    let job = resolve(&service, req)?;
    check_remote_shadow(&service, &job).await?;
    let (job, position) = submit(&service, job).await?;
    tracing::debug!(us = t0.elapsed().as_micros() as u64, "post_job handled");
    Ok((
        StatusCode::ACCEPTED,
        [(header::LOCATION, format!("/v1/jobs/{}", job.spec.id))],
        Json(Queued {
            id: job.spec.id,
            status: job.status,
            position,
        }),
    )
        .into_response())
}

/// A job as the API shows it, with the tail of its stdout.
pub fn job_with_output(service: &Service, job: &Job) -> JobView {
    let mut view = JobView::from(job);
    view.output = Some(output::tail(
        &service.files(&job.spec.id).stream(Stream::Stdout),
        OUTPUT_TAIL_BYTES,
    ));
    view
}

/// The job `id`, or the API's "no such job" (404).
pub(crate) async fn find_job(service: &Service, id: &str) -> Result<Job, ApiError> {
    service
        .store
        .get(id)
        .await?
        .ok_or_else(|| ApiError::no_job(id))
}

/// `GET /v1/jobs/{id}`.
pub async fn get_job(
    State(service): State<AppState>,
    PathParam(id): PathParam,
) -> Result<Json<JobView>, ApiError> {
    let job = find_job(&service, &id).await?;
    Ok(Json(job_with_output(&service, &job)))
}

/// `GET /v1/jobs?status=&group=&limit=&cursor=`, newest first.
pub async fn list_jobs(
    State(service): State<AppState>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<JobList>, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::bad(format!("invalid query: {}", e.body_text())))?;
    let status = match q.status.as_deref() {
        None | Some("") => None,
        Some(s) => Some(JobStatus::parse(s).ok_or_else(|| {
            ApiError::bad(format!(
                "invalid parameter 'status': '{s}' is not a job status"
            ))
        })?),
    };
    let limit = q.limit.unwrap_or(50);
    if limit == 0 || limit > 1000 {
        return Err(ApiError::bad("invalid parameter 'limit': use 1 to 1000"));
    }
    let before_seq = match q.cursor.as_deref() {
        None | Some("") => None,
        Some(c) => Some(
            c.parse::<i64>()
                .ok()
                .filter(|_| c.bytes().all(|b| b.is_ascii_digit()))
                .ok_or_else(|| {
                    ApiError::bad(format!(
                        "invalid parameter 'cursor': '{c}' (use next_cursor of the previous page)"
                    ))
                })?,
        ),
    };
    let jobs = service
        .store
        .list(&ListFilter {
            status,
            group: q.group.filter(|g| !g.is_empty()),
            limit,
            before_seq,
        })
        .await?;
    let next_cursor = (jobs.len() == limit as usize)
        .then(|| jobs.last().map(|j| j.seq.to_string()))
        .flatten();
    Ok(Json(JobList {
        jobs: jobs.iter().map(JobView::from).collect(),
        next_cursor,
    }))
}

/// `DELETE /v1/jobs/{id}`: removes a job that has ended (its record and
/// output); 409 for one that has not (cancel it first). Before this was
/// a real delete it cancelled, which a client could not tell from the
/// document (a deleted job was still there).
pub async fn delete_job(
    State(service): State<AppState>,
    PathParam(id): PathParam,
) -> Result<StatusCode, ApiError> {
    use crate::store::RemoveFinished;
    match service.remove(&id).await? {
        RemoveFinished::Removed => Ok(StatusCode::NO_CONTENT),
        RemoveFinished::Unknown => Err(ApiError::no_job(&id)),
        RemoveFinished::Active(status) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "not_finished",
            format!(
                "job '{id}' is {}: cancel it first (POST /v1/jobs/{id}/cancel)",
                status.as_str()
            ),
        )),
    }
}

/// The body of `POST /v1/jobs/{id}/cancel`: an empty object (a JSON body,
/// as every POST: a cross-site form cannot send one).
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelRequest {}

/// `POST /v1/jobs/{id}/cancel`.
pub async fn cancel_job(
    State(service): State<AppState>,
    PathParam(id): PathParam,
    JsonBody(CancelRequest {}): JsonBody<CancelRequest>,
) -> Result<Json<JobView>, ApiError> {
    cancel(&service, &id).await.map(Json)
}

/// Cancels job `id` (see [`Service::cancel`]), with the API's errors: 404
/// unknown, 409 already ended or running on another node.
pub(crate) async fn cancel(service: &Service, id: &str) -> Result<JobView, ApiError> {
    match service.cancel(id).await? {
        Cancelled::Done(job) => Ok(JobView::from(&*job)),
        Cancelled::Unknown => Err(ApiError::no_job(id)),
        Cancelled::Finished(status) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "already_finished",
            format!("job '{id}' has already ended ({})", status.as_str()),
        )),
        Cancelled::NotHere => Err(ApiError::new(
            StatusCode::CONFLICT,
            "not_on_this_node",
            format!("job '{id}' runs on another node"),
        )),
    }
}

/// `GET /v1/jobs/{id}/log` query.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LogQuery {
    /// Stream the output until the job ends (default: what there is now).
    follow: Option<bool>,
    /// Which output: `stdout` (the default) or `stderr`.
    stream: Option<String>,
}

/// `GET /v1/jobs/{id}/log[?follow=true][&stream=stderr]`: the captured
/// output as text; with follow, streamed until the job ends.
pub async fn job_log(
    State(service): State<AppState>,
    PathParam(id): PathParam,
    query: Result<Query<LogQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::bad(format!("invalid query: {}", e.body_text())))?;
    let stream = match q.stream.as_deref() {
        None | Some("stdout") => Stream::Stdout,
        Some("stderr") => Stream::Stderr,
        Some(s) => {
            return Err(ApiError::bad(format!(
                "invalid parameter 'stream': '{s}' (use stdout or stderr)"
            )))
        }
    };
    let job = find_job(&service, &id).await?;
    let path = service.files(&id).stream(stream);
    let text = [(header::CONTENT_TYPE, "text/plain; charset=utf-8")];
    if !q.follow.unwrap_or(false) || job.status.is_final() {
        // Streamed from disk in chunks: memory stays bounded however many
        // read a large log.
        let chunks = output::chunks(&path)
            .await
            .map_err(|e| ApiError::internal("io", "read the job's log", e))?;
        return Ok((text, Body::from_stream(chunks)).into_response());
    }
    let body = Body::from_stream(crate::follow::follow(service, id, path));
    Ok((text, body).into_response())
}

/// The answer of `/health` on a node that is well (`/v1/overview` shows it
/// too): `{status, busy, active, queued, capacity, node_capacity, node}`.
pub(crate) fn health_body(service: &Service, counts: &Counts, draining: bool) -> serde_json::Value {
    let capacity = service.config.capacity();
    json!({
        "status": if draining { "draining" } else { "ok" },
        "busy": counts.running >= capacity,
        "active": counts.running,
        "queued": counts.queued,
        "capacity": capacity,
        "node_capacity": service.config.node_cap(),
        "node": service.node,
    })
}

/// `GET /health`: `{status, busy, active, queued, capacity, node_capacity,
/// node}` and, on a store several nodes share, `nodes` (see
/// [`crate::store::Store::nodes`]); 503 while draining.
pub async fn health(State(service): State<AppState>) -> Response {
    let capacity = service.config.capacity();
    let draining = service.is_draining();
    let counted = match service.store.counts().await {
        Ok(_) if !service.store.is_live() => Err(StoreError::Query {
            op: "hold this node's database session",
            message: "the session is lost; re-establishing it".to_string(),
        }),
        Ok(_) if service.store.problem().is_some() => Err(StoreError::Query {
            op: "write",
            message: service.store.problem().unwrap_or_default(),
        }),
        Ok(_) if output::disk_problem(&service.jobs_root).is_some() => Err(StoreError::Query {
            op: "keep jobs' output",
            message: output::disk_problem(&service.jobs_root).unwrap_or_default(),
        }),
        other => other,
    };
    let counted = match counted {
        Ok(c) => service.store.nodes().await.map(|n| (c, n)),
        Err(e) => Err(e),
    };
    match counted {
        Ok((c, nodes)) => {
            let mut body = health_body(&service, &c, draining);
            if let Some(nodes) = nodes {
                body["nodes"] = json!(nodes);
            }
            let code = if draining {
                StatusCode::SERVICE_UNAVAILABLE
            } else {
                StatusCode::OK
            };
            (code, Json(body)).into_response()
        }
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({
                "status": "degraded",
                "busy": true,
                "active": service.active(),
                "queued": null,
                "capacity": capacity,
                "node_capacity": service.config.node_cap(),
                "node": service.node,
                "error": e.to_string(),
            })),
        )
            .into_response(),
    }
}

/// `GET /metrics` (Prometheus text format).
pub async fn metrics(State(service): State<AppState>) -> Result<Response, ApiError> {
    let by_status = service.store.status_counts().await?;
    let counts = service.store.counts().await?;
    let text = service
        .metrics
        .render(&by_status, counts, service.config.capacity());
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response())
}
