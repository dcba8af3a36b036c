#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! `/openapi.json`: valid OpenAPI 3.1 (checked by openapi-spec-validator),
//! and it documents exactly the routes the router serves.

mod serve_common;
mod serve_python;

use std::time::Duration;

use serde_json::Value;
use serve_common::Server;
use serve_python::{python, run_python};

const CONFIG: &str = r#"
[templates.echo]
command = ["sh", "-c", "printf '%s' \"$1\"", "job", "{prompt}"]
"#;

/// Every route the router serves: `(method, path)` as the OpenAPI document
/// names them. Keep equal to `server.rs`, `compat.rs` and `dashboard.rs`.
const ROUTES: &[(&str, &str)] = &[
    ("get", "/"),
    ("get", "/health"),
    ("get", "/metrics"),
    ("get", "/openapi.json"),
    ("get", "/v1/jobs"),
    ("post", "/v1/jobs"),
    ("get", "/v1/jobs/{id}"),
    ("delete", "/v1/jobs/{id}"),
    ("get", "/v1/jobs/{id}/log"),
    ("post", "/execute"),
    ("get", "/jobs/{id}"),
    ("post", "/v1/chat/completions"),
    ("get", "/v1/models"),
    ("get", "/v1/models/{model}"),
    ("get", "/v1/overview"),
];

const VALIDATE_OPENAPI: &str = r#"
import json, sys
from openapi_spec_validator import validate
with open(sys.argv[1]) as f:
    validate(json.load(f))
print(json.dumps({"valid": True}))
"#;

#[test]
fn the_openapi_document_is_valid_and_documents_every_route() {
    let s = Server::start(CONFIG, &[]);
    let (code, text) = s.get_text("/openapi.json");
    assert_eq!(code, 200);
    let doc: Value = serde_json::from_str(&text).expect("/openapi.json is JSON");
    assert!(
        doc["openapi"].as_str().unwrap().starts_with("3.1"),
        "{}",
        doc["openapi"]
    );
    let paths = doc["paths"].as_object().unwrap();
    let mut documented: Vec<(String, String)> = Vec::new();
    for (path, item) in paths {
        for method in item.as_object().unwrap().keys() {
            if ["get", "post", "put", "delete", "patch"].contains(&method.as_str()) {
                documented.push((method.clone(), path.clone()));
            }
        }
    }
    let mut listed: Vec<(String, String)> = ROUTES
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    documented.sort();
    listed.sort();
    assert_eq!(documented, listed, "the document and the route list differ");

    // Every listed route is served (not the router's fallback, not 405).
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into();
    for (method, path) in ROUTES {
        let url = s.url(&path.replace("{id}", "nosuchjob").replace("{model}", "echo"));
        let req = ureq::http::Request::builder()
            .method(method.to_uppercase().as_str())
            .uri(&url)
            .header("Content-Type", "application/json")
            .body(Vec::new())
            .unwrap();
        let mut resp = agent.run(req).unwrap();
        let code = resp.status().as_u16();
        let body = resp.body_mut().read_to_string().unwrap_or_default();
        assert!(
            code != 405 && !body.contains("no such route"),
            "{method} {path}: {code} {body}"
        );
    }
    // ... and the fallback answers what is not.
    let (code, _) = s.get("/v1/nothing-here");
    assert_eq!(code, 404);

    let python = python(&["openapi-spec-validator"]);
    let file = s.path("openapi.json");
    std::fs::write(&file, &text).unwrap();
    let out = run_python(&python, VALIDATE_OPENAPI, &[file.to_str().unwrap()]);
    assert_eq!(out["valid"], true);
}
