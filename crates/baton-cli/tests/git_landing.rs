#![cfg(unix)] // sh, fifos, git hooks and signals: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! A run's landing push is not superseded (issue 36, item 2): a run of a
//! group in mode supersede whose command pushes with `baton git push`. A
//! supersede waits for a push in flight (a pre-receive hook in the bare
//! origin holds it), a run whose push landed ends with its command's own
//! status, and the `--on-superseded` hook (`BATON_RUN_PUSHED`) and the
//! run's event (`"pushed": true`) say it pushed; a push that does not land
//! is superseded as before, and a push begun after the supersede is not
//! sent. Real groups, real git, real signals (the TERM of a supersede).

use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::{code, stderr, wait_until};
use crate::git::{pusher, GitEnv};

const BATON: &str = env!("CARGO_BIN_EXE_baton");
const KEY: &str = "issue/9";

fn mkfifo(path: &Path) {
    assert!(Command::new("mkfifo").arg(path).status().unwrap().success());
}

/// Writes a line into `fifo` if someone reads it (never blocks: a reader
/// that was killed leaves nobody to write to).
fn release(fifo: &Path) {
    if let Ok(mut f) = fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc_o_nonblock())
        .open(fifo)
    {
        let _ = f.write_all(b"go\n");
    }
}

/// `O_NONBLOCK` (the same value on Linux and macOS).
fn libc_o_nonblock() -> i32 {
    #[cfg(target_os = "linux")]
    return 0o4000;
    #[cfg(not(target_os = "linux"))]
    return 0x0004;
}

/// A pre-receive hook in the remote: it says it runs (`receiving`), waits
/// for `fifo`, then accepts (`exit 0`) or declines (`exit 1`) the push.
fn hold_pushes(g: &GitEnv, fifo: &Path, receiving: &Path, accept: bool) {
    mkfifo(fifo);
    let hook = g.remote.join("hooks/pre-receive");
    fs::write(
        &hook,
        format!(
            "#!/bin/sh\ntouch {}\nread _ < {}\nexit {}\n",
            receiving.display(),
            fifo.display(),
            if accept { 0 } else { 1 }
        ),
    )
    .unwrap();
    fs::set_permissions(&hook, fs::Permissions::from_mode(0o755)).unwrap();
}

/// `baton run --group issue/9 --mode supersede` of `script` in `cwd`,
/// with a hook that writes `$BATON_RUN_PUSHED $BATON_RUN_STARTED` to
/// `hook_out`, and a long grace (the supersede must not need it all).
fn older(g: &GitEnv, cwd: &Path, script: &str, hook_out: &Path) -> Child {
    let hook = format!(
        "echo \"$BATON_RUN_PUSHED $BATON_RUN_STARTED\" > {}",
        hook_out.display()
    );
    g.baton(&[
        "run",
        "--group",
        KEY,
        "--mode",
        "supersede",
        "--grace",
        "60s",
        "--on-superseded",
        &hook,
        "--",
        "sh",
        "-c",
        script,
    ])
    .current_dir(cwd)
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap()
}

