#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! The JSON Schemas of `schemas/` against the real binary's output: every
//! `--json` output of `baton_contract::json` (a lock held by a real holder,
//! one whose holder died, groups with runs, a state file, a real git
//! repository with a workspace and a push, doctor, a real `baton serve` for
//! the jobs) and the job API's bodies, validated with Python's `jsonschema`
//! (`tests/schemas_check.py`, in the venv of `scripts/test-venv`), which also
//! checks that each schema describes every field it meets and refuses the
//! output with a required field taken out or a field of the wrong type.
//! That the files are what the Rust types generate is `baton-schema`'s test.

use crate::common;
use crate::serve_common;
use crate::serve_python;

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::{stderr, Env};
use serde_json::{json, Value};

fn schemas_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../schemas")
}

/// Outputs to validate, each against the schema of its name.
#[derive(Default)]
struct Samples(Vec<Value>);

impl Samples {
    /// `out` (a command's output, which must have succeeded) must match `schema`.
    fn output(&mut self, schema: &str, label: &str, out: &Output) -> Value {
        self.output_exit(schema, label, out, 0)
    }

    /// `out` (a command's output, which must have exited `code`) must match `schema`.
    fn output_exit(&mut self, schema: &str, label: &str, out: &Output, code: i32) -> Value {
        assert_eq!(common::code(out), code, "{label}: {}", stderr(out));
        let v: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{label}: not JSON ({e}): {}", common::stdout(out)));
        self.value(schema, label, v.clone());
        v
    }

    /// `v` must match `schema`.
    fn value(&mut self, schema: &str, label: &str, v: Value) {
        self.0
            .push(json!({"schema": schema, "label": label, "instance": v, "valid": true}));
    }

    /// `v`, which baton refuses, must not match `schema`.
    fn refused(&mut self, schema: &str, label: &str, v: Value) {
        self.0
            .push(json!({"schema": schema, "label": label, "instance": v, "valid": false}));
    }

    /// Validates every sample; panics with every mismatch. Returns the
    /// schemas used.
    fn validate(self) -> BTreeSet<String> {
        let used: BTreeSet<String> = self
            .0
            .iter()
            .map(|s| s["schema"].as_str().unwrap().to_string())
            .collect();
        let python = serve_python::python(&["jsonschema==4.26.0"]);
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("samples.json");
        fs::write(&file, serde_json::to_vec(&self.0).unwrap()).unwrap();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/schemas_check.py");
        let out = Command::new(python)
            .arg(script)
            .arg(schemas_dir())
            .arg(&file)
            .output()
            .unwrap();
        assert!(out.status.success(), "schemas_check.py: {}", stderr(&out));
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        let errors = report["errors"].as_array().unwrap();
        assert!(
            errors.is_empty(),
            "real output against schemas/:\n{}",
            errors
                .iter()
                .map(|e| e.as_str().unwrap_or_default())
                .collect::<Vec<_>>()
                .join("\n")
        );
        assert_eq!(report["checked"], self.0.len());
        assert!(report["mutations"].as_u64().unwrap() > 0, "{report}");
        used
    }
}

/// The schemas each test below validates: together, every file of schemas/.
const LOCKS_AND_GROUPS: &[&str] = &[
    "lock-status",
    "lock-list",
    "lock-acquire",
    "lock-release",
    "lock-break",
    "group-status",
    "group-list",
    "event",
];
const FILES_AND_GIT: &[&str] = &[
    "state-get",
    "state-edit",
    "workspace",
    "workspace-list",
    "workspace-gc",
    "git-push",
    "doctor",
];
const JOBS: &[&str] = &[
    "job-submitted",
    "job",
    "job-list",
    "error",
    "submit-request",
];

