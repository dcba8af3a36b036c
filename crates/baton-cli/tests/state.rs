#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! `baton state edit|append|get` with the real binary, real filters (jq,
//! python3, sed, awk, sh) and real SIGKILLs.

use crate::common;

use baton_testkit::{Immutable, Rng};

use std::collections::BTreeSet;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::{code, stderr, stdout, Env};

fn have(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `.n += 1` as a filter: jq if installed, else python3.
fn increment_filter() -> Vec<&'static str> {
    if have("jq") {
        vec!["jq", "-c", ".n += 1"]
    } else {
        vec![
            "python3",
            "-c",
            "import json,sys; d=json.load(sys.stdin); d['n']+=1; json.dump(d,sys.stdout)",
        ]
    }
}

/// `.n += 1` with awk: starts in a millisecond, so SIGKILLs land all over
/// baton's own work rather than mostly inside the filter.
const AWK_INCREMENT: &str = r#"match($0, /"n":[0-9]+/) { n = substr($0, RSTART+4, RLENGTH-4) + 1; $0 = substr($0, 1, RSTART-1) "\"n\":" n substr($0, RSTART+RLENGTH) } 1"#;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn edit_args<'a>(file: &'a str, filter: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["state", "edit", file, "--"];
    args.extend_from_slice(filter);
    args
}

fn counter(path: &Path) -> u64 {
    let v: serde_json::Value = serde_json::from_slice(&fs::read(path).unwrap())
        .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
    v["n"].as_u64().unwrap()
}

fn temps_of(dir: &Path, name: &str) -> Vec<PathBuf> {
    let prefix = format!(".{name}.baton-tmp-");
    fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect()
}

fn one_line_125(out: &Output, needle: &str) {
    let err = stderr(out);
    assert_eq!(code(out), 125, "{err}");
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "one line expected: {err}"
    );
    assert!(err.contains(needle), "{err:?} should mention {needle:?}");
}

/// `baton ... ARGS` with `input` on stdin.
fn run_with_stdin(env: &Env, args: &[&str], input: &[u8]) -> Output {
    let mut child = env
        .baton(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn eight_processes_times_100_edits_lose_no_update() {
    let env = Env::new();
    let path = env.path("counter.json");
    fs::write(&path, "{\"n\":0}\n").unwrap();
    let filter = increment_filter();
    thread::scope(|sc| {
        for _ in 0..8 {
            sc.spawn(|| {
                for _ in 0..100 {
                    let out = env.run(&edit_args(s(&path), &filter));
                    assert_eq!(code(&out), 0, "{}", stderr(&out));
                }
            });
        }
    });
    assert_eq!(counter(&path), 800);
    assert!(temps_of(env.tmp.path(), "counter.json").is_empty());
}

#[test]
fn eight_processes_times_100_appends_give_800_whole_lines() {
    let env = Env::new();
    let path = env.path("events.jsonl");
    // Records longer than PIPE_BUF: interleaved writes would show.
    let pad = "x".repeat(5000);
    thread::scope(|sc| {
        for w in 0..8 {
            let (env, path, pad) = (&env, &path, &pad);
            sc.spawn(move || {
                for i in 0..100 {
                    let rec = format!("{{\"w\":{w},\"i\":{i},\"pad\":\"{pad}\"}}");
                    let out = env.run(&["state", "append", s(path), &rec]);
                    assert_eq!(code(&out), 0, "{}", stderr(&out));
                }
            });
        }
    });
    let text = fs::read_to_string(&path).unwrap();
    assert!(text.ends_with('\n'));
    let mut seen = BTreeSet::new();
    for line in text.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("interleaved or torn line: {e}"));
        assert_eq!(v["pad"].as_str().unwrap().len(), 5000);
        seen.insert((v["w"].as_u64().unwrap(), v["i"].as_u64().unwrap()));
    }
    assert_eq!(text.lines().count(), 800);
    assert_eq!(seen.len(), 800, "every record exactly once");
}

/// How long creating, writing and flushing a file of `len` bytes in `dir`
/// takes: about the part of an edit before its rename.
fn write_phase(dir: &Path, len: usize) -> Duration {
    let probe = dir.join("write-phase-probe");
    let start = Instant::now();
    let mut f = fs::File::create(&probe).unwrap();
    f.write_all(&vec![b'x'; len]).unwrap();
    f.sync_all().unwrap();
    let took = start.elapsed();
    fs::remove_file(&probe).unwrap();
    took
}

/// Reads `child`'s stderr until a line contains `marker`; false if it ends first.
fn stderr_until(err: &mut std::io::BufReader<std::process::ChildStderr>, marker: &str) -> bool {
    use std::io::BufRead;
    let mut line = String::new();
    loop {
        line.clear();
        if err.read_line(&mut line).unwrap() == 0 {
            return false;
        }
        if line.contains(marker) {
            return true;
        }
    }
}

