//! The schemas of answers the service builds as JSON values rather than
//! from a type: `/health` and the dashboard's overview, and the shapes of
//! the services it is compatible with (the older agent service's, OpenAI's),
//! whose constants and limits no Rust type states. Each is stated once,
//! here; the jobs inside them are `baton_api::JobView`'s schema.

use serde_json::{json, Value};

use super::schemas::{json_answer, Schemas};
use crate::model::NodeInfo;

/// `/health`: `crate::api::health` and `crate::api::health_body`.
pub fn health(s: &mut Schemas) -> Value {
    let node = s.written::<NodeInfo>();
    s.shape(
        "Health",
        json!({
            "type": "object",
            "required": ["status", "busy", "active", "queued", "capacity", "node_capacity", "node"],
            "properties": {
                "status": {"type": "string", "enum": ["ok", "draining", "degraded"]},
                "busy": {"type": "boolean", "description": "active >= capacity"},
                "active": {"type": "integer"},
                "queued": {"type": ["integer", "null"]},
                "capacity": {"type": "integer", "description":
                    "Jobs that may run at once: max_concurrency, across every node with a PostgreSQL \
                     store; on SQLite min(max_concurrency, node_max_concurrency)."},
                "node_capacity": {"type": "integer", "description":
                    "Jobs that may run at once on this node (node_max_concurrency, else max_concurrency)."},
                "node": {"type": "string", "description":
                    "This node's id (the node of the jobs it runs); \"local\" with SQLite."},
                "nodes": {"type": "array", "items": node, "description":
                    "Only with a PostgreSQL store: the nodes sharing it (live ones, and those that \
                     heartbeat in the last day or still have jobs marked running), by id."},
                "error": {"type": "string"},
            },
        }),
    )
}

/// `/v1/overview` (`crate::dashboard::overview`).
pub fn overview(s: &mut Schemas, job: &Value) -> Value {
    let node = s.written::<NodeInfo>();
    let jobs = json!({"type": "array", "items": job});
    let objects = json!({"type": "array", "items": {"type": "object"}});
    json!({
        "type": "object",
        "required": ["health", "running", "queued", "recent", "nodes", "groups", "locks",
                     "workspaces", "errors"],
        "properties": {
            "health": {"type": "object"},
            "running": jobs,
            "queued": jobs,
            "recent": jobs,
            "nodes": {"type": "array", "items": node},
            "groups": objects,
            "locks": objects,
            "workspaces": objects,
            "errors": {"type": "object", "additionalProperties": {"type": "string"},
                       "description": "Section name -> why it could not be read."},
        },
    })
}

/// `POST /execute`'s 202 (`crate::compat::execute`).
pub fn execute_accepted(s: &mut Schemas) -> Value {
    s.shape(
        "ExecuteAccepted",
        json!({
            "type": "object",
            "required": ["job_id", "status"],
            "properties": {"job_id": {"type": "string"}, "status": {"const": "queued"}},
        }),
    )
}

/// `GET /jobs/{id}` (`crate::compat::get_job`), with the older service's
/// statuses (`crate::compat::legacy_status`).
pub fn compat_job(s: &mut Schemas) -> Value {
    let status = s.written::<baton_api::JobStatus>();
    let legacy = s.shape(
        "LegacyJobStatus",
        json!({
            "type": "string",
            "description": "The older service's vocabulary: succeeded is completed, timed_out is \
                            timeout, every other end (cancelled, superseded, skipped, interrupted) is error.",
            "enum": ["queued", "running", "completed", "failed", "timeout", "error"],
        }),
    );
    s.shape(
        "CompatJob",
        json!({
            "type": "object",
            "description": "A job as GET /v1/jobs/{id} shows it (its other fields are the same), with \
                            status in the older service's vocabulary and the precise status in baton_status.",
            "required": ["job_id", "id", "status", "baton_status"],
            "properties": {
                "job_id": {"type": "string", "description": "The same as id."},
                "id": {"type": "string"},
                "status": legacy,
                "baton_status": status,
            },
        }),
    )
}

/// An error of the OpenAI-shaped routes (`crate::compat::OpenAiError`).
pub fn openai_error(s: &mut Schemas) -> Value {
    s.shape(
        "OpenAiError",
        json!({
            "type": "object",
            "description": "Errors of the OpenAI-shaped routes: OpenAI's shape, which also carries our \
                            code and message.",
            "required": ["error"],
            "properties": {"error": {
                "type": "object",
                "required": ["message", "type", "code"],
                "properties": {
                    "message": {"type": "string"},
                    "type": {"type": "string", "enum": ["invalid_request_error", "server_error"]},
                    "param": {"type": ["string", "null"], "description": "The request field at fault."},
                    "code": {"type": "string", "examples": [
                        "model_not_found", "queue_full", "job_failed", "job_timed_out", "job_cancelled",
                        "job_superseded", "job_skipped", "job_interrupted", "wait_timeout"]},
                    "job_id": {"type": "string",
                               "description": "The job concerned, when the error is about one."},
                },
            }},
        }),
    )
}

/// Text that no command argument refuses (no NUL byte).
const NO_NUL: &str = "^[^\\u0000]*$";

