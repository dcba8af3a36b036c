#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! `/openapi.json`: valid OpenAPI 3.1 (checked by openapi-spec-validator),
//! and it documents exactly the routes the router serves; it is built for
//! the running configuration (`baton_serve::openapi`), checked here on a
//! service that uses every setting it depends on.

use crate::serve_common;
use crate::serve_python;

use std::time::Duration;

use serde_json::Value;
use serve_common::Server;
use serve_python::{python, run_python};

const CONFIG: &str = r#"
[templates.echo]
command = ["sh", "-c", "printf '%s' \"$1\"", "job", "{prompt}"]
"#;

/// Every route the router serves: `(method, path)` as the OpenAPI document
/// names them. Keep equal to the router (`server.rs`, `compat.rs`,
/// `dashboard.rs`); the document is generated from `openapi/routes.rs`.
const ROUTES: &[(&str, &str)] = &[
    ("get", "/"),
    ("get", "/health"),
    ("get", "/metrics"),
    ("get", "/openapi.json"),
    ("get", "/v1/jobs"),
    ("post", "/v1/jobs"),
    ("get", "/v1/jobs/{id}"),
    ("delete", "/v1/jobs/{id}"),
    ("post", "/v1/jobs/{id}/cancel"),
    ("get", "/v1/jobs/{id}/log"),
    ("post", "/execute"),
    ("get", "/jobs/{id}"),
    ("delete", "/jobs/{id}"),
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

/// The configuration whose document is checked in for readers
/// ([`REFERENCE_DOCUMENT`]): a token, raw commands, a template with a
/// workspace and one without.
const REFERENCE: &str = r#"
token = "t0ken"
allow_raw_commands = true
[templates.echo]
command = ["echo", "--", "{prompt}"]
[templates.agent]
command = ["sh", "-c", "printf '%s' \"$BATON_PROMPT\""]
[templates.agent.workspace]
repo = "{tmp}/repo"
branch = "main"
"#;

/// The document a service with [`REFERENCE`] serves, checked in.
const REFERENCE_DOCUMENT: &str = "docs/src/reference/openapi.json";

/// The checked-in document is what the service serves (issue 39): the
/// document is generated from the route table and the wire types, so a
/// changed type or route fails here until the file is regenerated, with
/// `BATON_BLESS=1`, which writes the file instead.
#[test]
fn the_checked_in_document_is_what_the_service_serves() {
    let s = Server::start(REFERENCE, &[]);
    let (code, text) = s.get_text("/openapi.json");
    assert_eq!(code, 200);
    let served: Value = serde_json::from_str(&text).unwrap();
    let mut want = serde_json::to_string_pretty(&served).unwrap();
    want.push('\n');
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(REFERENCE_DOCUMENT);
    if std::env::var_os("BATON_BLESS").is_some() {
        std::fs::write(&file, &want).unwrap();
    }
    let have = std::fs::read_to_string(&file).unwrap_or_default();
    assert!(
        have == want,
        "{REFERENCE_DOCUMENT} is not what the service serves: regenerate it with \
         BATON_BLESS=1 cargo nextest run -p baton the_checked_in_document"
    );
    // The job's schema is generated from `baton_api::JobView`: every field
    // a job is shown with is in it.
    let job = &served["components"]["schemas"]["JobView"]["properties"];
    for field in baton_api::contract::job().fields {
        assert!(
            job.get(field).is_some(),
            "{field} is not in the document's JobView"
        );
    }
}

/// A service using every setting the document is narrowed by: a token, raw
/// commands, a default template, a workspace template, a template that
/// refuses a prompt starting with '-'.
const RICH: &str = r#"
token = "t0ken"
allow_raw_commands = true
default_template = "dash"
max_timeout = "10m"
[templates.dash]
command = ["echo", "{prompt}"]
[templates.ws]
command = ["true"]
[templates.ws.workspace]
repo = "{tmp}/repo"
"#;

#[test]
fn the_document_is_built_for_the_running_configuration_and_stays_valid() {
    let mut s = Server::start(RICH, &[]);
    // The document needs no token ...
    let (code, text) = s.get_text("/openapi.json");
    assert_eq!(code, 200);
    s.token = Some("t0ken".into());
    let doc: Value = serde_json::from_str(&text).unwrap();
    // ... and says where the token is needed.
    assert_eq!(doc["security"], serde_json::json!([{"bearer": []}]));
    assert_eq!(
        doc["paths"]["/health"]["get"]["security"],
        serde_json::json!([])
    );
    let submit = &doc["components"]["schemas"]["SubmitRequest"];
    let props = &submit["properties"];
    assert_eq!(props["template"]["enum"], serde_json::json!(["dash", "ws"]));
    assert!(props["command"].is_object(), "{props}");
    assert!(props["workspace"].is_object(), "{props}");
    // Either a template (the default counts) or a command: nothing required.
    assert!(submit.get("required").is_none(), "{submit}");
    let rules = submit["allOf"].as_array().unwrap();
    // Templates 'dash' and 'ws' have rules; the last one is the ordering
    // key's (modes supersede and coalesce only).
    assert_eq!(rules.len(), 3, "only 'dash' and 'ws' have rules: {rules:?}");
    assert_eq!(
        rules[2]["then"]["properties"]["mode"],
        serde_json::json!({"enum": ["supersede", "coalesce"]})
    );
    assert_eq!(
        rules[0]["then"]["not"],
        serde_json::json!({"required": ["workspace"]})
    );
    // 'ws' names no branch: none to start a job's branch over at.
    assert_eq!(
        rules[1]["then"]["properties"]["workspace"],
        serde_json::json!({"properties": {"reset_branch": {"const": false}}})
    );
    let reset = &props["workspace"]["properties"]["reset_branch"];
    assert_eq!(reset["type"], "boolean", "{reset}");
    // What the rules say is what the service does.
    let (code, v) = s.post("/v1/jobs", &serde_json::json!({"prompt": "-x"}));
    assert_eq!(code, 400, "{v}");
    let (code, v) = s.post(
        "/v1/jobs",
        &serde_json::json!({"template": "dash", "prompt": "x", "workspace": {"branch": "b"}}),
    );
    assert_eq!(code, 400, "{v}");
    let (code, v) = s.post(
        "/v1/jobs",
        &serde_json::json!({"template": "ws", "workspace": {"branch": "b", "reset_branch": true}}),
    );
    assert_eq!(code, 400, "{v}");
    let (code, v) = s.post("/v1/jobs", &serde_json::json!({"template": null}));
    assert_eq!(code, 400, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("'template'"),
        "{v}"
    );
    let (code, v) = s.get("/v1/jobs?cursor=-1");
    assert_eq!(code, 400, "{v}");
    let timeout = &props["timeout"]["oneOf"];
    assert_eq!(timeout[1]["maximum"], 600.0);
    let links = &doc["paths"]["/v1/jobs"]["post"]["responses"]["202"]["links"];
    assert_eq!(links["GetJob"]["operationId"], "getJob");
    assert_eq!(links["GetJob"]["parameters"]["id"], "$response.body#/id");

    let python = python(&["openapi-spec-validator"]);
    let file = s.path("openapi.json");
    std::fs::write(&file, &text).unwrap();
    let out = run_python(&python, VALIDATE_OPENAPI, &[file.to_str().unwrap()]);
    assert_eq!(out["valid"], true);

    // The documented branch pattern and the service agree (a taken branch
    // queues a job of 'ws', which fails at once: its repo does not exist).
    let pattern = props["workspace"]["properties"]["branch"]["pattern"]
        .as_str()
        .unwrap();
    // And a name that would shadow another namespace (issue 37) is not.
    let shadowing = props["workspace"]["properties"]["branch"]["not"]["pattern"]
        .as_str()
        .unwrap();
    let names = [
        "main",
        "feature/x",
        "a.b",
        "a./b",
        "a/.b",
        "v1.2+3",
        "lock",
        "a/lock",
        "x.locks",
        "-x",
        ".x",
        "/x",
        "x/",
        "x.",
        "a..b",
        "a//b",
        "a.lock",
        "a/.lock",
        "a@{b",
        "a b",
        "é",
        "HEAD",
        "a/HEAD",
        "HEADS",
        "a.lock/b",
        "a/./b",
        "a.lock./b",
        "x.lock.y",
        "origin/main",
        "origin",
        "origin/",
        "refs/heads/main",
        "heads/main",
        "remotes/origin/main",
        "tags/v1",
        "originals/x",
        "x/origin/main",
        "heads",
        "tags",
    ];
    let matched = run_python(
        &python,
        MATCH_PATTERN,
        &[
            pattern,
            shadowing,
            &serde_json::to_string(&names[..]).unwrap(),
        ],
    );
    for (i, name) in names.iter().enumerate() {
        let body = serde_json::json!({"template": "ws", "workspace": {"branch": name}});
        let (code, v) = s.post("/v1/jobs", &body);
        let documented = matched[i].as_bool().unwrap();
        assert_eq!(code == 202, documented, "branch {name:?}: {code} {v}");
        assert!(code == 202 || code == 400, "branch {name:?}: {code} {v}");
    }
}

const MATCH_PATTERN: &str = r#"
import json, re, sys
p = re.compile(sys.argv[1])
shadowing = re.compile(sys.argv[2])
print(json.dumps([bool(p.fullmatch(n)) and not shadowing.search(n) for n in json.loads(sys.argv[3])]))
"#;
