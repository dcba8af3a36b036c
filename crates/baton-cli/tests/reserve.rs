//! `baton reserve` and `baton reservations` with the real binary, real git
//! repositories (two clones of one origin, a linked worktree), real
//! commands and a real SIGKILL.
#![cfg(unix)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::{code, git, stderr, stdout, wait_for_file, wait_until, Env};

/// `origin` (one commit), its clones `a` and `b`, and `a`'s worktree `a-wt`.
struct Repos {
    env: Env,
}

impl Repos {
    fn new() -> Repos {
        let env = Env::new();
        let origin = env.path("origin");
        std::fs::create_dir_all(origin.join("src")).unwrap();
        std::fs::write(origin.join("src/lib.rs"), "// lib\n").unwrap();
        std::fs::create_dir_all(origin.join("docs")).unwrap();
        std::fs::write(origin.join("docs/a.md"), "# a\n").unwrap();
        git(&origin, &["init", "-q", "-b", "main"]);
        git(&origin, &["add", "."]);
        git(&origin, &["commit", "-q", "-m", "seed"]);
        git(env.tmp.path(), &["clone", "-q", "origin", "a"]);
        git(env.tmp.path(), &["clone", "-q", "origin", "b"]);
        git(
            &env.path("a"),
            &["worktree", "add", "-q", "../a-wt", "-b", "wt"],
        );
        Repos { env }
    }

    fn repo(&self, name: &str) -> PathBuf {
        self.env.path(name)
    }

    /// `baton reserve ARGS` (in clone `a` unless `--repo` is given), with
    /// `BATON_BIN` set for commands that run baton again.
    fn baton(&self, args: &[&str]) -> Command {
        let mut c = self.env.baton(args);
        c.current_dir(self.repo("a"))
            .env("BATON_BIN", env!("CARGO_BIN_EXE_baton"))
            .env("OUT", self.env.tmp.path());
        c
    }

