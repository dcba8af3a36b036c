//! Every route the service serves, as the OpenAPI document describes it:
//! its operation, what it takes and what it answers, with the types of its
//! bodies. The router is `crate::server::router` (with
//! `crate::compat::routes` and the dashboard's); `tests/serve_openapi.rs`
//! holds the two to the same routes.
//!
//! What every operation of a kind answers is added by the generator
//! ([`super::generate`]): 401 behind the token, 403 from the Host and
//! Origin checks, 415 for a POST body that is not JSON.

use serde_json::{json, Value};

use super::schemas::{json_answer, response, Schemas};
use super::shapes;

/// Who may call a route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Anyone who passes the Host and Origin checks (no token).
    Open,
    /// With the token, when one is configured.
    Token,
}

/// One operation of the document.
#[derive(Debug)]
pub struct Operation {
    /// `get`, `post`, `delete`.
    pub method: &'static str,
    /// The route, with `{param}`s.
    pub path: &'static str,
    /// Its `operationId`.
    pub id: &'static str,
    /// Its tag.
    pub tag: &'static str,
    /// One line.
    pub summary: &'static str,
    /// What a client needs to know beyond the summary.
    pub description: Option<&'static str>,
    /// Who may call it.
    pub access: Access,
    /// Its query parameters.
    pub params: Vec<Value>,
    /// Its `requestBody`.
    pub body: Option<Value>,
    /// Its answers, by status code.
    pub responses: Vec<(&'static str, Value)>,
}

fn op(
    method: &'static str,
    path: &'static str,
    id: &'static str,
    tag: &'static str,
    summary: &'static str,
) -> Operation {
    Operation {
        method,
        path,
        id,
        tag,
        summary,
        description: None,
        access: Access::Token,
        params: Vec::new(),
        body: None,
        responses: Vec::new(),
    }
}

impl Operation {
    fn describe(mut self, description: &'static str) -> Operation {
        self.description = Some(description);
        self
    }

    fn open(mut self) -> Operation {
        self.access = Access::Open;
        self
    }

    /// A required JSON body of `schema`.
    fn body(mut self, schema: Value, description: Option<&str>) -> Operation {
        let mut body =
            json!({"required": true, "content": {"application/json": {"schema": schema}}});
        if let Some(d) = description {
            body["description"] = json!(d);
        }
        self.body = Some(body);
        self
    }

    fn answer(mut self, code: &'static str, response: Value) -> Operation {
        self.responses.push((code, response));
        self
    }