#[test]
fn every_schema_is_validated_against_real_output() {
    let files: BTreeSet<String> = fs::read_dir(schemas_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter_map(|n| n.strip_suffix(".json").map(str::to_string))
        .collect();
    let tested: BTreeSet<String> = [LOCKS_AND_GROUPS, FILES_AND_GIT, JOBS]
        .concat()
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(files, tested, "schemas/ and the tests of tests/schemas.rs");
}

#[test]
fn lock_and_group_outputs_match_their_schemas() {
    let env = Env::new();
    let mut s = Samples::default();

    // A lock held by a real holder (`baton run`), another by `lock acquire`.
    let ready = env.path("ready");
    let cmd = format!("touch {}; sleep 30", ready.display());
    let mut holder = env.spawn(&["run", "--lock", "held", "--", "sh", "-c", &cmd]);
    common::wait_for_file(&ready);
    let st = s.output(
        "lock-status",
        "held by baton run",
        &env.run(&["lock", "status", "held", "--json"]),
    );
    assert_eq!(st["held"], true, "{st}");
    assert_eq!(st["holders"][0]["kind"], "run", "{st}");
    let acquired = s.output(
        "lock-acquire",
        "lock acquire",
        &env.run(&["lock", "acquire", "mine", "--json"]),
    );

    // A lock whose holder died: its status names it, and the next acquire
    // learns of it.
    let died = env.path("died");
    let script = format!("echo $$ > {}; exec sleep 30", died.display());
    let mut victim = env.spawn(&["run", "--lock", "dead", "--", "sh", "-c", &script]);
    let child_pid: i32 = common::wait_for_line(&died).trim().parse().unwrap();
    victim.kill().unwrap();
    victim.wait().unwrap();
    kill9(child_pid);
    env.wait_for_held("dead", false);
    let st = s.output(
        "lock-status",
        "last holder died",
        &env.run(&["lock", "status", "dead", "--json"]),
    );
    assert_eq!(st["last_holder_died"], true, "{st}");
    assert!(st["last_holder"].is_object(), "{st}");
    let after = s.output(
        "lock-acquire",
        "after a holder died",
        &env.run(&["lock", "acquire", "dead", "--json"]),
    );
    assert_eq!(after["previous_holder_died"], true, "{after}");
    s.output(
        "lock-list",
        "lock list",
        &env.run(&["lock", "list", "--json"]),
    );
    s.output(
        "lock-list",
        "lock status",
        &env.run(&["lock", "status", "--json"]),
    );
    for (name, held) in [("mine", &acquired), ("dead", &after)] {
        let token = held["token"].to_string();
        s.output(
            "lock-release",
            "lock release",
            &env.run(&["lock", "release", name, "--token", &token, "--json"]),
        );
    }
    let broke = s.output(
        "lock-break",
        "lock break",
        &env.run(&["lock", "break", "held", "--json"]),
    );
    assert_eq!(broke["stopped"].as_array().unwrap().len(), 1, "{broke}");
    holder.wait().unwrap();

    // A group with a running run and a waiting one, and one with history.
    assert!(env
        .run(&["run", "--group", "done", "--", "true"])
        .status
        .success());
    let running = env.path("running");
    let release = env.path("release");
    let cmd = format!(
        "touch {}; while [ ! -e {} ]; do sleep 0.02; done",
        running.display(),
        release.display()
    );
    let mut first = env.spawn(&["run", "--group", "busy", "--", "sh", "-c", &cmd]);
    common::wait_for_file(&running);
    let mut second = env.spawn(&["run", "--group", "busy", "--", "true"]);
    common::wait_until(std::time::Duration::from_secs(20), || {
        let out = env.run(&["group", "status", "busy", "--json"]);
        serde_json::from_slice::<Value>(&out.stdout)
            .is_ok_and(|g| g["waiting"].as_array().is_some_and(|w| w.len() == 1))
    });
    let g = s.output(
        "group-status",
        "a group with runs",
        &env.run(&["group", "status", "busy", "--json"]),
    );
    assert_eq!(g["running"].as_array().unwrap().len(), 1, "{g}");
    s.output(
        "group-status",
        "a finished group",
        &env.run(&["group", "status", "done", "--json"]),
    );
    // What a PostgreSQL backend prints for a key without live runs.
    s.value(
        "group-status",
        "null (PostgreSQL, no live run)",
        Value::Null,
    );
    let all = s.output(
        "group-list",
        "group status",
        &env.run(&["group", "status", "--json"]),
    );
    assert_eq!(all.as_array().unwrap().len(), 2, "{all}");
    fs::write(&release, "").unwrap();
    assert!(first.wait().unwrap().success());
    assert!(second.wait().unwrap().success());
    // The event log of those runs (`pushed`: see git_landing.rs).
    let events = env.run(&["events"]);
    assert!(events.status.success(), "{}", stderr(&events));
    for line in common::stdout(&events).lines() {
        s.value(
            "event",
            "an event line",
            serde_json::from_str(line).unwrap(),
        );
    }

    assert_eq!(s.validate(), names(LOCKS_AND_GROUPS));
}

/// SIGKILL to `pid` (a test's own child's child).
fn kill9(pid: i32) {
    let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
}

fn names(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[test]
fn state_git_and_doctor_outputs_match_their_schemas() {
    let env = Env::new();
    let mut s = Samples::default();

    let file = env.path("s.json");
    fs::write(&file, "{\"n\": 1}\n").unwrap();
    let f = file.to_str().unwrap();
    s.output(
        "state-get",
        "state get",
        &env.run(&["state", "get", f, "--json"]),
    );
    let missing = env.path("missing.json");
    let got = s.output(
        "state-get",
        "state get of a missing file",
        &env.run(&["state", "get", missing.to_str().unwrap(), "--json"]),
    );
    assert_eq!(got["content"], Value::Null, "{got}");
    s.output(
        "state-edit",
        "state edit",
        &env.run(&["state", "edit", f, "--json", "--", "echo", "{\"n\":2}"]),
    );
    s.output(
        "state-edit",
        "state edit, unchanged",
        &env.run(&["state", "edit", f, "--json", "--", "cat"]),
    );

    let git = common::git;
    let remote = env.path("remote.git");
    let repo = env.path("repo");
    fs::create_dir(&repo).unwrap();
    let remote_s = remote.to_str().unwrap();
    git(
        env.tmp.path(),
        &["init", "-q", "--bare", "-b", "main", remote_s],
    );
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["commit", "-q", "--allow-empty", "-m", "one"]);
    git(&repo, &["remote", "add", "origin", remote_s]);
    git(&repo, &["push", "-q", "-u", "origin", "main"]);
    let in_repo = |args: &[&str]| {
        env.baton(args)
            .current_dir(&repo)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    s.output(
        "workspace",
        "workspace create",
        &in_repo(&["workspace", "create", "--json"]),
    );
    s.output(
        "workspace",
        "workspace create on a branch",
        &in_repo(&["workspace", "create", "--branch", "topic", "--json"]),
    );
    let listed = s.output(
        "workspace-list",
        "workspace list",
        &in_repo(&["workspace", "list", "--json"]),
    );
    assert_eq!(listed.as_array().unwrap().len(), 2, "{listed}");
    s.output(
        "workspace-gc",
        "workspace gc",
        &in_repo(&["workspace", "gc", "--json"]),
    );
    git(&repo, &["commit", "-q", "--allow-empty", "-m", "two"]);
    s.output("git-push", "git push", &in_repo(&["git", "push", "--json"]));

    s.output("doctor", "doctor", &env.run(&["doctor", "--json"]));

    assert_eq!(s.validate(), names(FILES_AND_GIT));
}

#[test]
fn job_outputs_and_api_bodies_match_their_schemas() {
    let server = serve_common::Server::start(
        "default_template = \"sh\"\nmax_concurrency = 1\n[templates.sh]\ncommand = [\"sh\", \"-c\", \"{prompt}\"]\ncwd = \"{tmp}\"\n",
        &[],
    );
    let url = server.url("");
    let job = |args: &[&str]| {
        server
            .baton(&["job", "--server", &url])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let mut s = Samples::default();

    let queued = s.output(
        "job-submitted",
        "job submit",
        &job(&["submit", "--json", "echo hi"]),
    );
    let id = queued["id"].as_str().unwrap().to_string();
    server.wait_final(&id);
    s.output("job", "job status", &job(&["status", &id, "--json"]));
    let failed = s.output_exit(
        "job",
        "job submit --wait, failed",
        &job(&["submit", "--wait", "--json", "--group", "g", "exit 3"]),
        3,
    );
    assert_eq!(failed["exit_code"], 3, "{failed}");
    s.output(
        "job-list",
        "job list",
        &job(&["list", "--limit", "1", "--json"]),
    );
    let running = server.submit(json!({"prompt": "echo x > started; exec sleep 60"}));
    serve_common::wait_for_file(&server.path("started"));
    s.output("job", "job cancel", &job(&["cancel", &running, "--json"]));

    // The API's own answers and refusals.
    let (code, body) = server.get(&format!("/v1/jobs/{id}"));
    assert_eq!(code, 200);
    s.value("job", "GET /v1/jobs/{id}", body);
    let (code, body) = server.get("/v1/jobs");
    assert_eq!(code, 200);
    s.value("job-list", "GET /v1/jobs", body);
    let request = json!({"prompt": "true", "group": "g", "mode": "queue", "timeout": "90s",
                         "workspace": {}});
    s.value(
        "submit-request",
        "a body the service takes",
        request.clone(),
    );
    let (code, body) = server.post("/v1/jobs", &request);
    assert_eq!(code, 202, "{body}");
    s.value("job-submitted", "POST /v1/jobs", body);
    let (code, body) = server.get("/v1/jobs/nope");
    assert_eq!(code, 404, "{body}");
    s.value("error", "404", body);
    for refused in [
        json!({"template": null}),
        json!({"prompt": "x", "nope": 1}),
        json!({"prompt": 1}),
        json!({"prompt": "x", "timeout": 0}),
    ] {
        let (code, body) = server.post("/v1/jobs", &refused);
        assert_eq!(code, 400, "{refused}: {body}");
        s.value("error", "400", body);
        s.refused("submit-request", "a body the service refuses", refused);
    }

    assert_eq!(s.validate(), names(JOBS));
}
