#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! Every shell example of the documentation runs (issues 26 and 38): each
//! ```` ```sh ```` block of README.md and of every page of the book
//! (`docs/src/**/*.md`), as one bash script with `set -e`, in order, one
//! page at a time, each page in a fresh temporary git repository (with an
//! origin, and the example scripts the pages name, such as `./deploy.sh`, as
//! small stubs) and a fresh temporary baton dir, with the `baton` just built
//! first on PATH and HOME, git's configuration and `XDG_RUNTIME_DIR` inside
//! the test's temp dir.
//!
//! A block that cannot run here says so on the line before its fence:
//! `<!-- readme-test: skip: REASON -->` (a PostgreSQL server elsewhere, a
//! service in the foreground, root). Their number is bounded by
//! [`MAX_SKIPPED`] and they are listed on every run. Two rules of the
//! harness, not of the pages: a command with `--follow` runs for
//! [`FOLLOW_SECS`] seconds and counts as a success if it was still following
//! then; `baton doctor` may exit 1 (warnings about this machine, not
//! failures). Both live in a `baton` wrapper first on PATH, which otherwise
//! `exec`s the real binary, so `$!` of `baton ... &` is baton's own pid.
//!
//! A failure names the file and line of the command that failed, and shows
//! the block's output.

use crate::common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{stderr, stdout};

/// The most blocks that may be skipped, over README.md and the whole book.
const MAX_SKIPPED: usize = 24;

/// How long a `--follow` command runs before it is stopped.
const FOLLOW_SECS: u32 = 3;

/// The marker that skips the next block.
const SKIP: &str = "<!-- readme-test: skip:";

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// One ```` ```sh ```` block.
struct Block {
    /// The page's line of its opening fence (1-based).
    fence: usize,
    /// Its lines.
    lines: Vec<String>,
    /// Why it does not run, if it does not.
    skip: Option<String>,
}

/// The `sh` blocks of one page (`name` is its path, for messages). A fence
/// may be indented (a block inside a list item); its lines are taken with
/// that indentation removed.
fn blocks(name: &str, text: &str) -> Vec<Block> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let mut in_other = false;
    while i < lines.len() {
        let line = lines[i].trim();
        if in_other {
            // Inside another language's block: an sh fence shown there (a
            // Markdown example) is not a block; a bare fence ends it.
            in_other = line != "```";
            i += 1;
            continue;
        }
        if line.starts_with("```") && line != "```sh" {
            in_other = true;
            i += 1;
            continue;
        }
        if line != "```sh" {
            i += 1;
            continue;
        }
        let indent = lines[i].len() - lines[i].trim_start().len();
        let fence = i + 1;
        let skip = i
            .checked_sub(1)
            .map(|p| lines[p].trim())
            .and_then(|l| l.strip_prefix(SKIP))
            .map(|r| r.trim_end_matches("-->").trim().to_string());
        if let Some(reason) = &skip {
            assert!(
                !reason.is_empty(),
                "{name}:{}: a skip marker must say why",
                fence - 1
            );
        }
        let mut body = Vec::new();
        i += 1;
        while i < lines.len() && lines[i].trim() != "```" {
            let l = lines[i];
            let cut = l.len() - l.trim_start().len();
            body.push(l[cut.min(indent)..].to_string());
            i += 1;
        }
        assert!(i < lines.len(), "{name}:{fence}: block never closed");
        out.push(Block {
            fence,
            lines: body,
            skip,
        });
        i += 1;
    }
    out
}

/// The pages: README.md, then every `.md` under `docs/src`, as paths
/// relative to the repository's root, sorted.
fn pages() -> Vec<String> {
    fn walk(dir: &Path, rel: &str, out: &mut Vec<String>) {
        let mut entries: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for p in entries {
            let name = p.file_name().unwrap().to_str().unwrap().to_string();
            let rel = format!("{rel}/{name}");
            if p.is_dir() {
                walk(&p, &rel, out);
            } else if name.ends_with(".md") {
                out.push(rel);
            }
        }
    }
    let mut out = vec!["README.md".to_string()];
    walk(&root().join("docs/src"), "docs/src", &mut out);
    assert!(out.len() > 20, "found only {out:?}");
    out
}

/// The world the examples of one page run in.
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
        // baton itself, through the harness's two rules (see the module's
        // documentation); otherwise the real binary replaces the wrapper.
        let real = env!("CARGO_BIN_EXE_baton");
        write_exe(
            &bin.join("baton"),
            &format!(
                r#"#!/bin/bash
case " $* " in
  *" --follow "*) rc=0; timeout -s INT {FOLLOW_SECS} '{real}' "$@" || rc=$?; [ $rc -ne 124 ] || rc=0; exit $rc ;;
  *" doctor"*) rc=0; '{real}' "$@" || rc=$?; [ $rc -ne 1 ] || rc=0; exit $rc ;;
  *) exec '{real}' "$@" ;;
esac
"#
            ),
        );
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
        let mut path = vec![self.bin.clone()];
        path.extend(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        ));
        let mut c = Command::new("bash");
        c.env_clear()
            .env("PATH", std::env::join_paths(path).unwrap())
            .env("HOME", self.tmp.path().join("home"))
            .env("TMPDIR", self.tmp.path())
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
const PRELUDE: &str = r#"set -e
trap 'echo "readme-test: $PAGE:$((PAGE_FENCE + LINENO - PRELUDE_LINES)) failed (exit $?)" >&2' ERR
"#;

