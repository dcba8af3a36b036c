#![cfg(windows)]
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! Windows (under wine on Linux CI): the real `baton.exe` (issue 25's "done
//! when"). Commands are this test binary itself, running the ignored test
//! `windows::helper` in the role its extra argument `role:...` names (a
//! test filter that matches no test), or `cmd.exe`;
//! never `sh`. The helper's test harness prints `running 1 test` on its
//! stdout before the role runs: a filter's output carries that line, which
//! the roles read past.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use baton_contract::exit;
use baton_proc::ProcessId;

/// `baton.exe --dir DIR ARGS` in this test's environment (wine needs its
/// own variables: the environment is kept).
fn baton(dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_baton"));
    c.arg("--dir").arg(dir).args(args).stdin(Stdio::null());
    c
}

/// Runs `cmd` to its end, its output captured: fails the test after 120 s
/// (a child that kept the pipes open would otherwise hang it).
fn output(mut cmd: Command) -> Output {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(cmd.output());
    });
    rx.recv_timeout(Duration::from_secs(120))
        .expect("the command (or a process keeping its pipes) did not end in 120 s")
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// This binary as a command in `role` (words separated by `|`).
fn helper_command(role: &str) -> Vec<String> {
    vec![
        std::env::current_exe().unwrap().display().to_string(),
        "--ignored".into(),
        "--exact".into(),
        "windows::helper".into(),
        "--quiet".into(),
        "--nocapture".into(),
        format!("role:{role}"),
    ]
}

/// What the helper's harness prints before the role's own output.
const HARNESS_PREFIX: &str = "\nrunning 1 test\n";

/// The roles: `exclusive|FILE|LOG` opens FILE unshared (exit 99 if another
/// process has it open), logs `begin PID` and `end PID` 300 ms apart;
/// `pidfile|PATH` writes its pid to PATH and sleeps a minute;
/// `count|PAD` is a filter: reads `n=K|...` from stdin (after the harness's
/// line; nothing: K = 0) and prints `n=K+1|` and PAD bytes of `x`.
#[test]
#[ignore = "a helper: run as a command by the tests of this file"]
fn helper() {
    let Some(role) = std::env::args().find_map(|a| a.strip_prefix("role:").map(str::to_owned))
    else {
        return;
    };
    let words: Vec<&str> = role.split('|').collect();
    match words[..] {
        ["exclusive", file, log] => {
            use std::os::windows::fs::OpenOptionsExt;
            let opened = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .share_mode(0)
                .open(file);
            if opened.is_err() {
                std::process::exit(99);
            }
            let line = |what: &str| {
                let mut f = std::fs::OpenOptions::new()
                    .append(true)
                    .create(true)
                    .open(log)
                    .unwrap();
                writeln!(f, "{what} {}", std::process::id()).unwrap();
            };
            line("begin");
            std::thread::sleep(Duration::from_millis(300));
            line("end");
            std::process::exit(0);
        }
        ["pidfile", path] => {
            let tmp = format!("{path}.tmp");
            std::fs::write(&tmp, std::process::id().to_string()).unwrap();
            std::fs::rename(&tmp, path).unwrap();
            std::thread::sleep(Duration::from_secs(60));
            std::process::exit(0);
        }
        ["count", pad] => {
            let mut input = String::new();
            std::io::stdin().read_to_string(&mut input).unwrap();
            let n: u64 = input
                .split("n=")
                .nth(1)
                .and_then(|rest| rest.split('|').next())
                .map_or(0, |k| k.parse().unwrap());
            let pad = "x".repeat(pad.parse().unwrap());
            let mut out = std::io::stdout().lock();
            write!(out, "n={}|{pad}\n", n + 1).unwrap();
            out.flush().unwrap();
            std::process::exit(0);
        }
        _ => panic!("unknown role {role}"),
    }
}

/// A temp dir whose path is a drive path (`C:\...`) with backslashes and,
/// below it, a directory with spaces for the baton dir.
struct Place {
    tmp: tempfile::TempDir,
    dir: PathBuf,
}

impl Place {
    fn new() -> Place {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("dir with spaces").join("baton");
        let shown = dir.display().to_string();
        let b = shown.as_bytes();
        assert!(
            b.len() > 3 && b[0].is_ascii_alphabetic() && &b[1..3] == b":\\",
            "not a drive path: {shown}"
        );
        Place { tmp, dir }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }
}