/// The body of `POST /v1/chat/completions` (`crate::compat::chat::ChatRequest`).
pub fn chat_request(s: &mut Schemas) -> Value {
    let message = s.shape(
        "ChatMessage",
        json!({
            "type": "object",
            "required": ["role"],
            "properties": {
                "role": {"type": "string", "examples": ["system", "user", "assistant"], "pattern": NO_NUL},
                "content": {
                    "oneOf": [
                        {"type": "string", "pattern": NO_NUL},
                        {"type": "null"},
                        {"type": "array", "items": {
                            "type": "object",
                            "required": ["type", "text"],
                            "properties": {
                                "type": {"const": "text"},
                                "text": {"type": "string", "pattern": NO_NUL},
                            },
                        }},
                    ],
                    "description": "A string, or text parts (joined without separator). Other part types \
                                    are refused (400). No text holds a NUL byte (400).",
                },
            },
        }),
    );
    s.shape(
        "ChatCompletionRequest",
        json!({
            "type": "object",
            "required": ["model", "messages"],
            "additionalProperties": true,
            "description": "Other fields OpenAI clients send (temperature, max_tokens, n, user, tools, \
                            ...) are accepted and ignored.",
            "properties": {
                "model": {"type": "string", "description": "A template's name."},
                "messages": {"type": "array", "minItems": 1, "items": message, "description":
                    "The prompt: one message is its text; several become `<role>: <text>` blocks \
                     joined by a blank line."},
                "stream": {"type": ["boolean", "null"], "default": false, "description": "null: false."},
                "stream_options": {"type": ["object", "null"], "properties": {
                    "include_usage": {"type": ["boolean", "null"]},
                }},
            },
        }),
    )
}

/// The 200 of `POST /v1/chat/completions`: a completion, or its stream.
pub fn chat_answer(s: &mut Schemas) -> Value {
    let usage = s.shape(
        "Usage",
        json!({
            "type": "object",
            "required": ["prompt_tokens", "completion_tokens", "total_tokens"],
            "properties": {
                "prompt_tokens": {"const": 0},
                "completion_tokens": {"const": 0},
                "total_tokens": {"const": 0},
            },
        }),
    );
    let completion = s.shape(
        "ChatCompletion",
        json!({
            "type": "object",
            "required": ["id", "object", "created", "model", "choices", "usage"],
            "properties": {
                "id": {"type": "string", "description": "chatcmpl-<job id>"},
                "object": {"const": "chat.completion"},
                "created": {"type": "integer",
                            "description": "The job's submission time (seconds since the epoch)."},
                "model": {"type": "string"},
                "choices": {"type": "array", "minItems": 1, "maxItems": 1, "items": {
                    "type": "object",
                    "required": ["index", "message", "finish_reason"],
                    "properties": {
                        "index": {"const": 0},
                        "message": {"type": "object", "required": ["role", "content"], "properties": {
                            "role": {"const": "assistant"},
                            "content": {"type": "string", "description": "The job's stdout."},
                        }},
                        "logprobs": {"type": "null"},
                        "finish_reason": {"const": "stop"},
                    },
                }},
                "usage": usage,
                "job_id": {"type": "string"},
            },
        }),
    );
    let chunk = s.shape(
        "ChatCompletionChunk",
        json!({
            "type": "object",
            "required": ["id", "object", "created", "model", "choices"],
            "description": "One server-sent event's data. The stream is: a chunk with delta.role, chunks \
                            with delta.content as stdout is produced, a chunk with finish_reason stop, a \
                            usage chunk (empty choices) when stream_options.include_usage, then `data: \
                            [DONE]`. A job that ends badly ends the stream with `data: {\"error\": ...}` \
                            (OpenAiError) instead.",
            "properties": {
                "id": {"type": "string"},
                "object": {"const": "chat.completion.chunk"},
                "created": {"type": "integer"},
                "model": {"type": "string"},
                "choices": {"type": "array", "maxItems": 1, "items": {
                    "type": "object",
                    "required": ["index", "delta", "finish_reason"],
                    "properties": {
                        "index": {"const": 0},
                        "delta": {"type": "object", "properties": {
                            "role": {"const": "assistant"},
                            "content": {"type": "string"},
                        }},
                        "logprobs": {"type": "null"},
                        "finish_reason": {"type": ["string", "null"], "enum": ["stop", null]},
                    },
                }},
                "usage": usage,
            },
        }),
    );
    let mut answer = json_answer(
        "The completion; with stream, server-sent events of ChatCompletionChunk data, then `data: [DONE]`.",
        completion,
    );
    answer["content"]["text/event-stream"] = json!({"schema": {
        "type": "object",
        "required": ["data"],
        "description": "One server-sent event: its data is a ChatCompletionChunk as JSON; the last one is `[DONE]`.",
        "properties": {
            "data": {"anyOf": [
                {"const": "[DONE]", "description": "The end of the stream."},
                {"type": "string", "contentMediaType": "application/json", "contentSchema": chunk},
            ]},
            "event": {"type": "string"},
            "id": {"type": "string"},
            "retry": {"type": "integer"},
        },
    }});
    answer
}

/// A template as an OpenAI model (`crate::compat::model`).
pub fn model(s: &mut Schemas) -> Value {
    s.shape(
        "Model",
        json!({
            "type": "object",
            "required": ["id", "object", "created", "owned_by"],
            "properties": {
                "id": {"type": "string", "description": "A template's name."},
                "object": {"const": "model"},
                "created": {"type": "integer",
                            "description": "When the service started (seconds since the epoch)."},
                "owned_by": {"const": "baton"},
            },
        }),
    )
}

/// Every template as an OpenAI model (`crate::compat::models`).
pub fn model_list(s: &mut Schemas) -> Value {
    let model = model(s);
    s.shape(
        "ModelList",
        json!({
            "type": "object",
            "required": ["object", "data"],
            "properties": {
                "object": {"const": "list"},
                "data": {"type": "array", "items": model},
            },
        }),
    )
}
