#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! `examples/go` (lockrun), built with Debian's Go (`golang-go`, installed
//! when missing; the test prints why and returns when it cannot be had) and
//! run against the real binary: it runs a command under a lock, reads
//! `baton lock status --json` into its Go struct, and handles the exit
//! codes (the command's own, 75 busy). GOPATH, GOCACHE and HOME are in a
//! temp dir; nothing is fetched (GOPROXY=off: the example uses the standard
//! library only).

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::{code, stderr, stdout, Env};
use serde_json::Value;

fn example_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/go")
}

/// Go, with every directory it writes in `tmp`.
fn go(tmp: &Path, args: &[&str]) -> Output {
    let out = Command::new("go")
        .args(args)
        .current_dir(example_dir())
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", tmp)
        .env("GOPATH", tmp.join("gopath"))
        .env("GOCACHE", tmp.join("gocache"))
        .env("GOENV", "off")
        .env("GOPROXY", "off")
        .env("GOFLAGS", "-mod=mod")
        .env("GOTOOLCHAIN", "local")
        .env("GOTELEMETRY", "off")
        .env("CGO_ENABLED", "0")
        .output()
        .unwrap();
    assert!(out.status.success(), "go {args:?}: {}", stderr(&out));
    out
}

/// Builds lockrun into `tmp`; `None` (with the reason printed) without Go.
fn build(tmp: &Path) -> Option<PathBuf> {
    if let Err(why) = baton_testkit::try_debian_package("go", "golang-go") {
        eprintln!("skipped: the Go example needs Go: {why}");
        return None;
    }
    let version = go(tmp, &["version"]);
    eprintln!("{}", stdout(&version).trim());
    go(tmp, &["vet", "."]);
    let goroot = stdout(&go(tmp, &["env", "GOROOT"])).trim().to_string();
    let unformatted = Command::new(Path::new(&goroot).join("bin/gofmt"))
        .args(["-l", "."])
        .current_dir(example_dir())
        .output()
        .unwrap();
    assert!(
        unformatted.status.success() && unformatted.stdout.is_empty(),
        "gofmt -l: {}{}",
        stdout(&unformatted),
        stderr(&unformatted)
    );
    let bin = tmp.join("lockrun");
    go(tmp, &["build", "-o", bin.to_str().unwrap(), "."]);
    Some(bin)
}

/// `lockrun -baton BATON -dir DIR ARGS`.
fn lockrun(bin: &Path, env: &Env, args: &[&str]) -> Command {
    let mut c = Command::new(bin);
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", env.tmp.path())
        .current_dir(env.tmp.path())
        .arg("-baton")
        .arg(env!("CARGO_BIN_EXE_baton"))
        .arg("-dir")
        .arg(&env.dir)
        .args(args)
        .stdin(Stdio::null());
    c
}

/// The line of `text` that starts with `prefix`.
fn line<'a>(text: &'a str, prefix: &str) -> &'a str {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line {prefix:?} in:\n{text}"))
}

/// The number after `word ` in `text`.
fn number_after(text: &str, word: &str) -> u64 {
    let at = text.find(&format!("{word} ")).unwrap() + word.len() + 1;
    text[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn the_go_example_runs_a_command_under_a_lock_and_reads_its_status() {
    let go_tmp = tempfile::tempdir().unwrap();
    let Some(bin) = build(go_tmp.path()) else {
        return;
    };
    let env = Env::new();

    // Held while the command runs: lockrun sees its own `baton run` hold
    // the lock (in `lock status --json`), then the command is let go.
    let release = env.path("release");
    let script = format!(
        "while [ ! -e {} ]; do sleep 0.02; done; echo from-the-command",
        release.display()
    );
    let mut child = lockrun(&bin, &env, &["job-lock", "--", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let held = lines.next().unwrap().unwrap();
    assert!(held.starts_with("held: job-lock by pid "), "{held}");
    assert!(held.contains("(run, owner "), "{held}");
    let st = env.status("job-lock");
    assert_eq!(st["holder"]["pid"], number_after(&held, "pid"), "{st}");
    let token = number_after(&held, "token");
    assert_eq!(st["holder"]["token"], token, "{st}");
    std::fs::write(&release, "").unwrap();
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{rest:?}");
    let rest = rest.join("\n");
    assert!(rest.contains("from-the-command"), "{rest}");
    assert_eq!(
        line(&rest, "ended:"),
        "ended: the command succeeded",
        "{rest}"
    );
    assert_eq!(
        line(&rest, "now:"),
        format!("now: job-lock free, last token {token}")
    );

    // The command's own exit code passes through.
    let out = lockrun(&bin, &env, &["job-lock", "--", "sh", "-c", "exit 3"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert_eq!(line(&stdout(&out), "ended:"), "ended: the command exited 3");

    // Busy: another `baton run` holds it; -no-wait and -wait give up with 75
    // and lockrun names the holder from the status.
    let ready = env.path("ready");
    let cmd = format!("touch {}; exec sleep 30", ready.display());
    let mut holder = env.spawn(&["run", "--lock", "job-lock", "--", "sh", "-c", &cmd]);
    common::wait_for_file(&ready);
    for wait in [&["-no-wait"][..], &["-wait", "200ms"]] {
        let out = lockrun(&bin, &env, &[wait, &["job-lock", "--", "true"]].concat())
            .output()
            .unwrap();
        assert_eq!(code(&out), 75, "{wait:?}: {}", stderr(&out));
        let text = stdout(&out);
        let busy = line(&text, "busy:");
        assert_eq!(number_after(busy, "pid"), u64::from(holder.id()), "{text}");
        assert!(busy.contains("(run, owner "), "{text}");
        assert_eq!(
            line(&text, "ended:"),
            "ended: not acquired: the lock is busy (exit 75)"
        );
    }
    let broke = env.run(&["lock", "break", "job-lock"]);
    assert!(broke.status.success(), "{}", stderr(&broke));
    holder.wait().unwrap();
}

#[test]
fn the_go_examples_struct_has_every_field_of_the_lock_status_schema() {
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(example_dir().join("../../schemas/lock-status.json")).unwrap(),
    )
    .unwrap();
    let source = std::fs::read_to_string(example_dir().join("main.go")).unwrap();
    let mut objects = vec![&schema];
    for def in ["HolderInfo", "KernelHolder", "ProcessIdentity"] {
        objects.push(&schema["$defs"][def]);
    }
    for obj in objects {
        let props = obj["properties"].as_object().unwrap();
        assert!(!props.is_empty());
        for field in props.keys() {
            assert!(
                source.contains(&format!("`json:\"{field}\"`")),
                "examples/go/main.go does not read `{field}` of schemas/lock-status.json"
            );
        }
    }
}
