#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! The machine contract (`baton_contract`): every `--json` output has exactly
//! the documented fields, and the exit codes are the documented ones. Real
//! binary, real locks, real git repositories.

use crate::common;
use crate::serve_common;

use std::collections::BTreeSet;
use std::fs;

use baton_contract::exit;
use baton_contract::json::{self, Shape};
use common::{code, stderr, stdout, Env};

fn fields(v: &serde_json::Value) -> BTreeSet<String> {
    v.as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .cloned()
        .collect()
}

fn assert_shape(shape: Shape, v: &serde_json::Value) {
    let want: BTreeSet<String> = shape.fields.iter().map(|f| f.to_string()).collect();
    assert_eq!(
        fields(v),
        want,
        "`baton {} --json` drifted from its contract",
        shape.command
    );
}

fn json_of(out: &std::process::Output) -> serde_json::Value {
    assert!(out.status.success(), "{}", stderr(out));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn lock_and_group_json_outputs_have_the_documented_fields() {
    let env = Env::new();
    let held = json_of(&env.run(&["lock", "acquire", "j", "--json"]));
    assert_shape(json::LOCK_ACQUIRE, &held);
    let st = json_of(&env.run(&["lock", "status", "j", "--json"]));
    assert_shape(json::LOCK_STATUS, &st);
    assert_shape(json::HOLDER, &st["holders"][0]);
    let liveness = st["holders"][0]["liveness"].as_str().unwrap();
    assert!(json::LIVENESS.contains(&liveness), "{liveness}");
    let all = json_of(&env.run(&["lock", "list", "--json"]));
    assert_shape(json::LOCK_STATUS, &all[0]);
    let token = held["token"].to_string();
    let rel = json_of(&env.run(&["lock", "release", "j", "--token", &token, "--json"]));
    assert_shape(json::LOCK_RELEASE, &rel);

    let ready = env.path("ready");
    let cmd = format!("touch {}; sleep 30", ready.display());
    let mut holder = env.spawn(&["run", "--lock", "b", "--", "sh", "-c", &cmd]);
    common::wait_for_file(&ready);
    let broke = json_of(&env.run(&["lock", "break", "b", "--json"]));
    assert_shape(json::LOCK_BREAK, &broke);
    holder.wait().unwrap();

    assert!(env
        .run(&["run", "--group", "g", "--", "true"])
        .status
        .success());
    let g = json_of(&env.run(&["group", "status", "g", "--json"]));
    assert_shape(json::GROUP_STATUS, &g);
    let gs = json_of(&env.run(&["group", "status", "--json"]));
    assert_shape(json::GROUP_STATUS, &gs[0]);
}

#[test]
fn state_json_outputs_have_the_documented_fields() {
    let env = Env::new();
    let file = env.path("s.json");
    fs::write(&file, "{}\n").unwrap();
    let f = file.to_str().unwrap();
    let got = json_of(&env.run(&["state", "get", f, "--json"]));
    assert_shape(json::STATE_GET, &got);
    let edited = json_of(&env.run(&["state", "edit", f, "--json", "--", "echo", "{\"a\":1}"]));
    assert_shape(json::STATE_EDIT, &edited);
}

#[test]
fn workspace_and_push_json_outputs_have_the_documented_fields() {
    let env = Env::new();
    let git = common::git;
    let remote = env.path("remote.git");
    let repo = env.path("repo");
    fs::create_dir(&repo).unwrap();
    git(
        env.tmp.path(),
        &[
            "init",
            "-q",
            "--bare",
            "-b",
            "main",
            remote.to_str().unwrap(),
        ],
    );
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["commit", "-q", "--allow-empty", "-m", "one"]);
    git(
        &repo,
        &["remote", "add", "origin", remote.to_str().unwrap()],
    );
    git(&repo, &["push", "-q", "-u", "origin", "main"]);
    let in_repo = |args: &[&str]| {
        env.baton(args)
            .current_dir(&repo)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .unwrap()
    };
    let ws = json_of(&in_repo(&["workspace", "create", "--json"]));
    assert_shape(json::WORKSPACE, &ws);
    let listed = json_of(&in_repo(&["workspace", "list", "--json"]));
    assert_shape(json::WORKSPACE_LISTED, &listed[0]);
    let gc = json_of(&in_repo(&["workspace", "gc", "--json"]));
    assert_shape(json::WORKSPACE_GC, &gc);
    git(&repo, &["commit", "-q", "--allow-empty", "-m", "two"]);
    let pushed = json_of(&in_repo(&["git", "push", "--json"]));
    assert_shape(json::GIT_PUSH, &pushed);
}

