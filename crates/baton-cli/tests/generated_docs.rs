#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! Shell completions and man pages: produced by the real binary, and
//! mentioning every subcommand. The list of subcommands comes from clap's
//! own definition of the command line (`baton::command()`), so a new
//! subcommand is covered without touching this file.

use crate::common;

use std::collections::BTreeSet;
use std::fs;

use common::{code, stderr, stdout, Env};

/// Every visible command as its path of names: `[]` is `baton` itself,
/// `["lock", "status"]` is `baton lock status`.
fn commands() -> Vec<Vec<String>> {
    fn walk(cmd: &clap::Command, path: Vec<String>, out: &mut Vec<Vec<String>>) {
        out.push(path.clone());
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            let mut p = path.clone();
            p.push(sub.get_name().to_string());
            walk(sub, p, out);
        }
    }
    let mut out = Vec::new();
    walk(&baton::command(), Vec::new(), &mut out);
    // A sanity check on the walk itself, so an empty list cannot pass.
    assert!(out.len() > 20, "{out:?}");
    assert!(out.contains(&vec!["lock".to_string(), "status".to_string()]));
    out
}

fn hidden() -> Vec<String> {
    baton::command()
        .get_subcommands()
        .filter(|s| s.is_hide_set())
        .map(|s| s.get_name().to_string())
        .collect()
}

#[test]
fn completions_are_produced_for_every_shell_and_mention_every_subcommand() {
    let env = Env::new();
    let names: BTreeSet<String> = commands().into_iter().flatten().collect();
    let hidden = hidden();
    assert!(
        !hidden.is_empty(),
        "expected the internal __hold subcommand"
    );
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = env.run(&["completions", shell]);
        assert_eq!(code(&out), 0, "{shell}: {}", stderr(&out));
        assert!(stderr(&out).is_empty(), "{shell}: {}", stderr(&out));
        let script = stdout(&out);
        for name in &names {
            assert!(
                script.contains(name.as_str()),
                "{shell} completion does not mention '{name}'"
            );
        }
        for name in &hidden {
            assert!(
                !script.contains(name.as_str()),
                "{shell} completion offers the hidden '{name}'"
            );
        }
    }
    // Neither command needs or makes a baton dir.
    assert!(!env.dir.exists());
}

