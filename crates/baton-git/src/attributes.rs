//! `baton git init-attributes`: mark files whose lines are independent
//! records (`*.jsonl`) `merge=union` in `.gitattributes`, so that agents
//! appending to them concurrently never meet a merge conflict there, and
//! optionally commit the change.
//!
//! The file is replaced atomically (temp file, flush, rename), so a reader
//! sees the old or the new content. With [`AttributesRequest::commit`] the
//! whole change (read, write, `git add`, `git commit --only`) runs under the
//! repository's lock: two such commands on one repository never interleave,
//! and only `.gitattributes` is committed, whatever else is staged.

use std::fs;
use std::path::{Path, PathBuf};

use baton_fs::IoResultExt;
use baton_lock::{new_run_id, WaitPolicy};

use crate::error::GitError;
use crate::git::{self, Repo, DEFAULT_GIT_LOCK_WAIT};

/// The message of the commit [`init_attributes`] makes when asked to.
pub const ATTRIBUTES_COMMIT_MESSAGE: &str =
    "Merge line-record files as a union of lines (baton git init-attributes)";

/// What [`init_attributes`] is to do.
#[derive(Clone, Debug)]
pub struct AttributesRequest {
    /// A path in the repository.
    pub repo: PathBuf,
    /// Patterns to mark (default [`DEFAULT_UNION_PATTERN`]).
    pub patterns: Vec<String>,
    /// Commit `.gitattributes` (only it) when it differs from `HEAD`, with
    /// [`ATTRIBUTES_COMMIT_MESSAGE`] and the patterns added in the body.
    pub commit: bool,
    /// How long to wait for the repository's lock (with `commit`).
    pub lock_wait: WaitPolicy,
}

impl AttributesRequest {
    /// The default patterns in `repo`, not committed.
    pub fn new(repo: impl Into<PathBuf>) -> AttributesRequest {
        AttributesRequest {
            repo: repo.into(),
            patterns: Vec::new(),
            commit: false,
            lock_wait: WaitPolicy::AtMost(DEFAULT_GIT_LOCK_WAIT),
        }
    }
}

/// The pattern `init_attributes` marks `merge=union` when given none: JSONL
/// files, so that concurrent appends merge cleanly.
pub const DEFAULT_UNION_PATTERN: &str = "*.jsonl";

/// What [`init_attributes`] did to `.gitattributes`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttributesReport {
    /// The `.gitattributes` file at the top of the work tree.
    pub path: PathBuf,
    /// The lines added (`PATTERN merge=union`).
    pub added: Vec<String>,
    /// The lines that were there already.
    pub present: Vec<String>,
    /// The commit made ([`AttributesRequest::commit`], when the file
    /// differed from `HEAD`).
    pub committed: Option<String>,
}

/// Adds `PATTERN merge=union` to the work tree's `.gitattributes` for each
/// pattern (default [`DEFAULT_UNION_PATTERN`]) not marked so already, and
/// commits the file if asked. Idempotent; a bad pattern (empty, with
/// whitespace, a comment or a negation, which `.gitattributes` does not
/// allow) changes nothing.
///
/// ```no_run
/// let mut req = baton_git::AttributesRequest::new(".");
/// req.commit = true;
/// let report = baton_git::init_attributes(&req)?;
/// println!("{:?} in {:?}", report.committed, report.path);
/// # Ok::<(), baton_git::GitError>(())
/// ```
pub fn init_attributes(req: &AttributesRequest) -> Result<AttributesReport, GitError> {
    let defaults = [DEFAULT_UNION_PATTERN.to_string()];
    let patterns = if req.patterns.is_empty() {
        &defaults[..]
    } else {
        &req.patterns[..]
    };
    for p in patterns {
        if p.is_empty() || p.chars().any(char::is_whitespace) || p.starts_with(['#', '!']) {
            return Err(GitError::Invalid(format!(
                "invalid --pattern {p:?}: a .gitattributes pattern is not empty, has no whitespace and does not start with '#' or '!'"
            )));
        }
    }
    let repo = Repo::open(&req.repo)?;
    let top = repo
        .toplevel
        .clone()
        .ok_or_else(|| GitError::Invalid(format!("'{}' has no work tree", repo.path.display())))?;
    // Committing: the whole read-modify-write-commit under the lock.
    let guard = if req.commit {
        let wait = git::deadline(req.lock_wait);
        Some(repo.lock(wait, "git commit .gitattributes", &new_run_id())?)
    } else {
        None
    };
    let mut report = write_lines(&top, patterns)?;
    if req.commit {
        report.committed =
            commit(&top, patterns).map_err(|source| GitError::AttributesNotCommitted {
                path: report.path.clone(),
                source: Box::new(source),
            })?;
    }
    drop(guard);
    Ok(report)
}

/// Adds the lines `.gitattributes` at `top` lacks.
fn write_lines(top: &Path, patterns: &[String]) -> Result<AttributesReport, GitError> {
    let path = top.join(".gitattributes");
    let current = match fs::read_to_string(&path) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).context("cannot read", &path).map_err(Into::into),
    };
    let mut report = AttributesReport {
        path,
        added: Vec::new(),
        present: Vec::new(),
        committed: None,
    };
    let mut next = current.clone();
    for p in patterns {
        let line = format!("{p} merge=union");
        let there = next
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == [p.as_str(), "merge=union"]);
        if there {
            if !report.present.contains(&line) {
                report.present.push(line);
            }
            continue;
        }
        if !next.is_empty() && !next.ends_with('\n') {
            next.push('\n');
        }
        next.push_str(&line);
        next.push('\n');
        report.added.push(line);
    }
    if next != current {
        // Flushed before the rename, as before; the directory is not: losing
        // the lines to a power loss only means they are added again next time.
        baton_fs::write_atomic(&report.path, next.as_bytes(), baton_fs::Durability::Data)
            .map_err(baton_fs::PathError::from)?;
    }
    Ok(report)
}

/// Commits `.gitattributes` alone (`--only`: what else is staged stays
/// staged, uncommitted) if it differs from `HEAD`; returns the commit.
fn commit(top: &Path, patterns: &[String]) -> Result<Option<String>, GitError> {
    let file = ".gitattributes";
    let changed = git::run(
        top,
        ["status", "--porcelain", "--untracked-files=all", "--", file],
    )?;
    if changed.is_empty() {
        return Ok(None);
    }
    let body = patterns
        .iter()
        .map(|p| format!("{p} merge=union"))
        .collect::<Vec<_>>()
        .join("\n");
    git::run(top, ["add", "--", file])?;
    git::run(
        top,
        [
            "commit",
            "--quiet",
            "--only",
            "-m",
            ATTRIBUTES_COMMIT_MESSAGE,
            "-m",
            body.as_str(),
            "--",
            file,
        ],
    )?;
    git::run(top, ["rev-parse", "--verify", "HEAD"]).map(Some)
}