#[test]
fn doctor_json_has_the_documented_fields() {
    let env = Env::new();
    let r = json_of(&env.run(&["doctor", "--json"]));
    assert_shape(json::DOCTOR, &r);
    let checks = r["checks"].as_array().unwrap();
    for c in checks {
        assert_shape(json::DOCTOR_CHECK, c);
        assert!(c["detail"].is_object(), "{c}");
    }
    let names: Vec<&str> = checks.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, json::DOCTOR_CHECKS);
    assert!(
        json::DIR_RULES.contains(&r["rule"].as_str().unwrap()),
        "{r}"
    );
    assert_eq!(r["status"], "ok");
}

#[test]
fn exit_codes_are_the_documented_ones() {
    let env = Env::new();
    let run = |args: &[&str]| code(&env.run(args));
    assert_eq!(run(&["run", "--lock", "x", "--", "sh", "-c", "exit 7"]), 7);
    assert_eq!(
        run(&["run", "--lock", "x", "--", "sh", "-c", "kill -9 $$"]),
        exit::SIGNALED_BASE + 9
    );
    assert_eq!(
        run(&["run", "--lock", "x", "--", "/nonexistent/cmd"]),
        exit::NOT_FOUND
    );
    assert_eq!(
        run(&["run", "--lock", "x", "--", "/dev/null"]),
        exit::NOT_EXECUTABLE
    );
    assert_eq!(
        run(&[
            "run",
            "--lock",
            "x",
            "--timeout",
            "100ms",
            "--",
            "sleep",
            "5"
        ]),
        exit::TIMED_OUT
    );
    assert_eq!(
        run(&["run", "--lock", "../x", "--", "true"]),
        exit::BATON_FAILED
    );
    let held = env.run(&["lock", "acquire", "busy"]);
    assert!(held.status.success(), "{}", stderr(&held));
    assert_eq!(
        run(&["run", "--lock", "busy", "--no-wait", "--", "true"]),
        exit::NOT_ACQUIRED
    );
    let token = stdout(&held).trim().to_string();
    assert_eq!(
        run(&["lock", "release", "busy", "--token", &token]),
        exit::SUCCESS
    );
    let file = env.path("s.json");
    fs::write(&file, "{}\n").unwrap();
    let f = file.to_str().unwrap();
    assert_eq!(
        run(&[
            "state",
            "edit",
            f,
            "--if-version",
            "0000000000000000",
            "--",
            "cat"
        ]),
        exit::NOT_ACQUIRED
    );
    assert_eq!(code(&env.run(&["doctor"])), exit::SUCCESS);
    let on_nfs = baton::seams::doctor(Some(&env.dir), None, |_| {
        Ok(baton_lock::Filesystem::from_magic(0x6969))
    });
    assert_eq!(i32::from(on_nfs.code), exit::DOCTOR_WARNINGS);
    let open = env.path("open");
    fs::create_dir(&open).unwrap();
    fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let refused = env
        .baton(&["doctor"])
        .arg("--dir")
        .arg(&open)
        .output()
        .unwrap();
    assert_eq!(code(&refused), exit::BATON_FAILED);
    // Every code in the table is one of those above or documented elsewhere.
    for (c, _) in exit::TABLE {
        assert!((0..=255).contains(c));
    }
}