/// PowerShell cannot run here (`pwsh` is not installed, on purpose: the
/// check is of what the generator gives): the script registers a native
/// completer for `baton` (and `baton.exe`'s name, `baton`), its braces,
/// parentheses and quotes balance, and it offers each subcommand with its
/// help text as a completion result.
#[test]
fn the_powershell_completion_is_a_whole_script_for_baton() {
    let on_path = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("pwsh").exists()));
    assert!(
        !on_path,
        "pwsh is installed: run the script with it instead"
    );
    let env = Env::new();
    let out = env.run(&["completions", "powershell"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let script = stdout(&out);
    assert!(
        script.contains("Register-ArgumentCompleter -Native -CommandName 'baton'"),
        "{script}"
    );
    // Outside single-quoted strings (PowerShell doubles a quote inside one).
    let mut depth = [0i64; 2];
    let mut quoted = false;
    for c in script.chars() {
        match c {
            '\'' => quoted = !quoted,
            '{' if !quoted => depth[0] += 1,
            '}' if !quoted => depth[0] -= 1,
            '(' if !quoted => depth[1] += 1,
            ')' if !quoted => depth[1] -= 1,
            _ => {}
        }
        assert!(
            depth[0] >= 0 && depth[1] >= 0,
            "a closing bracket opens nothing"
        );
    }
    assert!(!quoted, "an unterminated quote");
    assert_eq!(depth, [0, 0], "unbalanced braces or parentheses");
    for sub in ["run", "lock", "state", "group", "doctor"] {
        assert!(
            script.contains(&format!("[CompletionResult]::new('{sub}', '{sub}'")),
            "no completion result for {sub}"
        );
    }
}

#[test]
fn the_bash_completion_is_valid_bash_and_completes_subcommands() {
    let env = Env::new();
    let out = env.run(&["completions", "bash"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let script = env.path("baton.bash");
    fs::write(&script, &out.stdout).unwrap();
    // Source it and ask for the completions of `baton lock st`, as bash would.
    let probe = format!(
        "source '{}'; COMP_WORDS=(baton lock st); COMP_CWORD=2; _baton baton st lock; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        script.display()
    );
    let done = std::process::Command::new("bash")
        .args(["--norc", "--noprofile", "-c", &probe])
        .output()
        .unwrap();
    assert!(done.status.success(), "{}", stderr(&done));
    let offered: Vec<String> = stdout(&done).lines().map(str::to_string).collect();
    assert_eq!(offered, ["status"], "{}", stderr(&done));
}

#[test]
fn man_pages_are_written_for_every_subcommand() {
    let env = Env::new();
    let dir = env.path("man/man1");
    let out = env.baton(&["man"]).arg("--dir").arg(&dir).output().unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let want: BTreeSet<String> = commands()
        .iter()
        .map(|p| {
            let mut name = String::from("baton");
            for part in p {
                name.push('-');
                name.push_str(part);
            }
            format!("{name}.1")
        })
        .collect();
    let written: BTreeSet<String> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(written, want);
    // The paths written are printed, one per line.
    let printed: BTreeSet<String> = stdout(&out)
        .lines()
        .map(|l| {
            let p = std::path::Path::new(l);
            assert_eq!(p.parent(), Some(dir.as_path()), "{l}");
            p.file_name().unwrap().to_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(printed, want);
    for path in commands() {
        let page_name = std::iter::once("baton")
            .chain(path.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join("-");
        // roff escapes hyphens (`init\-attributes`).
        let page = fs::read_to_string(dir.join(format!("{page_name}.1")))
            .unwrap()
            .replace("\\-", "-");
        assert!(
            page.contains(&format!(".TH {page_name} 1")),
            "{page_name}: {page}"
        );
        // Each page lists the subcommands below it.
        let cmd = path.iter().fold(baton::command(), |c, name| {
            c.find_subcommand(name).unwrap().clone()
        });
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            if sub.get_name() == "help" {
                continue;
            }
            assert!(
                page.contains(sub.get_name()),
                "{page_name}.1 does not mention '{}'",
                sub.get_name()
            );
        }
    }
    let root = fs::read_to_string(dir.join("baton.1")).unwrap();
    assert!(
        !root.contains("__hold"),
        "baton.1 documents the hidden __hold"
    );
}

#[test]
fn man_without_a_directory_is_a_one_line_error() {
    let env = Env::new();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .arg("man")
        .env_clear()
        .current_dir(env.tmp.path())
        .output()
        .unwrap();
    assert_eq!(code(&out), 125);
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("baton: man needs --dir DIR"), "{err}");
}

/// Issue 26: help that a new user reads says what baton does today: no
/// "(not yet to groups)" on `--backend` (groups work on PostgreSQL), no
/// "(being built)", and `lock acquire --max` does not talk about `--group`,
/// an option `lock acquire` does not have.
#[test]
fn help_makes_no_stale_claims() {
    let env = Env::new();
    let mut seen = 0;
    for path in commands() {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let out = env.run(&args);
        assert_eq!(code(&out), 0, "{args:?}: {}", stderr(&out));
        let help = stdout(&out);
        for stale in ["not yet", "being built"] {
            assert!(
                !help.contains(stale),
                "`baton {}` says {stale:?}:\n{help}",
                args.join(" ")
            );
        }
        if path == ["lock", "acquire"] {
            seen += 1;
            let max = help
                .split("--max <N>")
                .nth(1)
                .and_then(|rest| rest.split("\n  -").next())
                .unwrap_or_default();
            assert!(!max.is_empty(), "{help}");
            assert!(!max.contains("--group"), "lock acquire --max: {max}");
        }
    }
    assert_eq!(seen, 1);
    let readme = include_str!("../../../README.md");
    assert!(
        !readme.contains("being built"),
        "README says \"being built\""
    );
}

/// The page of the book that holds every command's help.
const COMMAND_REFERENCE: &str = "docs/src/reference/commands.md";

/// The command reference of the book, made from the real binary: for every
/// visible command (the walk the man pages and completions use), a heading
/// and exactly what `baton ... --help` prints.
fn command_reference() -> String {
    let mut page = String::from(
        "# Commands\n\n\
         <!-- Generated from `baton ... --help` by crates/baton-cli/tests/generated_docs.rs:\n     \
         do not edit. After changing a command's help, regenerate this page with\n     \
         BATON_BLESS=1 cargo nextest run -p baton command_reference -->\n\n\
         Every command and every flag, exactly as `baton <command> --help` prints\n\
         them (the same definitions give the man pages, `baton man`, and the shell\n\
         completions, `baton completions`). What the exit codes mean:\n\
         [exit codes](exit-codes.md); the environment: [environment\n\
         variables](environment.md).\n",
    );
    let paths = commands();
    page.push_str("\n## Contents\n\n");
    for path in &paths {
        let name = std::iter::once("baton")
            .chain(path.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ");
        let indent = "  ".repeat(path.len().saturating_sub(1));
        page.push_str(&format!(
            "{indent}- [{name}](#{})\n",
            name.replace(' ', "-")
        ));
    }
    for path in &paths {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
            .args(&args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "{args:?}: {}", stderr(&out));
        let help = stdout(&out);
        assert!(!help.contains("```"), "{args:?}: a fence in the help");
        let name = std::iter::once("baton")
            .chain(path.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ");
        page.push_str(&format!(
            "\n## {name}\n\n```text\n{}\n```\n",
            help.trim_end()
        ));
    }
    page
}

/// The book's command reference is what the binary prints (issue 38): a
/// changed help text fails here until the page is regenerated, with
/// `BATON_BLESS=1`, which writes the page instead.
#[test]
fn command_reference_in_the_book_is_generated_from_the_binary() {
    let want = command_reference();
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(COMMAND_REFERENCE);
    if std::env::var_os("BATON_BLESS").is_some() {
        fs::write(&file, &want).unwrap();
    }
    let have = fs::read_to_string(&file).unwrap_or_default();
    // Every command has its section (a sanity check on the generator).
    for path in commands() {
        let name = std::iter::once("baton")
            .chain(path.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ");
        assert!(want.contains(&format!("\n## {name}\n")), "{name}");
    }
    assert!(
        have == want,
        "{COMMAND_REFERENCE} is not what the binary prints: regenerate it with \
         BATON_BLESS=1 cargo nextest run -p baton command_reference"
    );
}