    fn spawn(&self, args: &[&str]) -> Child {
        self.baton(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    fn run(&self, args: &[&str]) -> std::process::Output {
        self.baton(args).stdin(Stdio::null()).output().unwrap()
    }

    /// `baton reservations --json` seen from `repo`.
    fn rows(&self, repo: &str) -> Vec<serde_json::Value> {
        let out = self.run(&[
            "reservations",
            "--json",
            "--repo",
            self.repo(repo).to_str().unwrap(),
        ]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        serde_json::from_slice::<Vec<serde_json::Value>>(&out.stdout).unwrap()
    }

    fn waiting(&self) -> usize {
        self.rows("a")
            .iter()
            .filter(|r| r["granted"] == false)
            .count()
    }

    fn out(&self, name: &str) -> PathBuf {
        self.env.path(name)
    }
}

/// A shell command that marks `started`, waits until `go` exists, then exits.
fn until_go(started: &Path, go: &Path) -> String {
    format!(
        "touch '{}'; while [ ! -e '{}' ]; do sleep 0.01; done",
        started.display(),
        go.display()
    )
}

#[test]
fn overlapping_reservations_from_two_clones_exclude_each_other() {
    let r = Repos::new();
    let log = r.out("intervals");
    // Each records its start and end (ns) around a pause; the two must not interleave.
    let script = format!(
        "echo \"start $(date +%s%N)\" >> '{0}'; sleep 0.3; echo \"end $(date +%s%N)\" >> '{0}'",
        log.display()
    );
    let b = r.repo("b");
    let mut first = r.spawn(&["reserve", "src", "--", "sh", "-c", &script]);
    let mut second = r.spawn(&[
        "reserve",
        "src/lib.rs",
        "--repo",
        b.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        &script,
    ]);
    let mut third = r.spawn(&["reserve", "src/**/*.rs", "--", "sh", "-c", &script]);
    for c in [&mut first, &mut second, &mut third] {
        assert!(c.wait().unwrap().success());
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 6, "{text}");
    for pair in lines.chunks(2) {
        assert!(
            pair[0].starts_with("start") && pair[1].starts_with("end"),
            "interleaved: {text}"
        );
    }
}

#[test]
fn disjoint_reservations_run_at_once() {
    let r = Repos::new();
    let (started, go) = (r.out("started"), r.out("go"));
    let mut holder = r.spawn(&["reserve", "src", "--", "sh", "-c", &until_go(&started, &go)]);
    wait_for_file(&started);
    let out = r.run(&["reserve", "docs", "--no-wait", "--", "true"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = r.run(&["reserve", "src/*.md", "--shared", "--no-wait", "--", "true"]);
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    std::fs::write(&go, "").unwrap();
    assert!(holder.wait().unwrap().success());
}

#[test]
fn a_busy_reservation_names_its_holder_and_check_tells_free_from_reserved() {
    let r = Repos::new();
    let (started, go, own) = (r.out("started"), r.out("go"), r.out("own"));
    // The command checks its own reservation: free for it (75 for others).
    let script = format!(
        "\"$BATON_BIN\" reserve --check src/lib.rs; echo $? > '{}'; {}",
        own.display(),
        until_go(&started, &go)
    );
    let mut holder = r.spawn(&[
        "reserve",
        "src",
        "--agent",
        "alice",
        "--reason",
        "parser refactor",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    wait_for_file(&started);
    assert_eq!(std::fs::read_to_string(&own).unwrap().trim(), "0");
    let pid = holder.id();

    let out = r.run(&["reserve", "src/lib.rs", "--no-wait", "--", "true"]);
    assert_eq!(code(&out), 75);
    let msg = stderr(&out);
    assert_eq!(msg.lines().count(), 1, "{msg}");
    for part in [
        "'src'",
        "alice",
        &format!("pid {pid}"),
        "parser refactor",
        "exclusive",
    ] {
        assert!(msg.contains(part), "{part:?} missing from {msg}");
    }

    let out = r.run(&["reserve", "--check", "src/lib.rs"]);
    assert_eq!(code(&out), 75);
    assert!(stderr(&out).contains("alice"), "{}", stderr(&out));
    let out = r.run(&["reserve", "--check", "docs", "README.md"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = r.run(&["reserve", "--check", "--json", "src"]);
    assert_eq!(code(&out), 75);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["free"], false);
    assert_eq!(report["conflicts"][0]["path"], "src");
    assert_eq!(report["conflicts"][0]["holder"]["agent"], "alice");
    assert_eq!(report["conflicts"][0]["holder"]["pid"], pid);
    // Shared checks against an exclusive holder still conflict.
    let out = r.run(&["reserve", "--check", "--shared", "src/x"]);
    assert_eq!(code(&out), 75);

    let out = r.run(&["reservations"]);
    assert_eq!(code(&out), 0);
    assert!(
        stdout(&out).contains("alice") && stdout(&out).contains("held"),
        "{}",
        stdout(&out)
    );
    std::fs::write(&go, "").unwrap();
    assert!(holder.wait().unwrap().success());
    let out = r.run(&["reserve", "--check", "src"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

#[test]
fn a_killed_holder_frees_its_paths_at_once_for_the_next_which_is_told() {
    let r = Repos::new();
    let (started, pidfile, died) = (r.out("started"), r.out("cmdpid"), r.out("died"));
    let script = format!(
        "echo $$ > '{}'; touch '{}'; exec sleep 60",
        pidfile.display(),
        started.display()
    );
    let mut holder = r.spawn(&["reserve", "src", "--", "sh", "-c", &script]);
    wait_for_file(&started);
    let first: Vec<serde_json::Value> = r.rows("a");
    let t1 = first[0]["token"].as_u64().unwrap();
    let next_script = format!(
        "echo \"${{BATON_PREVIOUS_HOLDER_DIED:-0}} $BATON_FENCING_TOKEN\" > '{}'",
        died.display()
    );
    let mut next = r.spawn(&[
        "reserve",
        "src/lib.rs",
        "--wait",
        "60s",
        "--",
        "sh",
        "-c",
        &next_script,
    ]);
    wait_until(Duration::from_secs(20), || r.waiting() == 1);
    holder.kill().unwrap(); // SIGKILL of `baton reserve`
    holder.wait().unwrap();
    let status = next.wait().unwrap();
    assert!(status.success(), "{status:?}");
    let text = std::fs::read_to_string(&died).unwrap();
    let mut words = text.split_whitespace();
    assert_eq!(words.next(), Some("1"), "{text}");
    let t2: u64 = words.next().unwrap().parse().unwrap();
    assert!(t2 > t1, "token {t2} after {t1}");
    // The killed holder's command is stopped here, not by the test's success.
    if let Ok(pid) = std::fs::read_to_string(&pidfile) {
        let _ = Command::new("kill").args(["-9", pid.trim()]).status();
    }
}

#[test]
fn clones_of_one_origin_and_worktrees_share_reservations() {
    let r = Repos::new();
    let (started, go) = (r.out("started"), r.out("go"));
    let mut holder = r.spawn(&[
        "reserve",
        "docs/a.md",
        "--",
        "sh",
        "-c",
        &until_go(&started, &go),
    ]);
    wait_for_file(&started);
    for repo in ["a", "b", "a-wt"] {
        let rows = r.rows(repo);
        assert_eq!(rows.len(), 1, "{repo}: {rows:?}");
        assert_eq!(rows[0]["patterns"][0], "docs/a.md");
        let out = r.run(&[
            "reserve",
            "--check",
            "docs",
            "--repo",
            r.repo(repo).to_str().unwrap(),
        ]);
        assert_eq!(code(&out), 75, "{repo}: {}", stderr(&out));
    }
    // An absolute path inside another clone names the same file of the repository.
    let abs = r.repo("b").join("docs/a.md");
    let out = r.run(&[
        "reserve",
        "--check",
        abs.to_str().unwrap(),
        "--repo",
        r.repo("b").to_str().unwrap(),
    ]);
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    // Another repository does not see them.
    let other = r.out("other");
    std::fs::create_dir_all(&other).unwrap();
    git(&other, &["init", "-q"]);
    let out = r.run(&[
        "reserve",
        "--check",
        "docs",
        "--repo",
        other.to_str().unwrap(),
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    std::fs::write(&go, "").unwrap();
    assert!(holder.wait().unwrap().success());
}

#[test]
fn bad_paths_and_places_are_refused_with_125() {
    let r = Repos::new();
    let outside = r.out("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, r.repo("a").join("escape")).unwrap();
    let marker = r.out("ran");
    let touch = format!("touch '{}'", marker.display());
    for (path, why) in [
        ("../b/src", "'..'"),
        ("/etc/passwd", "outside"),
        ("escape/x", "outside"),
        ("src/a**", "'**'"),
    ] {
        let out = r.run(&["reserve", path, "--", "sh", "-c", &touch]);
        assert_eq!(code(&out), 125, "{path}: {}", stderr(&out));
        let msg = stderr(&out);
        assert!(msg.contains(path) && msg.contains(why), "{path}: {msg}");
        assert_eq!(msg.lines().count(), 1, "{msg}");
        let out = r.run(&["reserve", "--check", path]);
        assert_eq!(code(&out), 125, "{path}: {}", stderr(&out));
    }
    assert!(
        !marker.exists(),
        "a command ran under a refused reservation"
    );
    let out = r.run(&[
        "reserve",
        "src",
        "--repo",
        outside.to_str().unwrap(),
        "--",
        "true",
    ]);
    assert_eq!(code(&out), 125, "{}", stderr(&out));
    let out = r.run(&["reserve", "src"]);
    assert_eq!(code(&out), 125, "no command: {}", stderr(&out));
    let out = r.run(&["reservations", "break", "12345"]);
    assert_eq!(code(&out), 125, "{}", stderr(&out));
}
