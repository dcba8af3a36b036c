#![cfg(unix)] // sh, /proc and mounts: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! Defects a hostile review of the local CLI found: a state-edit filter
//! with endless output, a corrupt workspace registry record, invisible
//! characters in names, a lossy `state get --json`, and `doctor`'s sizes of
//! small filesystems. Each test runs the real binary.

use crate::common;

use std::fs;
use std::path::Path;
use std::time::Duration;

use common::{code, stderr, stdout, Env};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `baton state edit f.json --max-output 64KiB -- yes`: the filter never
/// stops writing. Its output is the new document, so baton stops the
/// filter's group once it passes the cap, leaves the file as it was, and
/// exits 125 naming the file and the cap (instead of growing until the
/// kernel kills it).
#[test]
fn a_filter_with_endless_output_is_stopped_at_the_cap() {
    let env = Env::new();
    let path = env.path("f.json");
    fs::write(&path, "{\"n\":1}").unwrap();
    let pidfile = env.path("yes.pid");
    let filter = format!("echo $$ > {}; exec yes", s(&pidfile));
    let out = env.run(&[
        "state",
        "edit",
        s(&path),
        "--max-output",
        "64KiB",
        "--",
        "sh",
        "-c",
        &filter,
    ]);
    let err = stderr(&out);
    assert_eq!(code(&out), 125, "{err}");
    assert!(err.contains(s(&path)), "the file is not named: {err}");
    assert!(
        err.contains("65536 bytes") && err.contains("--max-output"),
        "the cap is not named: {err}"
    );
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert_eq!(fs::read_to_string(&path).unwrap(), "{\"n\":1}");
    let pid: i32 = fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    common::wait_until(Duration::from_secs(60), || !common::ns::running(pid));
}