/// A job service whose default template runs its prompt with `sh -c`.
fn job_service() -> serve_common::Server {
    serve_common::Server::start(
        "default_template = \"sh\"\nmax_concurrency = 1\nmax_queue_depth = 1\n[templates.sh]\ncommand = [\"sh\", \"-c\", \"{prompt}\"]\ncwd = \"{tmp}\"\n",
        &[],
    )
}

fn job_cmd(s: &serve_common::Server, args: &[&str]) -> std::process::Output {
    let url = s.url("");
    s.baton(&["job", "--server", &url])
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn job_json_outputs_have_the_documented_fields() {
    let s = job_service();
    let queued = json_of(&job_cmd(&s, &["submit", "--json", "echo hi"]));
    assert_shape(baton_api::contract::job_submitted(), &queued);
    let id = queued["id"].as_str().unwrap().to_string();
    s.wait_final(&id);
    let st = json_of(&job_cmd(&s, &["status", &id, "--json"]));
    assert_shape(baton_api::contract::job(), &st);
    assert!(json::JOB_STATUSES.contains(&st["status"].as_str().unwrap()));
    let waited = json_of(&job_cmd(&s, &["submit", "--wait", "--json", "true"]));
    assert_shape(baton_api::contract::job(), &waited);
    let list = json_of(&job_cmd(&s, &["list", "--limit", "1", "--json"]));
    assert_shape(baton_api::contract::job_list(), &list);
    assert_shape(baton_api::contract::job_listed(), &list["jobs"][0]);
    assert!(list["next_cursor"].is_string(), "{list}");
    let running = s.submit(serde_json::json!({"prompt": "echo x > started; exec sleep 60"}));
    serve_common::wait_for_file(&s.path("started"));
    let cancelled = json_of(&job_cmd(&s, &["cancel", &running, "--json"]));
    assert_shape(baton_api::contract::job_listed(), &cancelled);
    assert_eq!(cancelled["status"], "cancelled");
}

#[test]
fn job_exit_codes_are_the_documented_ones() {
    let s = job_service();
    let wait = |script: &[&str]| code(&job_cmd(&s, &[&["submit", "--wait"], script].concat()));
    assert_eq!(wait(&["true"]), exit::SUCCESS);
    assert_eq!(wait(&["exit 9"]), 9);
    assert_eq!(wait(&["kill -9 $$"]), exit::SIGNALED_BASE + 9);
    assert_eq!(
        wait(&["--timeout", "100ms", "exec sleep 60"]),
        exit::TIMED_OUT
    );
    // Skipped: a `baton run` on the service's baton dir holds the group.
    let mut holder = s
        .baton(&[
            "run",
            "--group",
            "g",
            "--mode",
            "skip",
            "--",
            "sh",
            "-c",
            "echo x > held; while [ ! -e release ]; do sleep 0.02; done",
        ])
        .spawn()
        .unwrap();
    serve_common::wait_for_file(&s.path("held"));
    assert_eq!(
        wait(&["--group", "g", "--mode", "skip", "true"]),
        exit::NOT_ACQUIRED
    );
    fs::write(s.path("release"), "").unwrap();
    assert!(holder.wait().unwrap().success());
    // Full: one job runs, max_queue_depth 1.
    let id = s.submit(serde_json::json!({"prompt": "echo x > full; exec sleep 60"}));
    serve_common::wait_for_file(&s.path("full"));
    assert_eq!(wait(&["true"]), exit::NOT_ACQUIRED);
    assert_eq!(code(&job_cmd(&s, &["cancel", &id])), exit::SUCCESS);
    assert_eq!(
        code(&job_cmd(&s, &["cancel", &id])),
        exit::BATON_FAILED,
        "already ended"
    );
    assert_eq!(code(&job_cmd(&s, &["status", "nope"])), exit::BATON_FAILED);
    assert_eq!(
        code(&job_cmd(&s, &["submit", "--template", "nope", "x"])),
        exit::BATON_FAILED
    );
    let gone = s.url("").replace(&s.addr, "127.0.0.1:1");
    let unreachable = s
        .baton(&["job", "--server", &gone, "list"])
        .output()
        .unwrap();
    assert_eq!(code(&unreachable), exit::BATON_FAILED);
}