#[test]
fn two_runs_on_one_lock_exclude_each_other() {
    let place = Place::new();
    let (file, log) = (place.path("exclusive"), place.path("log"));
    let role = format!("exclusive|{}|{}", file.display(), log.display());
    let command = helper_command(&role);
    let start = |_| {
        let mut args = vec!["run", "--lock", "L", "--"];
        args.extend(command.iter().map(String::as_str));
        baton(&place.dir, &args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let children: Vec<Child> = (0..2).map(start).collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
    // Each held the file alone (no 99), and their work did not interleave.
    let lines: Vec<String> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| l.split(' ').next().unwrap().to_string())
        .collect();
    assert_eq!(lines, ["begin", "end", "begin", "end"], "{lines:?}");
}

#[test]
fn lock_acquire_holds_until_release_and_no_wait_exits_75_meanwhile() {
    let place = Place::new();
    // BATON_DIR instead of --dir: a drive path with spaces, as a variable.
    let acquire = |extra: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_baton"));
        c.env("BATON_DIR", &place.dir)
            .args(["lock", "acquire", "L"])
            .args(extra)
            .stdin(Stdio::null());
        output(c)
    };
    // Its output is read to its end: the holder left running keeps no pipe
    // of ours open.
    let held = acquire(&[]);
    assert_eq!(held.status.code(), Some(0), "{}", text(&held.stderr));
    let token = text(&held.stdout);
    assert!(token.trim().parse::<u64>().is_ok(), "{token:?}");

    let busy = acquire(&["--no-wait"]);
    assert_eq!(
        busy.status.code(),
        Some(exit::NOT_ACQUIRED),
        "{}",
        text(&busy.stderr)
    );

    let release = output(baton(&place.dir, &["lock", "release", "L"]));
    assert_eq!(release.status.code(), Some(0), "{}", text(&release.stderr));

    let again = acquire(&["--no-wait"]);
    assert_eq!(again.status.code(), Some(0), "{}", text(&again.stderr));
    let release = output(baton(&place.dir, &["lock", "release", "L"]));
    assert_eq!(release.status.code(), Some(0), "{}", text(&release.stderr));
    let status = output(baton(&place.dir, &["lock", "status", "L", "--json"]));
    let v: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(v["held"], false, "{v}");
}