/// Output up to the cap is a normal edit; the default cap is documented.
#[test]
fn output_within_the_cap_is_written_and_the_default_is_documented() {
    let env = Env::new();
    let path = env.path("f.txt");
    let out = env.run(&[
        "state",
        "edit",
        s(&path),
        "--max-output",
        "4",
        "--",
        "printf",
        "abcd",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(fs::read_to_string(&path).unwrap(), "abcd");
    let out = env.run(&[
        "state",
        "edit",
        s(&path),
        "--max-output",
        "3",
        "--",
        "printf",
        "wxyz",
    ]);
    assert_eq!(code(&out), 125, "{}", stderr(&out));
    assert_eq!(fs::read_to_string(&path).unwrap(), "abcd");
    let bad = env.run(&[
        "state",
        "edit",
        s(&path),
        "--max-output",
        "lots",
        "--",
        "cat",
    ]);
    assert_eq!(code(&bad), 125, "{}", stderr(&bad));
    let help = env.run(&["state", "edit", "--help"]);
    assert!(stdout(&help).contains("256MiB"), "{}", stdout(&help));
}

/// Invisible and bidi characters would let `lock status` show one name for
/// another (U+202E turns `deploy\u{202E}gnp.exe` into what reads as
/// `deployexe.png`). They are refused in lock names and group keys, with
/// 125 and the code point; ordinary non-ASCII letters stay allowed.
#[test]
fn invisible_and_bidi_characters_are_refused_in_names() {
    let env = Env::new();
    for (bad, point) in [
        ("deploy\u{202E}gnp.exe", "U+202E"),
        ("de\u{200B}ploy", "U+200B"),
        ("a\u{2066}b\u{2069}", "U+2066"),
        ("soft\u{AD}hyphen", "U+00AD"),
        ("\u{FEFF}bom", "U+FEFF"),
        ("line\u{2028}sep", "U+2028"),
        ("tag\u{E0041}", "U+E0041"),
        ("nel\u{85}", "U+0085"),
    ] {
        for args in [
            vec!["run", "--lock", bad, "--", "true"],
            vec!["run", "--group", bad, "--", "true"],
            vec!["lock", "status", bad],
        ] {
            let out = env.run(&args);
            let err = stderr(&out);
            assert_eq!(code(&out), 125, "{args:?}: {err}");
            assert!(err.contains(point), "{args:?}: {point} not named: {err}");
        }
    }
    for good in ["ünï/cödé", "日本語/ブランチ", "issue #42", "Ελληνικά"] {
        let out = env.run(&["run", "--lock", good, "--", "true"]);
        assert_eq!(code(&out), 0, "{good}: {}", stderr(&out));
        let out = env.run(&["run", "--group", good, "--", "true"]);
        assert_eq!(code(&out), 0, "{good}: {}", stderr(&out));
    }
}

/// `state get --json` promises the file's content; a text file that is not
/// UTF-8 cannot be one JSON string exactly, so it is refused (125, the file
/// and the offset of the first bad byte), never silently turned into
/// U+FFFD. Plain `get` prints the bytes as they are.
#[test]
fn state_get_json_refuses_bytes_that_are_not_utf8() {
    let env = Env::new();
    for (name, bytes, offset) in [
        ("notes.txt", &b"caf\xc3\xa9 ok\xffno"[..], 8),
        ("log.jsonl", &b"{\"a\":\"\xfe\"}\n"[..], 6),
    ] {
        let path = env.path(name);
        fs::write(&path, bytes).unwrap();
        let out = env.run(&["state", "get", s(&path), "--json"]);
        let err = stderr(&out);
        assert_eq!(code(&out), 125, "{name}: {} {err}", stdout(&out));
        assert!(out.stdout.is_empty(), "{name}: {}", stdout(&out));
        assert!(
            err.contains(s(&path)),
            "{name}: the file is not named: {err}"
        );
        assert!(
            err.contains(&format!("byte {offset}")),
            "{name}: the offset is not named: {err}"
        );
        let raw = env.run(&["state", "get", s(&path)]);
        assert_eq!(code(&raw), 0, "{}", stderr(&raw));
        assert_eq!(raw.stdout, bytes);
    }
    // Valid UTF-8 (any script) is still one exact string.
    let path = env.path("ok.txt");
    fs::write(&path, "café ✓\n").unwrap();
    let out = env.run(&["state", "get", s(&path), "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["content"], "café ✓\n");
}

/// `baton doctor` on a 512 KiB filesystem (a tmpfs mounted in a user and
/// mount namespace of this test): the free-space line names the sizes in a
/// unit that fits, not "0.0 GiB free of 0.0 GiB".
#[test]
fn doctor_prints_small_filesystems_in_a_unit_that_fits() {
    let env = Env::new();
    let mnt = env.path("small");
    fs::create_dir(&mnt).unwrap();
    let out = std::process::Command::new("unshare")
        .args(["--user", "--map-root-user", "--mount", "sh", "-c"])
        .arg("mount -t tmpfs -o size=512k tmpfs \"$1\" && exec \"$2\" --dir \"$1/bd\" doctor")
        .args(["sh", s(&mnt), env!("CARGO_BIN_EXE_baton")])
        .env("HOME", env.tmp.path())
        .output()
        .unwrap();
    let text = stdout(&out);
    let line = text
        .lines()
        .find(|l| l.contains("free of"))
        .unwrap_or_else(|| panic!("no free-space line: {text} {}", stderr(&out)));
    assert!(!line.contains("0.0 GiB"), "{line}");
    assert!(line.contains("KiB free of 512.0 KiB"), "{line}");
}

/// One corrupt record in the workspace registry: `workspace list` still
/// lists the others, names the record (path and reason) on stderr and exits
/// 1 (something is wrong; the listing is incomplete); `workspace gc` removes
/// the others' due workspaces, leaves the record alone, names it, exits 1.
#[test]
fn one_corrupt_workspace_record_does_not_hide_or_stop_the_others() {
    let g = crate::git::GitEnv::new();
    let home = g.env.tmp.path();
    let mut ids = Vec::new();
    for _ in 0..2 {
        // The owner is the shell, which exits right after: a dead owner.
        let out = std::process::Command::new("sh")
            .args([
                "-c",
                "\"$@\"; true",
                "sh",
                env!("CARGO_BIN_EXE_baton"),
                "--dir",
            ])
            .arg(&g.env.dir)
            .args(["workspace", "create", "--json", "--repo", s(&g.base)])
            .env("HOME", home)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", home.join("gitconfig"))
            .output()
            .unwrap();
        let ws: serde_json::Value =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&out)));
        ids.push(ws["id"].as_str().unwrap().to_string());
    }
    let broken = g.env.dir.join("workspaces/.registry/broken.json");
    fs::write(&broken, "{\"id\": \"broken\", trunc").unwrap();

    let out = g.run(&["workspace", "list"]);
    let err = stderr(&out);
    assert_eq!(code(&out), 1, "{} {err}", stdout(&out));
    for id in &ids {
        assert!(
            stdout(&out).contains(id.as_str()),
            "{id} not listed: {}",
            stdout(&out)
        );
    }
    assert!(
        err.contains(s(&broken)) && err.contains("not valid JSON"),
        "{err}"
    );

    let out = g.run(&["workspace", "list", "--json"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 2, "{listed}");
    assert!(stderr(&out).contains(s(&broken)), "{}", stderr(&out));

    let out = g.run(&["workspace", "gc", "--json"]);
    let err = stderr(&out);
    assert_eq!(code(&out), 1, "{err}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["removed"].as_array().unwrap().len(), 2, "{report}");
    assert_eq!(report["failed"].as_array().unwrap().len(), 0, "{report}");
    assert_eq!(report["unreadable"][0]["path"], s(&broken), "{report}");
    assert!(err.contains(s(&broken)) && err.contains("skipped"), "{err}");
    assert!(broken.exists(), "gc deleted the record it could not read");

    // Only the unreadable record left: still said, still 1.
    let out = g.run(&["workspace", "gc"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(stderr(&out).contains(s(&broken)), "{}", stderr(&out));
    fs::remove_file(&broken).unwrap();
    let out = g.run(&["workspace", "list"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}
