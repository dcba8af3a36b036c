#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
//! `baton mcp` driven by real MCP clients nobody here wrote: the official
//! Python SDK (`mcp` from PyPI, stdio_client + ClientSession; the scripts
//! are tests/mcp_python/*.py) and the MCP Inspector's CLI (npm). The test
//! setup installs them (`scripts/test-venv`, and npm into
//! target/mcp-inspector); a failed install fails the test, it never skips.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::common::{git, Env};

/// The official Python SDK, pinned.
const MCP_PYTHON: &str = "mcp==2.3.0";
/// The MCP Inspector, pinned (its CLI mode).
const INSPECTOR: &str = "@modelcontextprotocol/inspector@0.21.1";

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
}

/// The tests' venv with the MCP Python SDK.
fn python() -> String {
    let out = Command::new(workspace_root().join("scripts/test-venv"))
        .arg(MCP_PYTHON)
        .output()
        .expect("run scripts/test-venv");
    assert!(
        out.status.success(),
        "scripts/test-venv {MCP_PYTHON} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// A repository with one commit (and a bare origin it tracks) in the test's temp dir.
pub(crate) fn repo(env: &Env) -> PathBuf {
    let origin = env.path("origin.git");
    let repo = env.path("repo");
    std::fs::create_dir_all(&origin).unwrap();
    git(&origin, &["init", "-q", "--bare", "-b", "main"]);
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("README"), "hi\n").unwrap();
    git(&repo, &["add", "README"]);
    git(&repo, &["commit", "-q", "-m", "first"]);
    git(
        &repo,
        &["remote", "add", "origin", origin.to_str().unwrap()],
    );
    git(&repo, &["push", "-q", "-u", "origin", "main"]);
    repo
}

/// Runs tests/mcp_python/`script` with `args`; returns the JSON it printed.
fn script(env: &Env, repo: &Path, script: &str, args: &[&str]) -> Value {
    script_with(env, repo, script, args, &[])
}

/// [`script`], with `vars` added to its environment (which the scripts pass
/// on to every `baton mcp` they start).
pub(crate) fn script_with(
    env: &Env,
    repo: &Path,
    script: &str,
    args: &[&str],
    vars: &[(&str, &str)],
) -> Value {
    let python = python();
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/mcp_python")
        .join(script);
    let out = Command::new(python)
        .arg(&path)
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", env.tmp.path())
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("BATON", env!("CARGO_BIN_EXE_baton"))
        .env("BATON_DIR", &env.dir)
        .env("REPO", repo)
        .envs(vars.iter().copied())
        .current_dir(env.tmp.path())
        .output()
        .expect("run python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{script} failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{script} printed no JSON ({e}): {stdout}"))
}

#[test]
fn tools_are_listed_with_schemas_and_bad_arguments_are_refused() {
    let env = Env::new();
    let repo = repo(&env);
    let seen = script(&env, &repo, "tools.py", &[]);
    let reserve = &seen["schemas"]["reserve"];
    assert_eq!(
        reserve["input"],
        serde_json::json!(["mode", "paths", "reason", "wait_seconds"])
    );
    assert_eq!(reserve["required"], serde_json::json!(["paths"]));
    for field in [
        "granted",
        "token",
        "paths",
        "conflicts",
        "previous_holder_died",
    ] {
        assert!(
            reserve["output"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f == field),
            "reserve's output schema lacks {field}: {seen}"
        );
    }
    let bad = &seen["bad"];
    assert!(
        bad["missing"].as_str().unwrap().contains("wait_seconds"),
        "{bad}"
    );
    assert!(
        bad["outside"].as_str().unwrap().contains("../elsewhere"),
        "{bad}"
    );
    assert!(bad["not_held"].as_str().unwrap().contains("never"), "{bad}");
}

#[test]
fn lock_and_state_tools_are_the_cli_locks_and_state_files() {
    let env = Env::new();
    let repo = repo(&env);
    let seen = script(&env, &repo, "locks_state.py", &[]);
    assert_eq!(seen["cli_busy_code"], 75, "{seen}");
    assert_eq!(seen["cli_free_code"], 0, "{seen}");
    assert!(seen["busy"].as_str().unwrap().contains("build"), "{seen}");
    assert!(
        seen["stale"].as_str().unwrap().contains("tasks.json"),
        "{seen}"
    );
}

#[test]
fn overlapping_reservations_exclude_disjoint_do_not_wait_waiters_get_progress_and_cancel() {
    let env = Env::new();
    let repo = repo(&env);
    let seen = script(&env, &repo, "reserve.py", &[]);
    // Progress at least once a second, from the request to the grant.
    assert!(seen["max_gap_s"].as_f64().unwrap() < 1.0, "{seen}");
    assert!(seen["progress"].as_u64().unwrap() >= 3, "{seen}");
    assert_eq!(seen["conflict"]["holder"]["agent"], "alice", "{seen}");
}

#[test]
fn kill_9_of_a_sessions_server_frees_its_reservations_and_says_the_holder_died() {
    let env = Env::new();
    let repo = repo(&env);
    let seen = script(&env, &repo, "kill.py", &["server"]);
    assert_eq!(seen["out"]["previous_holder_died"], true, "{seen}");
}