#[test]
fn a_killed_supervisors_command_does_not_outlive_it() {
    let place = Place::new();
    let pidfile = place.path("pid");
    let command = helper_command(&format!("pidfile|{}", pidfile.display()));
    let mut args = vec!["run", "--lock", "L", "--"];
    args.extend(command.iter().map(String::as_str));
    let mut supervisor = baton(&place.dir, &args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let pid: i32 = loop {
        if let Ok(s) = std::fs::read_to_string(&pidfile) {
            break s.trim().parse().unwrap();
        }
        assert!(Instant::now() < deadline, "the command never started");
        std::thread::sleep(Duration::from_millis(20));
    };
    let command = ProcessId::of(pid).expect("the command runs");
    supervisor.kill().unwrap(); // TerminateProcess
    supervisor.wait().unwrap();
    assert!(
        command.wait_exited(Some(Duration::from_secs(30))).unwrap(),
        "the command (pid {pid}) outlived its killed supervisor"
    );
    // And the lock is free at once (the kernel released it).
    let free = output(baton(
        &place.dir,
        &[
            "run",
            "--lock",
            "L",
            "--no-wait",
            "--",
            "cmd",
            "/c",
            "exit 0",
        ],
    ));
    assert_eq!(free.status.code(), Some(0), "{}", text(&free.stderr));
}

#[test]
fn state_edits_are_atomic_and_concurrent_ones_lose_no_update() {
    let place = Place::new();
    let file = place.path("counter.txt");
    const PAD: usize = 64 * 1024; // several writes' worth: a torn file would show
    let command = helper_command(&format!("count|{PAD}"));
    // A reader in a loop: every read is a whole file, old or new.
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (file, stop) = (file.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut whole = 0u32;
            while !stop.load(Ordering::SeqCst) {
                // A read may fail while the file is being replaced (wine
                // refuses an open during a rename): only content counts.
                let Ok(content) = std::fs::read_to_string(&file) else {
                    continue;
                };
                let body = content
                    .strip_prefix(HARNESS_PREFIX)
                    .unwrap_or_else(|| panic!("torn: {:?}", &content[..content.len().min(80)]));
                let (n, pad) = body
                    .strip_prefix("n=")
                    .and_then(|b| b.split_once('|'))
                    .unwrap_or_else(|| panic!("torn: {:?}", &body[..body.len().min(80)]));
                assert!(n.parse::<u64>().is_ok(), "torn count {n:?}");
                assert_eq!(pad.len(), PAD + 1, "torn: a pad of {} bytes", pad.len());
                assert!(pad.ends_with('\n'), "torn: no final newline");
                whole += 1;
                // Wine cannot replace a file a reader holds open (Windows'
                // NTFS can): the writer retries for about 1 s, then fails
                // unchanged (baton-fs, "open readers of the target"). A
                // reader that never lets go would starve it.
                std::thread::sleep(Duration::from_millis(50));
            }
            whole
        })
    };
    const WRITERS: usize = 4;
    const EDITS: usize = 5;
    let file_arg = file.display().to_string();
    let writers: Vec<_> = (0..WRITERS)
        .map(|_| {
            let (dir, file_arg, command) = (place.dir.clone(), file_arg.clone(), command.clone());
            std::thread::spawn(move || {
                for _ in 0..EDITS {
                    let mut args = vec!["state", "edit", file_arg.as_str(), "--"];
                    args.extend(command.iter().map(String::as_str));
                    let out = output(baton(&dir, &args));
                    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::SeqCst);
    let reads = reader.join().unwrap();
    assert!(reads > 0, "the reader never read the file");
    let content = std::fs::read_to_string(&file).unwrap();
    let n = content
        .strip_prefix(HARNESS_PREFIX)
        .and_then(|b| b.strip_prefix("n="))
        .and_then(|b| b.split('|').next())
        .unwrap();
    assert_eq!(n, (WRITERS * EDITS).to_string(), "updates were lost");
}

#[test]
fn crlf_json_state_files_are_edited_whole_and_never_corrupted() {
    let place = Place::new();
    let file = place.path("state.json");
    let before = "{\r\n  \"n\": 1,\r\n  \"name\": \"a\"\r\n}\r\n";
    std::fs::write(&file, before).unwrap();
    let file_arg = file.display().to_string();

    // `get` reads it as JSON (its version is what --if-version compares).
    let got = output(baton(&place.dir, &["state", "get", &file_arg, "--json"]));
    assert_eq!(got.status.code(), Some(0), "{}", text(&got.stderr));
    let v: serde_json::Value = serde_json::from_slice(&got.stdout).unwrap();
    let version = v["version"].as_str().unwrap().to_string();

    // A filter whose output is CRLF JSON: taken, byte for byte.
    let next = place.path("next.json");
    let after = "{\r\n  \"n\": 2,\r\n  \"name\": \"b\"\r\n}\r\n";
    std::fs::write(&next, after).unwrap();
    let next_arg = next.display().to_string();
    let edit = output(baton(
        &place.dir,
        &[
            "state",
            "edit",
            &file_arg,
            "--if-version",
            &version,
            "--",
            "cmd",
            "/c",
            "type",
            &next_arg,
        ],
    ));
    assert_eq!(edit.status.code(), Some(0), "{}", text(&edit.stderr));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), after);

    // The old version no longer matches: 75, unchanged.
    let stale = output(baton(
        &place.dir,
        &[
            "state",
            "edit",
            &file_arg,
            "--if-version",
            &version,
            "--",
            "cmd",
            "/c",
            "type",
            &next_arg,
        ],
    ));
    assert_eq!(stale.status.code(), Some(exit::NOT_ACQUIRED));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), after);

    // Output that is not one JSON value (CRLF or not): refused, unchanged.
    let bad = place.path("bad.json");
    std::fs::write(&bad, "{\r\n  \"n\": \r\n").unwrap();
    let bad_arg = bad.display().to_string();
    let refused = output(baton(
        &place.dir,
        &[
            "state", "edit", &file_arg, "--", "cmd", "/c", "type", &bad_arg,
        ],
    ));
    assert_eq!(
        refused.status.code(),
        Some(exit::BATON_FAILED),
        "{}",
        text(&refused.stderr)
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), after);
}

#[test]
fn completions_for_powershell_name_the_subcommands() {
    let place = Place::new();
    let out = output(baton(&place.dir, &["completions", "powershell"]));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let script = text(&out.stdout);
    assert!(script.contains("Register-ArgumentCompleter"), "{script}");
    for sub in ["run", "lock", "state", "acquire", "release"] {
        assert!(script.contains(&format!("'{sub}'")), "no {sub}: {script}");
    }
}
