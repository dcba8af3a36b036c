#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! Every shell example in the README runs (issue 26): each ```` ```sh ````
//! block, as one bash script with `set -e`, in order, in one temporary git
//! repository (with an origin, and the example scripts the README names,
//! such as `./deploy.sh`, as small stubs) and one temporary baton dir, with
//! the `baton` just built first on PATH and HOME, git's configuration and
//! `XDG_RUNTIME_DIR` inside the test's temp dir.
//!
//! A block that cannot run here says so on the line before its fence:
//! `<!-- readme-test: skip: REASON -->` (a PostgreSQL server, a running
//! service, root). Their number is bounded by [`MAX_SKIPPED`] and they are
//! listed on every run. Two rules of the harness, not of the README: a
//! command with `--follow` runs for [`FOLLOW_SECS`] seconds and counts as a
//! success if it was still following then; `baton doctor` may exit 1
//! (warnings about this machine, not failures).
//!
//! A failure names the README line of the command that failed, and shows
//! the block's output.

use crate::common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{stderr, stdout};

/// The most blocks that may be skipped.
const MAX_SKIPPED: usize = 6;

/// How long a `--follow` command runs before it is stopped.
const FOLLOW_SECS: u32 = 3;

/// The marker that skips the next block.
const SKIP: &str = "<!-- readme-test: skip:";

/// One ```` ```sh ```` block.
struct Block {
    /// The README line of its opening fence (1-based).
    fence: usize,
    /// Its lines.
    lines: Vec<String>,
    /// Why it does not run, if it does not.
    skip: Option<String>,
}

fn blocks(readme: &str) -> Vec<Block> {
    let lines: Vec<&str> = readme.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim_end() != "```sh" {
            i += 1;
            continue;
        }
        let fence = i + 1;
        let skip = i
            .checked_sub(1)
            .map(|p| lines[p].trim())
            .and_then(|l| l.strip_prefix(SKIP))
            .map(|r| r.trim_end_matches("-->").trim().to_string());
        if let Some(reason) = &skip {
            assert!(
                !reason.is_empty(),
                "README.md:{}: a skip marker must say why",
                fence - 1
            );
        }
        let mut body = Vec::new();
        i += 1;
        while i < lines.len() && lines[i].trim_end() != "```" {
            body.push(lines[i].to_string());
            i += 1;
        }
        assert!(i < lines.len(), "README.md:{fence}: block never closed");
        out.push(Block {
            fence,
            lines: body,
            skip,
        });
        i += 1;
    }
    out
}

/// The world the examples run in.
struct World {
    tmp: tempfile::TempDir,
    repo: PathBuf,
    bin: PathBuf,
}

fn write_exe(path: &Path, body: &str) {
    fs::write(path, body).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
}

impl World {
    fn new() -> World {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        let run = tmp.path().join("run");
        let bin = tmp.path().join("stubs");
        for d in [&home, &run, &bin] {
            fs::create_dir_all(d).unwrap();
        }
        fs::set_permissions(&run, fs::Permissions::from_mode(0o700)).unwrap();
        fs::write(
            home.join(".gitconfig"),
            "[init]\n\tdefaultBranch = main\n[user]\n\tname = Reader\n\temail = reader@example.com\n",
        )
        .unwrap();
        // Programs the examples call that are not baton's business.
        write_exe(&bin.join("python"), "#!/bin/sh\necho \"python $*\"\n");
        let world = World {
            repo: tmp.path().join("repo"),
            bin,
            tmp,
        };
        let remote = world.tmp.path().join("remote.git");
        world.sh(
            world.tmp.path(),
            &format!(
                "git init -q --bare {remote} && git init -q {repo}",
                remote = remote.display(),
                repo = world.repo.display()
            ),
        );
        // The example scripts, committed (a workspace is a checkout of HEAD).
        for name in [
            "deploy.sh",
            "read-cache.sh",
            "agent-step.sh",
            "agent.sh",
            "post.sh",
            "train.sh",
            "step.sh",
        ] {
            write_exe(
                &world.repo.join(name),
                &format!("#!/bin/sh\necho \"{name} $*\"\n"),
            );
        }
        fs::write(world.repo.join("train.py"), "print('training')\n").unwrap();
        fs::write(world.repo.join("prompt.txt"), "fix issue 42\n").unwrap();
        world.sh(
            &world.repo,
            &format!(
                "git add -A && git commit -qm examples && git remote add origin {} && git push -q -u origin main",
                remote.display()
            ),
        );
        world
    }