    /// Answers that are shared responses: `(code, name)`.
    fn shared(mut self, answers: &[(&'static str, &str)]) -> Operation {
        for (code, name) in answers {
            self.responses.push((code, response(name)));
        }
        self
    }

    fn param(mut self, param: Value) -> Operation {
        self.params.push(param);
        self
    }
}

/// An answer with a text body of media type `media`.
fn text_answer(description: &str, media: &str) -> Value {
    json!({"description": description, "content": {media: {"schema": {"type": "string"}}}})
}

/// A query parameter named `name` of the query type whose (inline) schema
/// is `query`: its description from the type, its schema `schema`.
fn query_param(query: &Value, name: &str, schema: Value) -> Value {
    let mut p = json!({"name": name, "in": "query", "schema": schema});
    if let Some(d) = query.pointer(&format!("/properties/{name}/description")) {
        p["description"] = d.clone();
    }
    p
}

/// Every operation, in the order of the document's paths.
pub fn operations(s: &mut Schemas) -> Vec<Operation> {
    let error = s.written::<baton_api::ErrorBody>();
    let job = s.written::<baton_api::JobView>();
    let health = shapes::health(s);
    let list = s.read_inline::<baton_api::ListQuery>();
    let log = s.read_inline::<crate::api::LogQuery>();
    let mut ops = vec![
        // crate::dashboard::page
        op("get", "/", "dashboard", "service", "The dashboard")
            .describe(
                "One HTML page served from the binary (no CDN). It asks for the token itself when one \
                 is configured.",
            )
            .open()
            .answer("200", text_answer("The page.", "text/html")),
        // crate::api::health
        op("get", "/health", "health", "service", "Health")
            .describe(
                "For dashboards and dispatchers; no token needed. With a PostgreSQL store it also lists \
                 the nodes of the service (nodes) and their liveness.",
            )
            .open()
            .answer("200", json_answer("Accepting jobs.", health.clone()))
            .answer(
                "503",
                json_answer(
                    "Draining (status draining), or degraded (status degraded, error says why): the \
                     store is unavailable, its files were removed, or its last write failed, or the \
                     disk under the jobs' output is full.",
                    health,
                ),
            ),
        // crate::api::metrics
        op("get", "/metrics", "metrics", "service", "Prometheus metrics")
            .describe("Jobs by status, active, queued, queue-wait and run-time histograms.")
            .answer("200", text_answer("Prometheus text format 0.0.4.", "text/plain"))
            .shared(&[("503", "Unavailable")]),
        // super::serve
        op("get", "/openapi.json", "openapi", "service", "This document")
            .describe("No token needed.")
            .open()
            .answer(
                "200",
                json_answer("The OpenAPI document.", json!({"type": "object"})),
            ),
        // crate::api::post_job
        op("post", "/v1/jobs", "submitJob", "jobs", "Submit a job")
            .describe("Answers once the job is durably stored; nothing is stored on any error.")
            .body(s.read::<baton_api::SubmitRequest>(), None)
            .answer("202", {
                let mut r = json_answer("Stored and queued.", s.written::<baton_api::Queued>());
                r["headers"] = json!({"Location": {"schema": {"type": "string"},
                                                   "description": "/v1/jobs/{id}"}});
                r
            })
            .answer(
                "403",
                json_answer(
                    "Field command while allow_raw_commands is false. Also: the Host or Origin check \
                     (code forbidden_host, forbidden_origin).",
                    error.clone(),
                ),
            )
            .shared(&[
                ("400", "BadRequest"),
                ("413", "TooLarge"),
                ("429", "Full"),
                ("503", "Unavailable"),
            ]),
        // crate::api::list_jobs
        op("get", "/v1/jobs", "listJobs", "jobs", "List jobs")
            .describe("Newest first.")
            .param(query_param(
                &list,
                "status",
                json!({"anyOf": [s.read::<baton_api::JobStatus>(), {"const": ""}]}),
            ))
            .param(query_param(&list, "group", json!({"type": "string"})))
            .param(query_param(
                &list,
                "limit",
                json!({"type": "integer", "minimum": 1, "maximum": 1000, "default": 50}),
            ))
            .param(query_param(&list, "cursor", json!({"type": "string"})))
            .answer(
                "200",
                json_answer("A page of jobs.", s.written::<baton_api::JobList>()),
            )
            .shared(&[("400", "BadRequest"), ("503", "Unavailable")]),
        // crate::api::get_job
        op("get", "/v1/jobs/{id}", "getJob", "jobs", "A job")
            .describe("With the last 64 KiB of its stdout.")
            .answer("200", json_answer("The job.", job.clone()))
            .shared(&[("404", "NotFound"), ("503", "Unavailable")]),
        // crate::api::delete_job
        op("delete", "/v1/jobs/{id}", "deleteJob", "jobs", "Remove a finished job")
            .describe(
                "Removes the record and output of a job that has ended, as eviction does after job_ttl; \
                 afterwards GET /v1/jobs/{id} answers 404. A queued or running job is left as it is \
                 (409, code not_finished): cancel it first with POST /v1/jobs/{id}/cancel.",
            )
            .answer("204", json!({"description": "Removed."}))
            .answer(
                "409",
                json_answer(
                    "It has not ended yet (code not_finished): cancel it first.",
                    error.clone(),
                ),
            )
            .shared(&[("404", "NotFound"), ("503", "Unavailable")]),
        // crate::api::cancel_job
        op("post", "/v1/jobs/{id}/cancel", "cancelJob", "jobs", "Cancel a job")
            .describe(
                "Queued: cancelled at once. Running: TERM, grace, KILL; the call returns once it has \
                 ended. The job stays readable (status cancelled) until job_ttl; DELETE /v1/jobs/{id} \
                 removes it sooner.",
            )
            .body(
                s.read::<crate::api::CancelRequest>(),
                Some("An empty object (every POST takes a JSON body)."),
            )
            .answer(
                "200",
                json_answer(
                    "The job as it is now (cancelled, or ended meanwhile).",
                    job.clone(),
                ),
            )
            .answer("409", ended_or_elsewhere(&error))
            .shared(&[
                ("400", "BadRequest"),
                ("404", "NotFound"),
                ("503", "Unavailable"),
            ]),
        // crate::api::job_log
        op("get", "/v1/jobs/{id}/log", "jobLog", "jobs", "A job's captured output")
            .describe(
                "The whole capture (capped at max_log_bytes); with follow, streamed until the job ends.",
            )
            .param(query_param(
                &log,
                "follow",
                json!({"type": "boolean", "default": false}),
            ))
            .param(query_param(
                &log,
                "stream",
                json!({"type": "string", "enum": ["stdout", "stderr"], "default": "stdout"}),
            ))
            .answer("200", text_answer("The output.", "text/plain"))
            .shared(&[
                ("400", "BadRequest"),
                ("404", "NotFound"),
                ("503", "Unavailable"),
            ]),
    ];
    ops.extend(compatibility(s, &error));
    // crate::dashboard::overview
    ops.push(
        op("get", "/v1/overview", "overview", "dashboard", "Dashboard overview")
            .describe(
                "What the dashboard shows, in one call: health (plus max_queue_depth), running jobs, \
                 queued jobs (next in line first), the last 25 finished jobs (newest end first), the \
                 nodes sharing a PostgreSQL store (as in /health; empty with SQLite), and the baton \
                 dir's groups, locks and workspaces. A section that cannot be read is empty and its \
                 reason is in errors.",
            )
            .answer("200", json_answer("The overview.", shapes::overview(s, &job))),
    );
    ops
}

/// 409 of a cancel.
fn ended_or_elsewhere(error: &Value) -> Value {
    json_answer(
        "It has already ended (code already_finished), or runs on another node.",
        error.clone(),
    )
}

/// The routes of the older agent service and the OpenAI-shaped ones
/// (`crate::compat`).
fn compatibility(s: &mut Schemas, error: &Value) -> Vec<Operation> {
    let compat_job = shapes::compat_job(s);
    let openai_error = shapes::openai_error(s);
    let oa = |description: &str| json_answer(description, openai_error.clone());
    vec![
        // crate::compat::execute
        op(
            "post",
            "/execute",
            "execute",
            "compatibility",
            "Submit a job (compatibility)",
        )
        .describe("The single-endpoint agent service's shape.")
        .body(s.read::<crate::compat::ExecuteRequest>(), None)
        .answer(
            "202",
            json_answer("Stored and queued.", shapes::execute_accepted(s)),
        )
        .shared(&[
            ("400", "BadRequest"),
            ("413", "TooLarge"),
            ("429", "Full"),
            ("503", "Unavailable"),
        ]),
        // crate::compat::get_job
        op(
            "get",
            "/jobs/{id}",
            "compatJob",
            "compatibility",
            "A job (compatibility)",
        )
        .describe(
            "As GET /v1/jobs/{id}, plus job_id, with status in the older service's vocabulary (queued, \
             running, completed, failed, timeout, error) and the precise status in baton_status.",
        )
        .answer("200", json_answer("The job.", compat_job.clone()))
        .shared(&[("404", "NotFound"), ("503", "Unavailable")]),
        // crate::compat::cancel_job
        op(
            "delete",
            "/jobs/{id}",
            "compatCancelJob",
            "compatibility",
            "Cancel a job (compatibility)",
        )
        .describe(
            "As POST /v1/jobs/{id}/cancel (queued: cancelled at once; running: TERM, grace, KILL; the \
             call returns once it has ended), answered as GET /jobs/{id}: with job_id, the older \
             service's status and baton_status.",
        )
        .answer(
            "200",
            json_answer(
                "The job as it is now (cancelled, or ended meanwhile).",
                compat_job,
            ),
        )
        .answer("409", ended_or_elsewhere(error))
        .shared(&[("404", "NotFound"), ("503", "Unavailable")]),
        // crate::compat::chat::completions
        op(
            "post",
            "/v1/chat/completions",
            "chatCompletions",
            "openai",
            "Run a template as an OpenAI chat completion",
        )
        .describe(
            "model names a template; the messages become the prompt; the call waits for the job (in \
             the queue as long as it takes, then bounded by the job's timeout and grace, plus 30 s as a \
             safety net). The content is the job's stdout. A client that disconnects before the answer \
             (or, streaming, before the last chunk) cancels its job.",
        )
        .body(shapes::chat_request(s), None)
        .answer("200", shapes::chat_answer(s))
        .answer(
            "400",
            oa("Malformed body, no messages, an unsupported content part, or a prompt larger than \
                max_prompt_bytes (code prompt_too_large; the message names its size and the limit)."),
        )
        .answer("404", oa("model is not a template (code model_not_found)."))
        .answer(
            "413",
            oa("The body is larger than max_body_bytes (code body_too_large)."),
        )
        .answer("503", {
            let mut r = oa(
                "The queue is full or the service is draining (Retry-After, x-should-retry true; a \
                 call waiting for a queued job when the drain begins gets code draining and its job is \
                 cancelled, never run), or the job did not succeed: failed, timed out, cancelled, \
                 superseded, skipped or interrupted (the code says which, job_id names it, \
                 x-should-retry false).",
            );
            r["headers"] = json!({
                "Retry-After": {"description": "Seconds to wait before retrying.",
                                "schema": {"type": "integer"}},
                "x-should-retry": {
                    "description": "Whether a client should retry (read by OpenAI clients): true for a \
                                    full queue, false once the job ran.",
                    "schema": {"type": "string", "enum": ["true", "false"]},
                },
            });
            r
        }),
        // crate::compat::models
        op(
            "get",
            "/v1/models",
            "listModels",
            "openai",
            "Templates as OpenAI models",
        )
        .describe("Every configured template.")
        .answer("200", json_answer("The models.", shapes::model_list(s))),
        // crate::compat::model
        op(
            "get",
            "/v1/models/{model}",
            "getModel",
            "openai",
            "One template as an OpenAI model",
        )
        .answer("200", json_answer("The model.", shapes::model(s)))
        .answer("404", oa("No such template (code model_not_found).")),
    ]
}