#[test]
fn writer_sigkilled_at_random_points_leaves_old_or_new_content() {
    use std::os::unix::process::ExitStatusExt;
    let env = Env::new();
    let path = env.path("state.json");
    let pad = "p".repeat(256 * 1024);
    fs::write(&path, format!("{{\"n\":0,\"pad\":\"{pad}\"}}\n")).unwrap();
    // The filter says "computed" on stderr when it is done: from then on,
    // baton writes the temp file, flushes it and renames it.
    let script = "awk \"$1\" && echo computed >&2";
    let args = edit_args(s(&path), &["sh", "-c", script, "sh", AWK_INCREMENT]);
    let spawn = || {
        let mut child = env
            .baton(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let err = std::io::BufReader::new(child.stderr.take().unwrap());
        (child, err)
    };
    // Calibrate the kill window on one complete edit, from "computed" to exit.
    let (mut child, mut err) = spawn();
    assert!(stderr_until(&mut err, "computed"));
    let start = Instant::now();
    assert!(child.wait().unwrap().success());
    let window = start.elapsed();
    let write = write_phase(env.tmp.path(), pad.len());
    let mut rng = Rng::seeded();
    eprintln!(
        "seed {} (BATON_TEST_SEED), write {write:?}, write to exit {window:?}",
        rng.seed
    );
    let rounds = 100;
    let (mut kept, mut replaced, mut in_flight, mut temps_seen) = (0, 0, 0, 0);
    for round in 0..rounds {
        let old = fs::read(&path).unwrap();
        let old_n = counter(&path);
        let (mut child, mut err) = spawn();
        assert!(stderr_until(&mut err, "computed"), "round {round}");
        // The random kill point is what this test is about, not a wait:
        // every other round around the write, else anywhere from the end of
        // the filter to a little after the exit (flushing the directory is
        // often the longest part).
        let span = if round % 2 == 0 { write * 2 } else { window };
        thread::sleep(span.mul_f64(rng.unit() * 1.2));
        child.kill().unwrap(); // SIGKILL
        if child.wait().unwrap().signal() == Some(libc::SIGKILL) {
            in_flight += 1; // killed after the filter finished, before baton exited
        }
        let now = fs::read(&path).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&now)
            .unwrap_or_else(|e| panic!("round {round}: not valid JSON after SIGKILL: {e}"));
        if now == old {
            kept += 1;
        } else {
            assert_eq!(
                v["n"].as_u64(),
                Some(old_n + 1),
                "round {round}: neither old nor new"
            );
            assert_eq!(v["pad"].as_str(), Some(pad.as_str()), "round {round}");
            replaced += 1;
        }
        if !temps_of(env.tmp.path(), "state.json").is_empty() {
            temps_seen += 1; // killed between creating the temp file and the rename
        }
    }
    eprintln!(
        "killed in flight {in_flight}, leaving a temp file {temps_seen}; old kept {kept}, new written {replaced}"
    );
    // The kills must have hit baton's write, or this test proves nothing.
    assert!(
        temps_seen >= 1,
        "no kill landed between creating the temp file and the rename"
    );
    assert!(
        in_flight >= rounds / 10,
        "only {in_flight} of {rounds} kills landed while baton was writing"
    );
    let args = edit_args(s(&path), &["awk", AWK_INCREMENT]);
    let before = counter(&path);
    assert_eq!(code(&env.run(&args)), 0);
    assert_eq!(counter(&path), before + 1);
    assert!(
        temps_of(env.tmp.path(), "state.json").is_empty(),
        "the next edit removes temp files of killed writers"
    );
}

