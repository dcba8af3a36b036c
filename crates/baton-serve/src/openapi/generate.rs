//! The OpenAPI document of every route, generated: the operations from the
//! route table ([`super::routes`]), the schemas of the bodies from their
//! Rust types (the `schemars::JsonSchema` derives that also write
//! `schemas/`), so that a job's fields are written once, on
//! `baton_api::JobView`.
//!
//! Why a generator of our own over schemars rather than aide or utoipa:
//! utoipa has its own derive (`ToSchema`), a second description of every
//! wire type beside the schemars one `schemas/` is made from, which is the
//! duplication this replaces. aide builds on schemars, but its releases for
//! schemars 1 (the workspace's) are alphas (0.16.0-alpha), and it documents
//! a route through its handler's extractor and response types: ours read
//! bodies through [`crate::api::JsonBody`] and raw `Bytes`, answer with
//! `Response` and `json!` values (the compatibility and OpenAI shapes),
//! stream logs and server-sent events, and answer 401/403/415 from
//! middleware, so nearly every operation would need its answers stated by
//! hand anyway. What the document needs from the types is their schemas,
//! which schemars gives directly.

use serde_json::{json, Map, Value};

use super::routes::{self, Access, Operation};
use super::schemas::{response, Schemas};

/// The document of every route, for a service with a token and nothing
/// known about its templates ([`super::document`] narrows it to a
/// configuration).
///
/// # Errors
///
/// Two schemas under one name (a mistake the tests catch).
pub fn document() -> Result<Value, String> {
    let mut schemas = Schemas::new();
    let operations = routes::operations(&mut schemas);
    let error = schemas.written::<baton_api::ErrorBody>();
    let mode = schemas.read::<baton_api::GroupMode>();
    let mut paths = Map::new();
    for op in operations {
        let (path, method, operation) = op.into_json();
        let item = paths
            .entry(path.clone())
            .or_insert_with(|| path_item(&path));
        if let Some(item) = item.as_object_mut() {
            item.insert(method.to_string(), operation);
        }
    }
    let components = json!({
        "securitySchemes": {"bearer": {
            "type": "http",
            "scheme": "bearer",
            "description": "The configured token (or BATON_SERVE_TOKEN), on every route but /, /health and \
                            /openapi.json. A service without a token serves a document without this scheme \
                            and without any security requirement.",
        }},
        "schemas": name_the_modes(schemas.into_components()?, mode),
        "responses": responses(&error),
    });
    Ok(json!({
        "openapi": "3.1.0",
        "info": {
            "title": "baton serve",
            "version": env!("CARGO_PKG_VERSION"),
            "summary": "The baton job service: agent jobs over HTTP, each run through baton's groups, \
                        workspaces and timeouts.",
            "license": {"name": "MIT OR Apache-2.0", "identifier": "MIT OR Apache-2.0"},
            "description": "This document describes the running service: its templates, limits and \
                            authentication as configured. Every request passes three checks first: its \
                            Host names the service (its listen address, localhost, 127.0.0.1 or [::1] on \
                            its port, or an allowed_hosts entry), a browser Origin is the service's own or \
                            in allowed_origins (else 403), and a POST body is declared application/json \
                            (else 415). Every error has the body {\"error\": {\"code\", \"message\"}}.",
        },
        "servers": [{"url": "http://127.0.0.1:7420"}],
        "security": [{"bearer": []}],
        "tags": [
            {"name": "jobs"},
            {"name": "service"},
            {"name": "dashboard"},
            {"name": "compatibility", "description": "The agent service this one replaces."},
            {"name": "openai", "description": "OpenAI-shaped routes: a model is a template."},
        ],
        "paths": paths,
        "components": components,
    }))
}

/// `mode` of a submission is text in Rust (so that the service can name the
/// accepted modes when it refuses another); the document names them, as
/// [`baton_api::GroupMode`]'s schema.
fn name_the_modes(mut schemas: Map<String, Value>, mode: Value) -> Map<String, Value> {
    if let Some(field) = schemas
        .get_mut("SubmitRequest")
        .and_then(|s| s.pointer_mut("/properties/mode"))
        .and_then(Value::as_object_mut)
    {
        field.remove("type");
        if let Some(r) = mode.get("$ref") {
            field.insert("$ref".into(), r.clone());
        }
    }
    schemas
}

