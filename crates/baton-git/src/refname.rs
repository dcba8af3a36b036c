//! Which branch names a workspace (or a push) may take, and why every ref
//! baton resolves is named in full.
//!
//! git reads a short name through its namespaces in a fixed order: the git
//! dir itself (`HEAD`, `FETCH_HEAD`), `refs/<name>`, `refs/tags/<name>`,
//! `refs/heads/<name>`, `refs/remotes/<name>`, `refs/remotes/<name>/HEAD`.
//! A branch named `origin/main` (`refs/heads/origin/main`) therefore wins
//! over the remote-tracking branch `refs/remotes/origin/main` wherever
//! `origin/main` is written: one job of a shared service given that branch
//! would decide where every later job of its template starts. Two rules
//! close that, each enough on its own for what baton itself writes:
//!
//! - **Full names.** Where baton resolves or moves a ref it means a branch
//!   (`refs/heads/<b>`), a remote-tracking branch (`refs/remotes/<r>/<b>`)
//!   or its own ref (`refs/baton/...`), it writes the full name, so no other
//!   namespace can answer; a start point a service template records is
//!   written so too. A ref a user gives (`--ref`) is still any rev git
//!   takes, as git reads it; every user-given name is passed after
//!   `--end-of-options` (or `--`) where git has it, so it is never an option.
//! - **No shadowing branch names** ([`branch_name_refusal`],
//!   [`check_branch_name`]): a branch baton creates or works on never has a
//!   name another namespace answers to first, nor one that git's own
//!   `check-ref-format --branch` refuses. One rule, called by
//!   [`crate::create`], [`crate::push`], the job service at submission and
//!   the CLI.

use std::path::Path;

use crate::error::GitError;
use crate::git::{self, Repo};

/// First components a branch name may not have: `refs/...` names a ref
/// namespace itself, and `heads/...`, `remotes/...` and `tags/...` are how
/// git's short names reach into those namespaces (`heads/main` is
/// `refs/heads/main`).
pub const RESERVED_BRANCH_PREFIXES: [&str; 4] = ["refs", "heads", "remotes", "tags"];

/// The remote always treated as configured, whether or not the repository
/// has it: the one a workspace's `--fetch`, a push without `--remote` and a
/// service template's start point (`refs/remotes/origin/<branch>`) use.
pub const DEFAULT_REMOTE: &str = "origin";

/// Characters git never takes in a ref name (besides control characters).
const FORBIDDEN: &[char] = &[' ', '~', '^', ':', '?', '*', '[', '\\'];

/// Why `name` is refused as a branch baton makes or works on, or `None` if
/// it is not. Refused: what `git check-ref-format --branch` refuses (empty,
/// `HEAD`, a leading '-', control characters, space, `~^:?*[\`, `..`, `@{`,
/// `@` alone, an empty component, a component starting with '.' or ending
/// with `.lock`, a trailing '.' or '/'); a first component that is one of
/// [`RESERVED_BRANCH_PREFIXES`] followed by more; and a name that is a
/// remote's, or starts with one and '/' (`origin/main`): [`DEFAULT_REMOTE`]
/// and each of `remotes`. Reads nothing: a service checks a submission with
/// it before any git runs ([`check_branch_name`] adds the repository's own
/// remotes and git's own check).
///
/// ```
/// assert!(baton_git::branch_name_refusal("agent/fix-42", &[]).is_none());
/// let why = baton_git::branch_name_refusal("origin/main", &[]).unwrap();
/// assert!(why.contains("refs/remotes/origin/main"), "{why}");
/// assert!(baton_git::branch_name_refusal("upstream/x", &["upstream"]).is_some());
/// assert!(baton_git::branch_name_refusal("refs/heads/x", &[]).is_some());
/// ```
pub fn branch_name_refusal(name: &str, remotes: &[&str]) -> Option<String> {
    if let Some(why) = syntax_refusal(name) {
        return Some(why);
    }
    let first = name.split('/').next().unwrap_or_default();
    if name.contains('/') && RESERVED_BRANCH_PREFIXES.contains(&first) {
        let full = if first == "refs" {
            name.to_string()
        } else {
            format!("refs/{name}")
        };
        return Some(format!(
            "it starts with '{first}/', so git would read it as the ref '{full}', not as the branch 'refs/heads/{name}'"
        ));
    }
    let remote = std::iter::once(DEFAULT_REMOTE)
        .chain(remotes.iter().copied())
        .find(|r| {
            !r.is_empty()
                && name
                    .strip_prefix(r)
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        });
    if let Some(r) = remote {
        return Some(if name == r {
            format!("it is the name of the remote '{r}', which a branch of that name would shadow (git reads '{r}' as refs/heads/{r} before refs/remotes/{r}/HEAD)")
        } else {
            format!("it starts with the name of the remote '{r}': a branch 'refs/heads/{name}' would shadow the remote-tracking branch 'refs/remotes/{name}' wherever '{name}' is written")
        });
    }
    None
}