#[test]
fn temp_file_of_a_sigkilled_writer_is_removed_by_the_next_edit() {
    let env = Env::new();
    let path = env.path("big.txt");
    fs::write(&path, "small\n").unwrap();
    // 32 MiB of output takes long enough to write and fsync that the writer
    // can be caught with its temp file in place.
    let args = edit_args(
        s(&path),
        &["sh", "-c", "head -c 33554432 /dev/zero | tr '\\0' x"],
    );
    let mut caught = false;
    for _ in 0..5 {
        let mut child = env
            .baton(&args)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let start = Instant::now();
        while temps_of(env.tmp.path(), "big.txt").is_empty()
            && start.elapsed() < Duration::from_secs(20)
            && child.try_wait().unwrap().is_none()
        {
            thread::sleep(Duration::from_micros(200));
        }
        child.kill().unwrap();
        child.wait().unwrap();
        if fs::read_to_string(&path).unwrap() == "small\n"
            && !temps_of(env.tmp.path(), "big.txt").is_empty()
        {
            caught = true;
            break;
        }
        fs::write(&path, "small\n").unwrap(); // it finished first; again
    }
    assert!(caught, "never caught the writer mid-write");
    let out = env.run(&edit_args(s(&path), &["sed", "s/small/tidy/"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(temps_of(env.tmp.path(), "big.txt").is_empty());
    assert_eq!(fs::read_to_string(&path).unwrap(), "tidy\n");
}

#[test]
fn a_torn_last_line_is_moved_to_the_torn_file_by_the_next_append() {
    let env = Env::new();
    let path = env.path("events.jsonl");
    fs::write(&path, "{\"a\":1}\n{\"b\":2}\n{\"half\":tr").unwrap();
    // get leaves the torn line out.
    let out = env.run(&["state", "get", s(&path)]);
    assert_eq!(stdout(&out), "{\"a\":1}\n{\"b\":2}\n");
    let out = env.run(&["state", "append", s(&path), "{\"c\":3}"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stderr(&out).contains("torn"), "{}", stderr(&out));
    assert_eq!(
        fs::read_to_string(&path).unwrap(),
        "{\"a\":1}\n{\"b\":2}\n{\"c\":3}\n"
    );
    assert_eq!(
        fs::read_to_string(env.path("events.jsonl.torn")).unwrap(),
        "{\"half\":tr\n"
    );
    // The next append has nothing to repair.
    let out = env.run(&["state", "append", s(&path), "{\"d\":4}"]);
    assert_eq!(stderr(&out), "");
    assert_eq!(fs::read_to_string(&path).unwrap().lines().count(), 4);
}

#[test]
fn compare_and_swap_with_a_stale_version_exits_75_and_changes_nothing() {
    let env = Env::new();
    let path = env.path("tasks.json");
    let filter = increment_filter();
    // `absent`: create only if missing.
    let mut create = vec!["state", "edit", s(&path), "--if-version", "absent", "--"];
    create.extend(["sh", "-c", "echo '{\"n\":1}'"]);
    assert_eq!(code(&env.run(&create)), 0);
    assert_eq!(code(&env.run(&create)), 75);

    let get = |env: &Env| -> serde_json::Value {
        let out = env.run(&["state", "get", s(&path), "--json"]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert_eq!(stdout(&out).lines().count(), 1, "one line of JSON");
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let v1 = get(&env);
    assert_eq!(v1["content"], serde_json::json!({"n": 1}));
    let version = v1["version"].as_str().unwrap().to_string();
    assert_eq!(version.len(), 16);

    let mut cas = vec![
        "state",
        "edit",
        s(&path),
        "--json",
        "--if-version",
        &version,
        "--",
    ];
    cas.extend_from_slice(&filter);
    let out = env.run(&cas);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let done: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(done["previous"], version.as_str());
    assert_eq!(done["changed"], true);
    let v2 = get(&env);
    assert_eq!(done["version"], v2["version"]);

    let before = fs::read(&path).unwrap();
    let out = env.run(&cas); // v1 is stale now
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    assert!(stderr(&out).contains("has changed"), "{}", stderr(&out));
    assert_eq!(fs::read(&path).unwrap(), before);
    assert_eq!(get(&env)["content"]["n"], 2);

    let out = env.run(&["state", "edit", s(&path), "--if-version", "v1", "--", "cat"]);
    one_line_125(&out, "invalid version");
}

#[test]
fn invalid_json_output_exits_125_and_writes_nothing() {
    let env = Env::new();
    let path = env.path("doc.json");
    fs::write(&path, "{\"keep\":1}").unwrap();
    for filter in [
        vec!["sh", "-c", "echo not json"],
        vec!["true"],
        vec!["sh", "-c", "echo '{\"a\":'"],
    ] {
        let out = env.run(&edit_args(s(&path), &filter));
        one_line_125(&out, "not valid JSON");
        assert_eq!(fs::read_to_string(&path).unwrap(), "{\"keep\":1}");
    }
    // A .json file that does not exist yet is not created from bad output.
    let fresh = env.path("fresh.json");
    let out = env.run(&edit_args(s(&fresh), &["echo", "nope"]));
    one_line_125(&out, "not valid JSON");
    assert!(!fresh.exists());
    assert!(temps_of(env.tmp.path(), "doc.json").is_empty());
}

#[test]
fn a_failing_filter_passes_its_exit_code_and_changes_nothing() {
    let env = Env::new();
    let path = env.path("f.json");
    fs::write(&path, "{\"n\":1}").unwrap();
    let noexec = env.path("noexec.sh");
    fs::write(&noexec, "#!/bin/sh\necho '{}'\n").unwrap();
    for (filter, want) in [
        (vec!["sh", "-c", "cat >/dev/null; exit 3"], 3),
        (vec!["sh", "-c", "kill -TERM $$"], 143),
        (vec!["/nonexistent/filter"], 127),
        (vec![s(&noexec)], 126),
    ] {
        let out = env.run(&edit_args(s(&path), &filter));
        assert_eq!(code(&out), want, "{filter:?}: {}", stderr(&out));
        assert_eq!(fs::read_to_string(&path).unwrap(), "{\"n\":1}");
    }
}

/// Whether process `pid` is gone (or a zombie, dead but not yet reaped).
fn gone(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

#[test]
fn a_filter_past_its_timeout_is_killed_with_its_group_and_changes_nothing() {
    let env = Env::new();
    let path = env.path("f.json");
    fs::write(&path, "{\"n\":1}").unwrap();
    let pidfile = env.path("grandchild.pid");
    let forks = format!(
        "cat >/dev/null; echo '{{\"n\":2}}'; sleep 300 & echo $! > {}; sleep 300",
        s(&pidfile)
    );
    for filter in [vec!["sleep", "300"], vec!["sh", "-c", forks.as_str()]] {
        let mut args = vec!["state", "edit", s(&path), "--filter-timeout", "300ms", "--"];
        args.extend_from_slice(&filter);
        let started = Instant::now();
        let out = env.run(&args);
        let err = stderr(&out);
        assert_eq!(code(&out), 124, "{filter:?}: {err}");
        assert_eq!(
            err.trim_end().lines().count(),
            1,
            "one line expected: {err}"
        );
        assert!(err.contains("timed out after 300ms"), "{err}");
        assert!(err.contains(s(&path)) && err.contains("unchanged"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(200), "not killed");
        assert_eq!(fs::read_to_string(&path).unwrap(), "{\"n\":1}");
        assert_eq!(
            temps_of(path.parent().unwrap(), "f.json"),
            Vec::<PathBuf>::new()
        );
    }
    // The grandchild the filter left in its group was killed with it.
    let pid: u32 = fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    common::wait_until(Duration::from_secs(30), || gone(pid));

    // Within its time a filter works as usual; a timeout must be positive.
    let out = env.run(&[
        "state",
        "edit",
        s(&path),
        "--filter-timeout",
        "60s",
        "--",
        "sed",
        "s/1/2/",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(fs::read_to_string(&path).unwrap(), "{\"n\":2}");
    let out = env.run(&[
        "state",
        "edit",
        s(&path),
        "--filter-timeout",
        "0s",
        "--",
        "cat",
    ]);
    one_line_125(&out, "--filter-timeout");
}

#[test]
fn filters_jq_python_and_sed_work_and_see_their_environment() {
    let env = Env::new();
    let json = env.path("t.json");
    if have("jq") {
        let out = env.run(&edit_args(s(&json), &["jq", "-n", "{tasks: []}"]));
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let out = env.run(&edit_args(s(&json), &["jq", ".tasks += [\"t1\"]"]));
        assert_eq!(code(&out), 0, "{}", stderr(&out));
    } else {
        fs::write(&json, "{\"tasks\":[\"t1\"]}").unwrap();
    }
    let out = env.run(&edit_args(
        s(&json),
        &[
            "python3",
            "-c",
            "import json,sys; d=json.load(sys.stdin); d['tasks'].append('t2'); json.dump(d,sys.stdout)",
        ],
    ));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&fs::read(&json).unwrap()).unwrap();
    assert_eq!(v["tasks"], serde_json::json!(["t1", "t2"]));

    let notes = env.path("notes.md");
    fs::write(&notes, "- TODO a\n- TODO b\n").unwrap();
    fs::set_permissions(&notes, fs::Permissions::from_mode(0o600)).unwrap();
    let out = env.run(&edit_args(s(&notes), &["sed", "s/TODO/DONE/"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(fs::read_to_string(&notes).unwrap(), "- DONE a\n- DONE b\n");
    assert_eq!(
        fs::metadata(&notes).unwrap().permissions().mode() & 0o777,
        0o600
    );

    // The filter learns the file and the lock (by default named after the
    // canonical path).
    let out = env.run(&edit_args(
        s(&notes),
        &[
            "sh",
            "-c",
            "cat >/dev/null; echo \"$BATON_STATE_FILE|$BATON_LOCK|$BATON_FENCING_TOKEN\"",
        ],
    ));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let canon = fs::canonicalize(&notes).unwrap();
    let line = fs::read_to_string(&notes).unwrap();
    let parts: Vec<&str> = line.trim().split('|').collect();
    assert_eq!(parts[0], s(&canon));
    assert_eq!(
        parts[1],
        format!("state/{}", s(&canon).trim_start_matches('/'))
    );
    assert!(parts[2].parse::<u64>().unwrap() >= 1);
}

#[test]
fn bad_input_exits_125_naming_the_path_and_leaves_files_alone() {
    let env = Env::new();
    let cat = |p: &Path| edit_args_owned(p, &["cat"]);
    // A directory.
    let dir = env.path("adir");
    fs::create_dir(&dir).unwrap();
    one_line_125(&env.run(&refs(&cat(&dir))), "is a directory");
    one_line_125(
        &env.run(&["state", "append", s(&dir), "{}"]),
        "is a directory",
    );
    one_line_125(&env.run(&["state", "get", s(&dir)]), "is a directory");
    // A symlink pointing outside its directory.
    let link = env.path("passwd.json");
    symlink("/etc/passwd", &link).unwrap();
    one_line_125(&env.run(&refs(&cat(&link))), "outside its directory");
    one_line_125(
        &env.run(&["state", "append", s(&link), "x"]),
        "outside its directory",
    );
    // A path whose parent is a regular file.
    let plain = env.path("plain");
    fs::write(&plain, "x").unwrap();
    one_line_125(&env.run(&refs(&cat(&plain.join("x.json")))), "plain/x.json");
    // A file the kernel provides and nobody may replace, not even root.
    let out = env.run(&[
        "state",
        "edit",
        "/proc/version",
        "--",
        "sed",
        "s/Linux/Lunix/",
    ]);
    one_line_125(&out, "/proc/");
    // A read-only directory: chmod for normal users, chattr +i for root (who
    // ignores modes); files in it stay as they were, no temp file is left.
    let ro = env.path("ro");
    fs::create_dir(&ro).unwrap();
    let file = ro.join("s.json");
    fs::write(&file, "{\"n\":1}").unwrap();
    let root = rustix::process::geteuid().is_root();
    let guard = if root {
        Immutable::set(&ro)
    } else {
        fs::set_permissions(&ro, fs::Permissions::from_mode(0o555)).unwrap();
        None
    };
    if guard.is_some() || !root {
        one_line_125(&env.run(&refs(&cat(&file))), s(&ro));
        one_line_125(
            &env.run(&["state", "append", s(&ro.join("e.jsonl")), "{}"]),
            s(&ro),
        );
        drop(guard);
        fs::set_permissions(&ro, fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(fs::read_to_string(&file).unwrap(), "{\"n\":1}");
        assert!(temps_of(&ro, "s.json").is_empty());
        assert!(!ro.join("e.jsonl").exists());
    } else {
        eprintln!("skipped: chattr is not available to make a read-only directory");
    }
    // Unreadable file: only for normal users (root reads anything).
    if !root {
        let secret = env.path("secret.json");
        fs::write(&secret, "{}").unwrap();
        fs::set_permissions(&secret, fs::Permissions::from_mode(0o000)).unwrap();
        one_line_125(&env.run(&refs(&cat(&secret))), "secret.json");
    }
    // Records: one JSON value each, checked before anything is written.
    let events = env.path("e.jsonl");
    fs::write(&events, "{\"ok\":1}\n").unwrap();
    one_line_125(
        &env.run(&["state", "append", s(&events), "not json"]),
        "record 1",
    );
    let out = run_with_stdin(&env, &["state", "append", s(&events)], b"{\"a\":1}\nnope\n");
    one_line_125(&out, "record 2");
    assert_eq!(fs::read_to_string(&events).unwrap(), "{\"ok\":1}\n");
    // No filter.
    assert_eq!(code(&env.run(&["state", "edit", s(&events)])), 125);
}

#[test]
fn append_reads_records_from_stdin_and_get_prints_content_and_versions() {
    let env = Env::new();
    let log = env.path("session.log");
    let out = run_with_stdin(
        &env,
        &["state", "append", s(&log)],
        b"step 1\nstep 2\n\nstep 4",
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        fs::read_to_string(&log).unwrap(),
        "step 1\nstep 2\n\nstep 4\n"
    );
    let out = env.run(&["state", "get", s(&log)]);
    assert_eq!(stdout(&out), "step 1\nstep 2\n\nstep 4\n");
    let out = env.run(&["state", "get", s(&log), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["content"], "step 1\nstep 2\n\nstep 4\n");

    let missing = env.path("missing.json");
    let out = env.run(&["state", "get", s(&missing)]);
    assert_eq!((code(&out), stdout(&out).as_str()), (0, ""));
    let out = env.run(&["state", "get", s(&missing), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v, serde_json::json!({"version": "absent", "content": null}));
    assert!(!missing.exists());
}

#[test]
fn a_shared_lock_covers_several_files_and_busy_exits_75() {
    let env = Env::new();
    // Held by another script (a descendant of the holder would use its hold).
    let go = env.path("go");
    let holder = format!(
        "T=$({b} --dir {d} lock acquire memory) || exit 1; while [ ! -e {g} ]; do sleep 0.01; done; {b} --dir {d} lock release memory",
        b = env!("CARGO_BIN_EXE_baton"),
        d = env.dir.display(),
        g = go.display()
    );
    let mut holder = Command::new("sh").arg("-c").arg(&holder).spawn().unwrap();
    env.wait_for_held("memory", true);
    let tasks = env.path("tasks.json");
    let events = env.path("events.jsonl");
    let mut busy = vec![
        "state",
        "edit",
        s(&tasks),
        "--lock",
        "memory",
        "--no-wait",
        "--",
    ];
    busy.extend(["echo", "{}"]);
    assert_eq!(code(&env.run(&busy)), 75);
    let out = env.run(&[
        "state",
        "append",
        s(&events),
        "--lock",
        "memory",
        "--wait",
        "50ms",
        "{}",
    ]);
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    assert!(!tasks.exists() && !events.exists());
    // The file's own lock is a different lock: not busy.
    assert_eq!(
        code(&env.run(&["state", "append", s(&events), "--no-wait", "{}"])),
        0
    );
    fs::write(&go, "").unwrap();
    assert!(holder.wait().unwrap().success());
    assert_eq!(code(&env.run(&busy)), 0);
    let out = env.run(&[
        "state",
        "append",
        s(&events),
        "--lock",
        "memory",
        "{\"e\":1}",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(fs::read_to_string(&events).unwrap(), "{}\n{\"e\":1}\n");
}

fn edit_args_owned(file: &Path, filter: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = ["state", "edit", s(file), "--"]
        .iter()
        .map(|x| x.to_string())
        .collect();
    v.extend(filter.iter().map(|x| x.to_string()));
    v
}

fn refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

// ---- Other users, resource limits: the real binary under setpriv / prlimit.

/// An unprivileged identity for `setpriv`, which takes raw numbers: no
/// /etc/passwd or /etc/group entry is needed, so nothing on the machine
/// changes. The ids are far above any allocated range.
#[derive(Clone, Copy)]
struct User {
    uid: u32,
    /// Its primary group, its own.
    gid: u32,
}

/// Two users, each with its own primary group, both members of [`SHARED_GID`].
const USER_A: User = User {
    uid: 2_000_000_001,
    gid: 2_000_000_001,
};
const USER_B: User = User {
    uid: 2_000_000_002,
    gid: 2_000_000_002,
};
const SHARED_GID: u32 = 2_000_000_100;

/// `WRAPPER... baton --dir DIR ARGS` in the clean environment of [`Env::baton`].
fn wrapped(env: &Env, wrapper: &[String], dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(&wrapper[0]);
    c.args(&wrapper[1..])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", env.tmp.path())
        .current_dir(env.tmp.path())
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_baton"))
        .arg("--dir")
        .arg(dir)
        .args(args);
    c
}

fn output_of(mut c: Command, what: &str) -> Output {
    c.stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {what} (util-linux): {e}"))
}

/// Makes the test's temp directory traversable by other users and gives
/// `user` a baton dir of its own there (a baton dir must be owned by its
/// user).
fn prepare_for(env: &Env, user: User) -> PathBuf {
    fs::set_permissions(env.tmp.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let dir = env.path(&format!("baton-{}", user.uid));
    fs::create_dir(&dir).unwrap();
    std::os::unix::fs::chown(&dir, Some(user.uid), Some(user.gid)).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

/// `baton ARGS` run as `user` (member of its own group and [`SHARED_GID`])
/// with its own baton dir. Fails loudly where setpriv is missing or we may
/// not switch users (the tests run as root).
fn baton_as(env: &Env, user: User, args: &[&str]) -> Output {
    let dir = env.path(&format!("baton-{}", user.uid));
    let setpriv = [
        "setpriv".to_string(),
        format!("--reuid={}", user.uid),
        format!("--regid={}", user.gid),
        format!("--groups={},{SHARED_GID}", user.gid),
    ];
    let out = output_of(wrapped(env, &setpriv, &dir, args), "setpriv");
    assert!(
        !stderr(&out).starts_with("setpriv:"),
        "setpriv failed (the tests must run as root): {}",
        stderr(&out)
    );
    out
}

#[test]
fn edit_by_another_member_of_the_group_keeps_the_files_group_and_mode() {
    let env = Env::new();
    prepare_for(&env, USER_A);
    prepare_for(&env, USER_B);
    // A directory and a file of B's, shared through the group: no setgid
    // bit on the directory, so new files would get their creator's group.
    let shared = env.path("shared");
    fs::create_dir(&shared).unwrap();
    std::os::unix::fs::chown(&shared, Some(USER_B.uid), Some(SHARED_GID)).unwrap();
    fs::set_permissions(&shared, fs::Permissions::from_mode(0o775)).unwrap();
    let file = shared.join("tasks.json");
    fs::write(&file, "{\"n\":1}\n").unwrap();
    std::os::unix::fs::chown(&file, Some(USER_B.uid), Some(SHARED_GID)).unwrap();
    fs::set_permissions(&file, fs::Permissions::from_mode(0o660)).unwrap();
    let owner = |p: &Path| {
        use std::os::unix::fs::MetadataExt;
        let m = fs::metadata(p).unwrap();
        (m.uid(), m.gid(), m.mode() & 0o7777)
    };

    // A edits B's file: A cannot give the file to B, but keeps its group and mode.
    let out = baton_as(&env, USER_A, &edit_args(s(&file), &["awk", AWK_INCREMENT]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(counter(&file), 2);
    assert_eq!(owner(&file), (USER_A.uid, SHARED_GID, 0o660));

    // So B can still change it, and the group and mode stay across B's edit too.
    let out = baton_as(&env, USER_B, &edit_args(s(&file), &["awk", AWK_INCREMENT]));
    assert_eq!(code(&out), 0, "B cannot edit A's edit: {}", stderr(&out));
    assert_eq!(counter(&file), 3);
    assert_eq!(owner(&file), (USER_B.uid, SHARED_GID, 0o660));
}

#[test]
fn edit_that_cannot_keep_the_group_gives_the_writers_group_no_more_than_others_had() {
    let env = Env::new();
    prepare_for(&env, USER_A);
    let dir = env.path("own");
    fs::create_dir(&dir).unwrap();
    std::os::unix::fs::chown(&dir, Some(USER_A.uid), Some(USER_A.gid)).unwrap();
    // A's file, readable by a group A is not a member of (root set it).
    let secret = dir.join("secret.json");
    fs::write(&secret, "{\"n\":1}").unwrap();
    std::os::unix::fs::chown(&secret, Some(USER_A.uid), Some(USER_B.gid)).unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o640)).unwrap();
    let out = baton_as(
        &env,
        USER_A,
        &edit_args(s(&secret), &["awk", AWK_INCREMENT]),
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(counter(&secret), 2);
    use std::os::unix::fs::MetadataExt;
    let m = fs::metadata(&secret).unwrap();
    // The file is now in A's own group: that group gets what others had (nothing).
    assert_eq!((m.gid(), m.mode() & 0o7777), (USER_A.gid, 0o600));
}

/// A directory the writer may change but not read (mode 0300): files in it
/// can be created and renamed, but the directory cannot be opened to flush it.
fn unflushable_dir(env: &Env, user: User) -> PathBuf {
    let dir = env.path("write-only");
    fs::create_dir(&dir).unwrap();
    std::os::unix::fs::chown(&dir, Some(user.uid), Some(user.gid)).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o300)).unwrap();
    dir
}

#[test]
fn changes_made_but_not_flushed_report_durability_unknown_not_failure() {
    let env = Env::new();
    prepare_for(&env, USER_A);
    let dir = unflushable_dir(&env, USER_A);
    let doc = dir.join("doc.json");
    let out = baton_as(&env, USER_A, &edit_args(s(&doc), &["echo", "{\"n\":1}"]));
    let err = stderr(&out);
    assert_eq!(code(&out), 74, "{err}");
    assert!(err.contains("doc.json") && err.contains("durab"), "{err}");
    assert_eq!(counter(&doc), 1, "the edit was applied");

    // Creating a file by appending needs the directory flushed too.
    let events = dir.join("events.jsonl");
    let out = baton_as(&env, USER_A, &["state", "append", s(&events), "{\"e\":1}"]);
    assert_eq!(code(&out), 74, "{}", stderr(&out));
    assert_eq!(fs::read_to_string(&events).unwrap(), "{\"e\":1}\n");
    // Appending to it afterwards does not.
    let out = baton_as(&env, USER_A, &["state", "append", s(&events), "{\"e\":2}"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(fs::read_to_string(&events).unwrap().lines().count(), 2);
}

#[test]
fn append_that_fails_part_way_leaves_the_file_unchanged() {
    let env = Env::new();
    let events = env.path("events.jsonl");
    let before = "{\"first\":true}\n";
    fs::write(&events, before).unwrap();
    // 40 records of 4 KiB against a 64 KiB file size limit: the first
    // fifteen fit, the write of all of them cannot.
    let pad = "x".repeat(4096);
    let input: String = (0..40)
        .map(|i| format!("{{\"i\":{i},\"pad\":\"{pad}\"}}\n"))
        .collect();
    let prlimit = ["prlimit".to_string(), "--fsize=65536".to_string()];
    let mut c = wrapped(&env, &prlimit, &env.dir, &["state", "append", s(&events)]);
    let mut child = c
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run prlimit (util-linux): {e}"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let err = stderr(&out);
    assert_eq!(
        fs::read_to_string(&events).unwrap(),
        before,
        "none of the records may be appended ({:?}, {err})",
        out.status
    );
    assert_eq!(code(&out), 125, "{err}");
    assert!(err.contains("events.jsonl"), "{err}");
    assert!(!env.path("events.jsonl.torn").exists());

    // A file the append would have created is not left behind empty: it is
    // still absent, so the same compare-and-swap can be repeated.
    let fresh = env.path("fresh.jsonl");
    let args = ["state", "append", s(&fresh), "--if-version", "absent"];
    let mut child = wrapped(&env, &prlimit, &env.dir, &args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(!fresh.exists(), "{:?} {}", out.status, stderr(&out));
    assert_eq!(code(&out), 125, "{}", stderr(&out));
}

#[test]
fn append_keeps_a_complete_last_record_that_lacks_its_newline() {
    let env = Env::new();
    let events = env.path("events.jsonl");
    fs::write(&events, "{\"a\":1}\n{\"b\":2}").unwrap();
    let out = env.run(&["state", "append", s(&events), "{\"c\":3}"]);
    assert_eq!((code(&out), stderr(&out).as_str()), (0, ""));
    assert_eq!(
        fs::read_to_string(&events).unwrap(),
        "{\"a\":1}\n{\"b\":2}\n{\"c\":3}\n"
    );
    assert!(!env.path("events.jsonl.torn").exists());
}

#[test]
fn several_files_change_under_one_lock_the_script_already_holds() {
    let env = Env::new();
    let b = env!("CARGO_BIN_EXE_baton");
    let d = env.dir.display().to_string();
    let tasks = env.path("tasks.json");
    let log = env.path("log.jsonl");
    fs::write(&tasks, "{\"n\":0}\n").unwrap();
    let edit = format!(
        "{b} --dir {d} state edit {t} --lock memory -- sh -c 'echo {{\\\"n\\\":1}}' && echo '{{\"e\":1}}' | {b} --dir {d} state append {l} --lock memory",
        t = tasks.display(),
        l = log.display()
    );
    // 1. Inside `baton run --lock memory`: the edits use the run's hold.
    let out = env.run(&["run", "--lock", "memory", "--", "sh", "-c", &edit]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(fs::read_to_string(&tasks).unwrap().trim(), "{\"n\":1}");
    // 2. After `lock acquire memory` in the script; an outsider still waits.
    let script = format!(
        "T=$({b} --dir {d} lock acquire memory) || exit 1; {edit} || exit 2; {b} --dir {d} state edit {t} --lock memory --no-wait -- cat </dev/null >/dev/null; echo inner=$?; {b} --dir {d} lock release memory --token $T",
        t = tasks.display()
    );
    let out = Command::new("sh").arg("-c").arg(&script).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("inner=0"), "{}", stdout(&out));
    assert_eq!(fs::read_to_string(&log).unwrap().lines().count(), 2);
    // A process that is not part of the holding script waits as usual.
    let go = env.path("go");
    let holder = format!(
        "T=$({b} --dir {d} lock acquire memory) || exit 1; while [ ! -e {g} ]; do sleep 0.01; done; {b} --dir {d} lock release memory",
        g = go.display()
    );
    let mut a = Command::new("sh").arg("-c").arg(&holder).spawn().unwrap();
    env.wait_for_held("memory", true);
    let outsider = env.run(&[
        "state",
        "edit",
        s(&tasks),
        "--lock",
        "memory",
        "--no-wait",
        "--",
        "cat",
    ]);
    assert_eq!(code(&outsider), 75, "{}", stderr(&outsider));
    fs::write(&go, "").unwrap();
    assert!(a.wait().unwrap().success());
}

#[test]
fn descendants_using_their_scripts_hold_still_exclude_each_other() {
    // Two background jobs of one holding script both use its hold: they must
    // still not edit at the same time (no lost update).
    let env = Env::new();
    let b = env!("CARGO_BIN_EXE_baton");
    let d = env.dir.display().to_string();
    let counter = env.path("counter.json");
    fs::write(&counter, "{\"n\":0}\n").unwrap();
    let bump = format!(
        "for i in $(seq 40); do {b} --dir {d} state edit {c} --lock memory -- python3 -c 'import json,sys; v=json.load(sys.stdin); v[\"n\"]+=1; print(json.dumps(v))' || exit 1; done",
        c = counter.display()
    );
    let script = format!(
        "T=$({b} --dir {d} lock acquire memory) || exit 1; ({bump}) & ({bump}) & wait; {b} --dir {d} lock release memory --token $T"
    );
    let out = Command::new("sh").arg("-c").arg(&script).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(&counter).unwrap()).unwrap();
    assert_eq!(v["n"], 80, "lost updates between two users of one hold");
}