/// Runs every block of `page` that is not skipped, in one world, and
/// returns the failures (one message each) and how many blocks ran.
fn run_page(page: &str) -> (Vec<String>, usize) {
    let text = fs::read_to_string(root().join(page)).unwrap();
    let runnable: Vec<Block> = blocks(page, &text)
        .into_iter()
        .filter(|b| b.skip.is_none())
        .collect();
    if runnable.is_empty() {
        return (Vec::new(), 0);
    }
    let world = World::new();
    let prelude_lines = PRELUDE.lines().count();
    let mut failures = Vec::new();
    for b in &runnable {
        let script = format!("{PRELUDE}{}\n", b.lines.join("\n"));
        let out = world
            .command(&world.repo)
            .env("PAGE", page)
            .env("PAGE_FENCE", b.fence.to_string())
            .env("PRELUDE_LINES", prelude_lines.to_string())
            .args(["-c", &script])
            .output()
            .unwrap();
        if !out.status.success() {
            let err = stderr(&out);
            let at = err
                .lines()
                .rev()
                .find_map(|l| l.strip_prefix("readme-test: "))
                .map(str::to_string)
                .unwrap_or_else(|| format!("the block at {page}:{} failed", b.fence));
            failures.push(format!(
                "{at} ({})\n--- stdout\n{}--- stderr\n{err}",
                out.status,
                stdout(&out)
            ));
        }
    }
    (failures, runnable.len())
}

/// Runs the blocks of every page whose path starts with one of `prefixes`
/// (and of no page matched by `except`), at least `least` blocks, and fails
/// naming each failure.
fn run_pages(prefixes: &[&str], except: &[&str], least: usize) {
    let chosen: Vec<String> = pages()
        .into_iter()
        .filter(|p| prefixes.iter().any(|x| p.starts_with(x)))
        .filter(|p| !except.iter().any(|x| p.starts_with(x)))
        .collect();
    assert!(!chosen.is_empty(), "no page under {prefixes:?}");
    let mut failures = Vec::new();
    let mut ran = 0;
    for page in &chosen {
        let (f, n) = run_page(page);
        failures.extend(f);
        ran += n;
    }
    eprintln!("readme-test: ran {ran} blocks of {chosen:?}");
    assert!(ran >= least, "ran only {ran} blocks of {chosen:?}");
    assert!(
        failures.is_empty(),
        "{} of {ran} blocks failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn every_shell_example_in_the_readme_runs() {
    run_pages(&["README.md"], &[], 1);
}

#[test]
fn every_shell_example_of_the_book_outside_guides_and_concepts_runs() {
    run_pages(
        &["docs/src/"],
        &["docs/src/guides/", "docs/src/concepts/"],
        3,
    );
}

#[test]
fn every_shell_example_of_the_guides_runs() {
    run_pages(&["docs/src/guides/"], &[], 6);
}

/// The concepts, in two halves by name (each test has a world per page,
/// and the suite stops a test after two minutes): every page is in exactly
/// one of them.
const CONCEPTS_SECOND_HALF: [&str; 4] = [
    "docs/src/concepts/p",
    "docs/src/concepts/r",
    "docs/src/concepts/s",
    "docs/src/concepts/w",
];

#[test]
fn every_shell_example_of_the_concepts_a_to_o_runs() {
    run_pages(&["docs/src/concepts/"], &CONCEPTS_SECOND_HALF, 4);
}

#[test]
fn every_shell_example_of_the_concepts_p_to_z_runs() {
    run_pages(&CONCEPTS_SECOND_HALF, &[], 3);
}

/// Skips are few, each says why, and every one is listed.
#[test]
fn few_examples_are_skipped_and_each_says_why() {
    let mut skipped = Vec::new();
    let mut total = 0;
    for page in pages() {
        let text = fs::read_to_string(root().join(&page)).unwrap();
        for b in blocks(&page, &text) {
            total += 1;
            if let Some(reason) = b.skip {
                skipped.push(format!("{page}:{}: {reason}", b.fence));
            }
        }
    }
    for s in &skipped {
        eprintln!("readme-test: skipped {s}");
    }
    assert!(total >= 30, "found only {total} sh blocks");
    assert!(
        skipped.len() <= MAX_SKIPPED,
        "{} blocks skipped, at most {MAX_SKIPPED}:\n{}",
        skipped.len(),
        skipped.join("\n")
    );
}

/// The block finder itself: fences in a list item count, an `sh` fence
/// shown inside a Markdown example does not, and a skip marker names its
/// reason.
#[test]
fn the_block_finder_sees_indented_blocks_and_skips() {
    let text = "a\n\n```sh\necho one\n```\n\n- item\n\n  ```sh\n  echo two\n    echo three\n  ```\n\n```markdown\n```sh\nnot a block\n```\n\n<!-- readme-test: skip: needs root -->\n```sh\nsudo true\n```\n";
    let found = blocks("t.md", text);
    assert_eq!(
        found.len(),
        3,
        "{:?}",
        found.iter().map(|b| &b.lines).collect::<Vec<_>>()
    );
    assert_eq!(found[0].lines, ["echo one"]);
    assert_eq!(found[1].lines, ["echo two", "  echo three"]);
    assert_eq!(found[2].skip.as_deref(), Some("needs root"));
}