#[test]
fn kill_9_of_a_sessions_client_frees_its_reservations_and_says_the_holder_died() {
    let env = Env::new();
    let repo = repo(&env);
    let seen = script(&env, &repo, "kill.py", &["client"]);
    assert_eq!(seen["out"]["previous_holder_died"], true, "{seen}");
}

#[test]
fn eight_sessions_contending_for_one_path_are_served_in_arrival_order_one_at_a_time() {
    let env = Env::new();
    let repo = repo(&env);
    let seen = script(&env, &repo, "fifo.py", &[]);
    assert_eq!(seen["order"], serde_json::json!([0, 1, 2, 3, 4, 5, 6, 7]));
    let spans = seen["intervals"].as_array().unwrap();
    for w in spans.windows(2) {
        assert!(w[0][1].as_f64() <= w[1][0].as_f64(), "overlap: {seen}");
    }
}

#[test]
fn stdin_eof_releases_everything_and_exits_0_and_versions_are_negotiated() {
    let env = Env::new();
    let repo = repo(&env);
    let seen = script(&env, &repo, "eof.py", &[]);
    assert_eq!(seen["exit_code"], 0, "{seen}");
    let n = &seen["negotiated"];
    assert_eq!(n["2025-06-18"], "2025-06-18", "{seen}");
    assert_eq!(n["2025-11-25"], "2025-11-25", "{seen}");
    assert_eq!(n["2024-11-05"], "2024-11-05", "{seen}");
    // An unknown revision: the newest with an initialize handshake.
    assert_eq!(n["1999-01-01"], "2025-11-25", "{seen}");
    assert_eq!(n["2030-01-01"], "2025-11-25", "{seen}");
}

#[test]
fn workspace_create_push_and_remove() {
    let env = Env::new();
    let repo = repo(&env);
    let seen = script(&env, &repo, "git.py", &[]);
    assert_eq!(seen["push"]["attempts"], 1, "{seen}");
}

/// The MCP Inspector's CLI, installed (pinned) under the target dir.
fn inspector() -> PathBuf {
    let prefix = target_dir().join("mcp-inspector");
    let bin = prefix.join("node_modules/.bin/mcp-inspector");
    std::fs::create_dir_all(&prefix).unwrap();
    // Parallel tests install once (flock on a file next to it).
    let lock = target_dir().join("mcp-inspector.lock");
    let script = format!(
        "[ -x '{bin}' ] || npm install --no-audit --no-fund --loglevel=error --prefix '{prefix}' '{INSPECTOR}' >&2",
        bin = bin.display(),
        prefix = prefix.display()
    );
    let out = Command::new("flock")
        .arg(&lock)
        .args(["sh", "-c", &script])
        .output()
        .expect("run flock and npm");
    assert!(
        out.status.success() && bin.exists(),
        "npm install {INSPECTOR} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    bin
}

/// `mcp-inspector --cli baton --dir D mcp --repo R ARGS`: its JSON output.
fn inspect(env: &Env, repo: &Path, args: &[&str]) -> Value {
    let out = Command::new(inspector())
        .arg("--cli")
        .arg(env!("CARGO_BIN_EXE_baton"))
        .arg("--dir")
        .arg(&env.dir)
        .args(["mcp", "--agent", "inspector", "--repo"])
        .arg(repo)
        .args(args)
        .env("HOME", env.tmp.path())
        .output()
        .expect("run the inspector");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "inspector {args:?} failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

#[test]
fn the_mcp_inspector_lists_the_tools_and_calls_one() {
    let env = Env::new();
    let repo = repo(&env);
    let listed = inspect(&env, &repo, &["--method", "tools/list"]);
    let mut names: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "lock",
            "push",
            "release",
            "reservations",
            "reserve",
            "state_append",
            "state_read",
            "state_update",
            "unlock",
            "workspace_create",
            "workspace_remove"
        ]
    );
    for t in listed["tools"].as_array().unwrap() {
        assert_eq!(t["outputSchema"]["type"], "object", "{t}");
    }
    let called = inspect(
        &env,
        &repo,
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "state_update",
            "--tool-arg",
            "file=inspected.json",
            "--tool-arg",
            r#"merge_patch={"by":"inspector"}"#,
        ],
    );
    assert_eq!(
        called["structuredContent"]["content"],
        serde_json::json!({"by": "inspector"}),
        "{called}"
    );
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(repo.join("inspected.json")).unwrap())
            .unwrap();
    assert_eq!(written, serde_json::json!({"by": "inspector"}));
}

#[test]
fn reserve_check_passes_the_sessions_own_client_and_a_break_is_told_to_the_session() {
    let env = Env::new();
    let repo = repo(&env);
    let seen = script(&env, &repo, "broken.py", &[]);
    assert_eq!(seen["log"]["event"], "reservation_broken", "{seen}");
    assert!(
        seen["outside_check"].as_str().unwrap().contains("guarded"),
        "{seen}"
    );
}