/// The newer run that supersedes it.
fn newer(g: &GitEnv) -> Child {
    g.baton(&["run", "--group", KEY, "--mode", "supersede", "--", "true"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The run's landing lock (`<baton dir>/groups/landing`) as `lock status`
/// sees it.
fn landing(g: &GitEnv) -> serde_json::Value {
    let dir = g.env.dir.join("groups/landing");
    let out = Command::new(BATON)
        .arg("--dir")
        .arg(&dir)
        .args(["lock", "status", KEY, "--json"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The supervisor closed the landing for the supersede (holds it).
fn closed_by_supersede(g: &GitEnv) -> bool {
    let st = landing(g);
    st["held"] == true
        && st["holders"][0]["operation"]
            .as_str()
            .is_some_and(|o| o.contains("superseded"))
}

/// The events of the older run (`run_id` from the group's log).
fn events_of(g: &GitEnv, run_id: &str) -> Vec<serde_json::Value> {
    let out = g.run(&["events", "--group", KEY]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["run_id"] == run_id)
        .collect()
}

/// The run id of the first run of the group (the older one).
fn first_run_id(g: &GitEnv) -> String {
    let out = g.run(&["events", "--group", KEY]);
    let line = String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap()
        .to_string();
    let e: serde_json::Value = serde_json::from_str(&line).unwrap();
    e["run_id"].as_str().unwrap().to_string()
}

fn ended(e: &[serde_json::Value]) -> serde_json::Value {
    e.iter()
        .find(|e| e["event"] == "finished" || e["event"] == "superseded")
        .cloned()
        .unwrap_or_else(|| panic!("no end event: {e:?}"))
}

struct Agent {
    g: GitEnv,
    clone: PathBuf,
    hook_out: PathBuf,
}

fn agent() -> Agent {
    let g = GitEnv::new();
    let clone = pusher(&g, "agent");
    let hook_out = g.env.path("hook.out");
    Agent { g, clone, hook_out }
}

/// The push landed, then the supersede came: the command (which waits
/// for `go` after its push) is not stopped, ends by itself with its own
/// status (5), and both the hook and the event say it pushed; a second
/// push it tries after the supersede is not sent (79). Fails before: the
/// supersede stopped the command at once (79, `BATON_RUN_PUSHED` unset).
#[test]
fn a_run_whose_push_landed_ends_with_its_own_status() {
    let Agent { g, clone, hook_out } = agent();
    let (landed, go) = (g.env.path("landed"), g.env.path("go"));
    mkfifo(&go);
    let second = g.env.path("second.code");
    let script = format!(
        "{BATON} git push && touch {landed} && read _ < {go}; \
         git commit -q --allow-empty -m second; {BATON} git push; echo $? > {second}; exit 5",
        landed = landed.display(),
        go = go.display(),
        second = second.display(),
    );
    let old = older(&g, &clone, &script, &hook_out);
    wait_until(Duration::from_secs(60), || landed.exists());
    let mut new = newer(&g);
    wait_until(Duration::from_secs(60), || closed_by_supersede(&g));
    release(&go);
    let out = old.wait_with_output().unwrap();
    assert_eq!(code(&out), 5, "its own status: {}", stderr(&out));
    assert!(new.wait().unwrap().success());
    assert_eq!(fs::read_to_string(&second).unwrap().trim(), "79");
    assert_eq!(fs::read_to_string(&hook_out).unwrap().trim(), "1 1");
    assert_eq!(
        g.git_ok(&g.remote, &["log", "-1", "--format=%s", "main"]),
        "agent",
        "the first push landed, the second was not sent"
    );
    let end = ended(&events_of(&g, &first_run_id(&g)));
    assert_eq!(end["event"], "finished", "{end}");
    assert_eq!(end["code"], 5, "{end}");
    assert_eq!(end["pushed"], true, "{end}");
}

/// The supersede came while the push was in the remote's pre-receive
/// hook: it waits for the push (the supervisor queues for the landing),
/// the push lands, and the run ends with its own status (0), pushed.
/// Fails before: the TERM killed the push mid-way (79, nothing landed).
#[test]
fn a_supersede_waits_for_a_push_in_flight() {
    let Agent { g, clone, hook_out } = agent();
    let (fifo, receiving) = (g.env.path("hook.fifo"), g.env.path("receiving"));
    hold_pushes(&g, &fifo, &receiving, true);
    let old = older(&g, &clone, &format!("{BATON} git push"), &hook_out);
    wait_until(Duration::from_secs(60), || receiving.exists());
    let mut new = newer(&g);
    wait_until(Duration::from_secs(60), || landing(&g)["waiters"] == 1);
    release(&fifo);
    let out = old.wait_with_output().unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(new.wait().unwrap().success());
    assert_eq!(
        g.git_ok(&g.remote, &["log", "-1", "--format=%s", "main"]),
        "agent"
    );
    assert_eq!(fs::read_to_string(&hook_out).unwrap().trim(), "1 1");
    let end = ended(&events_of(&g, &first_run_id(&g)));
    assert_eq!(end["event"], "finished", "{end}");
    assert_eq!(end["code"], 0, "{end}");
    assert_eq!(end["pushed"], true, "{end}");
}

/// The push in flight is declined by the remote: the supersede, which
/// waited for it, stops the command as before (79), and nothing says it
/// pushed.
#[test]
fn a_push_that_does_not_land_is_superseded_as_before() {
    let Agent { g, clone, hook_out } = agent();
    let (fifo, receiving) = (g.env.path("hook.fifo"), g.env.path("receiving"));
    hold_pushes(&g, &fifo, &receiving, false);
    let after = g.env.path("after-push");
    let script = format!(
        "{BATON} git push; touch {}; exec sleep 600",
        after.display()
    );
    let old = older(&g, &clone, &script, &hook_out);
    wait_until(Duration::from_secs(60), || receiving.exists());
    let mut new = newer(&g);
    wait_until(Duration::from_secs(60), || landing(&g)["waiters"] == 1);
    release(&fifo);
    let out = old.wait_with_output().unwrap();
    assert_eq!(code(&out), 79, "{}", stderr(&out));
    assert!(new.wait().unwrap().success());
    assert_eq!(fs::read_to_string(&hook_out).unwrap().trim(), "0 1");
    assert_eq!(
        g.git_ok(&g.remote, &["log", "-1", "--format=%s", "main"]),
        "init"
    );
    let end = ended(&events_of(&g, &first_run_id(&g)));
    assert_eq!(end["event"], "superseded", "{end}");
    assert!(end.get("pushed").is_none(), "{end}");
}