    fn command(&self, cwd: &Path) -> Command {
        let baton = PathBuf::from(env!("CARGO_BIN_EXE_baton"));
        let mut path = vec![baton.parent().unwrap().to_path_buf(), self.bin.clone()];
        path.extend(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        ));
        let mut c = Command::new("bash");
        c.env_clear()
            .env("PATH", std::env::join_paths(path).unwrap())
            .env("HOME", self.tmp.path().join("home"))
            .env("XDG_RUNTIME_DIR", self.tmp.path().join("run"))
            .env("BATON_DIR", self.tmp.path().join("baton"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("LANG", "C.UTF-8")
            .current_dir(cwd)
            .stdin(Stdio::null());
        c
    }

    fn sh(&self, cwd: &Path, script: &str) {
        let out = self.command(cwd).args(["-c", script]).output().unwrap();
        assert!(out.status.success(), "{script}: {}", stderr(&out));
    }
}

/// What every block's script starts with; the block follows on the next line.
fn prelude() -> String {
    format!(
        r#"set -e
baton() {{
  rc=0
  case " $* " in
    *" --follow "*) timeout -s INT {FOLLOW_SECS} baton "$@" || rc=$?; [ $rc -ne 124 ] || rc=0 ;;
    *" doctor"*) command baton "$@" || rc=$?; [ $rc -ne 1 ] || rc=0 ;;
    *) command baton "$@" || rc=$? ;;
  esac
  return $rc
}}
trap 'echo "readme-test: README.md:$((README_FENCE + LINENO - PRELUDE_LINES)) failed (exit $?)" >&2' ERR
"#
    )
}

#[test]
fn every_shell_example_in_the_readme_runs() {
    let readme = include_str!("../../../README.md");
    let all = blocks(readme);
    assert!(all.len() >= 10, "found only {} sh blocks", all.len());
    let skipped: Vec<&Block> = all.iter().filter(|b| b.skip.is_some()).collect();
    for b in &skipped {
        eprintln!(
            "readme-test: skipped the block at README.md:{}: {}",
            b.fence,
            b.skip.as_deref().unwrap_or_default()
        );
    }
    assert!(
        skipped.len() <= MAX_SKIPPED,
        "{} blocks skipped, at most {MAX_SKIPPED}",
        skipped.len()
    );
    let world = World::new();
    let prelude = prelude();
    let prelude_lines = prelude.lines().count();
    let mut failures = Vec::new();
    let mut ran = 0;
    for b in all.iter().filter(|b| b.skip.is_none()) {
        let script = format!("{prelude}{}\n", b.lines.join("\n"));
        let out = world
            .command(&world.repo)
            .env("README_FENCE", b.fence.to_string())
            .env("PRELUDE_LINES", prelude_lines.to_string())
            .args(["-c", &script])
            .output()
            .unwrap();
        ran += 1;
        if !out.status.success() {
            let err = stderr(&out);
            let at = err
                .lines()
                .rev()
                .find_map(|l| l.strip_prefix("readme-test: "))
                .map(str::to_string)
                .unwrap_or_else(|| format!("the block at README.md:{} failed", b.fence));
            failures.push(format!(
                "{at} ({})\n--- stdout\n{}--- stderr\n{err}",
                out.status,
                stdout(&out)
            ));
        }
    }
    assert!(ran >= 5, "ran only {ran} blocks");
    assert!(
        failures.is_empty(),
        "{} of {ran} README blocks failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