/// What `git check-ref-format --branch` refuses, without running git.
fn syntax_refusal(name: &str) -> Option<String> {
    let why = if name.is_empty() {
        "it is empty"
    } else if name == "HEAD" {
        "HEAD is not a branch name"
    } else if name.starts_with('-') {
        "it starts with '-' (git would read it as an option)"
    } else if name == "@" {
        "'@' alone is git's name for HEAD"
    } else if name.chars().any(|c| c.is_control()) {
        "it contains a control character"
    } else if let Some(c) = name.chars().find(|c| FORBIDDEN.contains(c)) {
        return Some(format!(
            "it contains {c:?}, which git never takes in a ref name"
        ));
    } else if name.contains("..") {
        "it contains '..'"
    } else if name.contains("@{") {
        "it contains '@{' (git's reflog syntax)"
    } else if name.ends_with('.') {
        "it ends with '.'"
    } else if name.split('/').any(str::is_empty) {
        "it has an empty component (a leading, trailing or doubled '/')"
    } else if name.split('/').any(|c| c.starts_with('.')) {
        "a component starts with '.'"
    } else if name.split('/').any(|c| c.ends_with(".lock")) {
        "a component ends with '.lock'"
    } else {
        return None;
    };
    Some(why.to_string())
}

/// The remotes configured in the repository at `repo` (`git remote`).
pub fn remote_names(repo: &Path) -> Result<Vec<String>, GitError> {
    Ok(git::run(repo, ["remote"])?
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect())
}

/// Checks `name` as a branch of the repository at or above `repo`:
/// [`branch_name_refusal`] with the repository's remotes, then git's own
/// `check-ref-format --branch`. Refused: [`GitError::BadBranchName`]; not
/// a repository: [`GitError::NotARepo`].
pub fn check_branch_name(repo: &Path, name: &str) -> Result<(), GitError> {
    check_branch_in(&Repo::open(repo)?, name)
}

/// [`check_branch_name`] in a repository already open.
pub(crate) fn check_branch_in(repo: &Repo, name: &str) -> Result<(), GitError> {
    let bad = |reason: String| GitError::BadBranchName {
        branch: name.to_string(),
        reason,
    };
    let repo = repo.path.as_path();
    let remotes = remote_names(repo)?;
    let remotes: Vec<&str> = remotes.iter().map(String::as_str).collect();
    if let Some(why) = branch_name_refusal(name, &remotes) {
        return Err(bad(why));
    }
    // The rule above is git's as this version of baton knows it; git's
    // own word is final. Never `@{-N}` here: refused above.
    let (out, _) = git::output(repo, ["check-ref-format", "--branch", name])?;
    if !out.status.success() {
        let said = String::from_utf8_lossy(&out.stderr).trim().to_string();
        return Err(bad(if said.is_empty() {
            "git check-ref-format --branch refuses it".to_string()
        } else {
            format!("git check-ref-format --branch refuses it ({said})")
        }));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_shadow_another_namespace_are_refused() {
        for good in [
            "main",
            "agent/fix-42",
            "feature/x.y",
            "originals",
            "origin-x/main",
            "my/origin/main",
            "refsx/a",
            "tags",
            "heads",
            "v1.2+3",
            "é/ü",
        ] {
            assert_eq!(branch_name_refusal(good, &["upstream"]), None, "{good}");
        }
        for (bad, why) in [
            ("origin/main", "remote 'origin'"),
            ("origin", "remote 'origin'"),
            ("upstream/x", "remote 'upstream'"),
            ("team/fork/main", "remote 'team/fork'"),
            ("refs/heads/main", "'refs/'"),
            ("heads/main", "refs/heads/main"),
            ("remotes/origin/main", "'remotes/'"),
            ("tags/v1", "refs/tags/v1"),
            ("HEAD", "HEAD"),
            ("-f", "'-'"),
            ("--force", "'-'"),
            ("@", "'@'"),
            ("a@{1}", "'@{'"),
            ("@{-1}", "'@{'"),
            ("a..b", "'..'"),
            ("a b", "' '"),
            ("a:b", "':'"),
            ("a~1", "'~'"),
            ("a^", "'^'"),
            ("a*", "'*'"),
            ("a?", "'?'"),
            ("a[b", "'['"),
            ("a\\b", "'\\\\'"),
            ("a\tb", "control"),
            ("a\u{7f}", "control"),
            ("", "empty"),
            ("x.", "ends with '.'"),
            ("a/", "empty component"),
            ("/a", "empty component"),
            ("a//b", "empty component"),
            (".a", "starts with '.'"),
            ("a/.b", "starts with '.'"),
            ("a.lock", ".lock"),
            ("a.lock/b", ".lock"),
        ] {
            let got = branch_name_refusal(bad, &["upstream", "team/fork"]);
            assert!(
                got.as_deref().is_some_and(|g| g.contains(why)),
                "{bad:?}: {got:?}"
            );
        }
    }

    #[test]
    fn a_refused_name_is_shown_on_one_line() {
        let e = GitError::BadBranchName {
            branch: "main\nx\t".into(),
            reason: "it contains a control character".into(),
        };
        assert_eq!(
            e.to_string(),
            "invalid branch name 'main\\nx\\t': it contains a control character"
        );
    }

    #[test]
    #[cfg_attr(windows, ignore = "runs git: the wine test run has no Git for Windows")]
    fn the_rule_refuses_at_least_what_git_refuses() {
        // Every name the rule takes, git takes too (git's word is final in
        // check_branch_name; this keeps the rule from promising more).
        let taken = [
            "main",
            "agent/fix-42",
            "é/ü",
            "a.b/c",
            "x+y",
            "a@b",
            "a{b}",
            "a!b",
        ];
        for name in taken {
            assert_eq!(branch_name_refusal(name, &[]), None, "{name}");
            let (out, _) =
                git::output(Path::new("/"), ["check-ref-format", "--branch", name]).unwrap();
            assert!(out.status.success(), "git refuses {name:?}: {out:?}");
        }
    }
}