/// A path's item: its path parameters.
fn path_item(path: &str) -> Value {
    let params: Vec<Value> = path
        .split('/')
        .filter_map(|seg| seg.strip_prefix('{')?.strip_suffix('}'))
        .map(|name| {
            let description = match name {
                "model" => "A template's name.",
                _ => "The job's id.",
            };
            json!({"name": name, "in": "path", "required": true,
                   "description": description, "schema": {"type": "string"}})
        })
        .collect();
    if params.is_empty() {
        json!({})
    } else {
        json!({"parameters": params})
    }
}

impl Operation {
    /// `(path, method, operation)`, with what every operation of its kind
    /// answers: 401 behind the token (none needed: `security: []`), 403
    /// from the Host and Origin checks, 415 for a body that is not JSON.
    fn into_json(self) -> (String, &'static str, Value) {
        let mut responses = Map::new();
        for (code, r) in self.responses {
            responses.insert(code.to_string(), r);
        }
        let mut add = |code: &str, name: &str| {
            responses
                .entry(code.to_string())
                .or_insert_with(|| response(name));
        };
        if self.access == Access::Token {
            add("401", "Unauthorized");
        }
        add("403", "Forbidden");
        if self.body.is_some() {
            add("415", "UnsupportedMediaType");
        }
        let mut op = json!({
            "operationId": self.id,
            "summary": self.summary,
            "tags": [self.tag],
            "responses": responses,
        });
        if let Some(d) = self.description {
            op["description"] = json!(d);
        }
        if self.access == Access::Open {
            op["security"] = json!([]);
        }
        if !self.params.is_empty() {
            op["parameters"] = Value::Array(self.params);
        }
        if let Some(body) = self.body {
            op["requestBody"] = body;
        }
        (self.path.to_string(), self.method, op)
    }
}

/// The shared responses: the errors many routes answer alike.
fn responses(error: &Value) -> Value {
    let e = |description: &str| json!({"description": description, "content": {"application/json": {"schema": error}}});
    let retry = json!({"Retry-After": {"description": "Seconds to wait before retrying.",
                                       "schema": {"type": "integer"}}});
    let mut unauthorized = e(
        "A token is configured and the request did not send it (Authorization: Bearer <token>).",
    );
    unauthorized["headers"] = json!({"WWW-Authenticate": {"schema": {"type": "string"}}});
    let mut full = e("The queue is full (running + queued reach max_queue_depth).");
    full["headers"] = retry.clone();
    let mut unavailable =
        e("The service is draining (shutting down), or its store is unavailable.");
    unavailable["headers"] = retry;
    json!({
        "BadRequest": e(
            "Malformed JSON, an unknown or invalid field (the message names it: a field of the wrong \
             type too), a prompt starting with '-' where the template's command could read it as an \
             option, a timeout out of range, a prompt larger than max_prompt_bytes (code \
             prompt_too_large; the message names the field, its size and the limit)."),
        "Unauthorized": unauthorized,
        "NotFound": e("No such job (unknown, or evicted after job_ttl)."),
        "TooLarge": e("The body is larger than max_body_bytes (code body_too_large)."),
        "Full": full,
        "Unavailable": unavailable,
        "Forbidden": e(
            "The Host header does not name the service (code forbidden_host: use its listen address \
             or localhost on its port, or a configured allowed_hosts entry), or the request carries a \
             browser Origin other than the service's own and not in allowed_origins (code \
             forbidden_origin). Checked on every route, before the token."),
        "UnsupportedMediaType": e(
            "A POST body not declared as application/json (Content-Type; parameters such as charset \
             allowed): the types a web page can send cross-site without a preflight are refused."),
        "MethodNotAllowed": e("The route exists but does not take this method."),
        "UriTooLong": e("The request target (path and query) is longer than 8 KiB."),
    })
}
