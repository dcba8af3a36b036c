//! Isolated workspaces: one checkout per run, created and removed without
//! racing other runs on the repository's shared metadata.
//!
//! Only the git commands that write shared metadata run under the
//! repository's lock: `clone --local` (reads the base while others may write
//! it), `worktree add --no-checkout` and `worktree prune` (`.git/worktrees/`,
//! `.git/config`, branch refs) and `fetch` into the base. Checking files out
//! touches only the new workspace and runs outside the lock, so creations on
//! one repository overlap as much as git allows, and creations on different
//! repositories never wait for each other.
//!
//! A workspace is locked (`workspace/<id>` in the caller's baton dir) while it
//! is created and while it is removed, so gc never removes one that is still
//! being made, and `--git-lock-wait` is one deadline for every lock an
//! operation takes. A clone workspace on a branch keeps its work when it goes:
//! commits that exist nowhere else are fetched back into the base's branch
//! first (where a worktree would have left them), and if that is impossible
//! the removal is refused with the ways to keep them.

use std::collections::HashSet;
use std::fs;
use std::path::{Component, Path};
use std::time::SystemTime;

use baton_lock::{new_run_id, BatonDir, Liveness, ProcessIdentity, WaitPolicy};

use crate::branch::{self, Start};
use crate::error::GitError;
use crate::git::{self, commit_of, Repo};
use crate::record::{
    lock_workspace, validate_id, Listing, Strategy, UnreadableRecord, Workspace, WorkspaceInfo,
};
use crate::registry;
use crate::remote::{resolve_url, RemoteCall};
use crate::remove::{remove, remove_dir};
use crate::request::WorkspaceRequest;
use baton_fs::IoResultExt;

/// How often a `clone --local` that met an object being written in the
/// base is tried (see `populate`).
const CLONE_TRIES: u32 = 5;

/// Creates a workspace and records it in the registry.
///
/// The workspace is locked while it is made (gc leaves it alone); if the
/// creation fails, its directory and record are removed again.
///
/// ```no_run
/// use baton_git::{create, Strategy, WorkspaceRequest};
/// let dir = baton_lock::BatonDir::resolve(None)?;
/// let mut req = WorkspaceRequest::new("/src/project");
/// req.strategy = Strategy::Worktree;
/// req.branch = Some("agent/fix-42".into());
/// let ws = create(&dir, &req)?;
/// println!("{} (run {})", ws.path.display(), ws.run_id);
/// # Ok::<(), baton_git::GitError>(())
/// ```
pub fn create(dir: &BatonDir, req: &WorkspaceRequest) -> Result<Workspace, GitError> {
    let wait = git::deadline(req.git_lock_wait);
    let run_id = req.run_id.clone().unwrap_or_else(new_run_id);
    let id = req.id.clone().unwrap_or_else(|| run_id.clone());
    validate_id(&id)?;
    if req.reset_branch && (req.reference.is_none() || req.branch.is_none()) {
        return Err(GitError::Invalid(
            "--reset-branch needs --ref (where the branch starts over) and --branch".into(),
        ));
    }
    let repo = Repo::open(&req.repo)?;
    if let Some(b) = &req.branch {
        // Never a name another namespace answers to first (`origin/main`
        // would shadow the remote-tracking branch): refname.rs.
        crate::refname::check_branch_in(&repo, b)?;
    }
    if req.fetch {
        fetch_base(&repo, req, wait, &run_id)?;
    }
    // Checked now, to refuse before anything is made; decided again under
    // the repository's lock (`claim`), where a reset happens.
    let Start {
        reference, commit, ..
    } = branch::start_point(&repo, req)?;
    let (root, chosen) = crate::root::choose(dir, &repo, req.root.as_deref())?;
    let name = if id == run_id {
        id.clone()
    } else {
        format!("{id}-{run_id}")
    };
    let mut ws = Workspace {
        id: id.clone(),
        path: root.join(name),
        root: chosen.then_some(root),
        strategy: req.strategy,
        base_repo: repo.path.clone(),
        base_git_dir: repo.common_dir.clone(),
        reference,
        commit,
        branch: req.branch.clone(),
        owner: req.owner.clone().unwrap_or_else(ProcessIdentity::current),
        run_id,
        created_at: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
        abandoned_ref: None,
        abandoned_commit: None,
    };
    if let Some(branch) = &ws.branch {
        clean_stale_for_branch(dir, &ws, branch, wait)?;
    }
    // Locked until complete, so gc and remove leave it alone meanwhile; then
    // recorded: whatever happens from here on, gc can find it.
    let guard = lock_workspace(dir, &ws.id, wait, "create workspace", &ws.run_id)?;
    // Marked until complete: if this process is killed meanwhile, gc
    // removes the half-made workspace whoever its owner is.
    registry::mark_creating(dir, &ws.id)?;
    if let Err(e) = claim(dir, &repo, req, &mut ws, wait) {
        registry::unmark_creating(dir, &ws.id);
        return Err(e);
    }
    let made = populate(&repo, &ws, req, wait);
    if made.is_err() {
        discard(dir, &ws, wait);
    }
    registry::unmark_creating(dir, &ws.id);
    drop(guard);
    made.map(|()| ws)
}

/// Records the workspace. On a branch, under the repository's lock: the
/// start is decided again there (the branch may have moved since it was
/// first checked), and with [`WorkspaceRequest::reset_branch`] the branch is
/// refused if another live workspace holds it, else reset; the record then
/// makes this workspace its holder before the lock is let go, so of two
/// resets of one branch exactly one proceeds.
fn claim(
    dir: &BatonDir,
    repo: &Repo,
    req: &WorkspaceRequest,
    ws: &mut Workspace,
    wait: WaitPolicy,
) -> Result<(), GitError> {
    let Some(name) = ws.branch.clone() else {
        return registry::insert(dir, ws);
    };
    let guard = repo.lock(wait, "claim branch", &ws.run_id)?;
    let mut start = branch::start_point(repo, req)?;
    if req.reset_branch {
        if let Some(held) = branch::holder(dir, repo, &name, &ws.id)? {
            return Err(held);
        }
        branch::reset(repo, &name, &mut start, &ws.run_id)?;
    }
    ws.reference = start.reference;
    ws.commit = start.commit;
    if let Some((kept, old)) = start.abandoned {
        ws.abandoned_ref = Some(kept);
        ws.abandoned_commit = Some(old);
    }
    registry::insert(dir, ws)?;
    drop(guard);
    Ok(())
}

/// Cleans up after a failed creation: the directory, a worktree's entry in
/// the base (best effort: every worktree creation prunes first anyway), and
/// the record, unless the directory could not be removed (then gc finds it
/// by its record).
fn discard(dir: &BatonDir, ws: &Workspace, wait: WaitPolicy) {
    if !crate::root::may_delete(dir, ws) || remove_dir(ws).is_err() {
        return;
    }
    if ws.strategy == Strategy::Worktree {
        if let Ok(repo) = Repo::open(&ws.base_repo) {
            let _ = repo.run_locked(wait, &ws.run_id, &["worktree", "prune"]);
        }
    }
    let _ = registry::delete(dir, &ws.id);
}

fn populate(
    repo: &Repo,
    ws: &Workspace,
    req: &WorkspaceRequest,
    wait: WaitPolicy,
) -> Result<(), GitError> {
    let path = ws.path.as_os_str();
    let existing_branch = match &ws.branch {
        Some(b) => branch_commit(repo, b)?,
        None => None,
    };
    // An existing branch is checked out as it is when it is at the start
    // commit, else (start_point checked that it is behind) moved forward.
    let moved = existing_branch
        .as_ref()
        .is_some_and(|tip| *tip != ws.commit);
    match ws.strategy {
        Strategy::Worktree => {
            let mut args: Vec<&std::ffi::OsStr> = vec![
                "worktree".as_ref(),
                "add".as_ref(),
                "--no-checkout".as_ref(),
                "--quiet".as_ref(),
            ];
            // What follows `--end-of-options` is never an option; a branch
            // alone names `refs/heads/<b>` (it exists: `existing_branch`).
            let end = "--end-of-options".as_ref();
            match (&ws.branch, &existing_branch) {
                (None, _) => args.extend(["--detach".as_ref(), end, path, ws.commit.as_ref()]),
                (Some(b), None) => {
                    args.extend(["-b".as_ref(), b.as_ref(), end, path, ws.commit.as_ref()])
                }
                (Some(b), Some(_)) if moved => {
                    args.extend(["-B".as_ref(), b.as_ref(), end, path, ws.commit.as_ref()])
                }
                (Some(b), Some(_)) => args.extend([end, path, b.as_ref()]),
            }
            {
                // One lock for prune and add: a worktree whose directory
                // vanished (a crashed run) no longer blocks its branch.
                let guard = repo.lock(wait, "git worktree add", &ws.run_id)?;
                git::run(&repo.path, ["worktree", "prune"])?;
                git::run(&repo.path, &args)?;
                drop(guard);
            }
            git::run(&ws.path, ["reset", "--hard", "--quiet"])?;
        }
        Strategy::Clone => {
            let source = repo.common_dir.as_os_str();
            let clone = || {
                repo.run_locked(
                    wait,
                    &ws.run_id,
                    &[
                        "clone".as_ref(),
                        "--local".as_ref(),
                        "--no-checkout".as_ref(),
                        "--quiet".as_ref(),
                        source,
                        path,
                    ],
                )
            };
            // An agent committing in a worktree of the same repository
            // writes objects into the shared object store while we hardlink
            // it (agents run outside the repository lock): git then refuses
            // the temporary object file it found mid-write ("hardlink
            // different from source"). That race is over in microseconds:
            // try again (git has removed the partial clone).
            let mut tries = 1;
            loop {
                match clone() {
                    Err(GitError::Command { stderr, .. })
                        if tries < CLONE_TRIES && stderr.contains("tmp_obj_") =>
                    {
                        tracing::debug!(
                            tries,
                            "clone met an object being written in the base; again"
                        );
                        tries += 1;
                    }
                    result => break result,
                }
            }?;
            if let Some(url) = origin_url(repo)? {
                git::run(&ws.path, ["remote", "set-url", "origin", url.as_str()])?;
            }
            let start = ws.commit.as_str();
            match &ws.branch {
                Some(b) => git::run(&ws.path, ["checkout", "--quiet", "-B", b.as_str(), start])?,
                None => git::run(&ws.path, ["checkout", "--quiet", "--detach", start])?,
            };
        }
    }
    if req.include_ignored {
        copy_included(repo, &ws.path)?;
    }
    Ok(())
}

/// `git fetch origin` into the base, at most once per debounce interval:
/// concurrent requests queue on the repository lock, and the ones after the
/// first find a fresh stamp (next to the lock, in the repository's baton dir)
/// and skip their fetch.
fn fetch_base(
    repo: &Repo,
    req: &WorkspaceRequest,
    wait: WaitPolicy,
    run_id: &str,
) -> Result<(), GitError> {
    let stamps = repo.baton_dir()?.path().join("fetch");
    baton_lock::sharing::create_dir(&stamps).context("cannot create directory", &stamps)?;
    let name = repo.lock_name()?;
    let stamp = stamps.join(name.as_str().replace('/', "-"));
    let guard = repo.lock(wait, "git fetch", run_id)?;
    // The stamp's time is when the last fetch began.
    let fresh = fs::metadata(&stamp)
        .and_then(|m| m.modified())
        .ok()
        .filter(|began| req.fetched_since.is_none_or(|since| *began >= since))
        .and_then(|began| SystemTime::now().duration_since(began).ok())
        .is_some_and(|age| age < req.fetch_debounce);
    if !fresh {
        let began = SystemTime::now();
        // From a base that is itself a worktree, a relative URL is read
        // against the main work tree (remote.rs).
        let origin = RemoteCall::new(repo, "origin")?;
        git::run(
            &repo.path,
            // --prune: a branch the remote deleted is not "pushed" any
            // more (branch.rs continues a pushed branch).
            origin.args(&["fetch", "--quiet", "--prune", origin.name.as_str()]),
        )?;
        let mut options = fs::OpenOptions::new();
        options.write(true).truncate(true);
        baton_lock::sharing::open_or_create(&stamp, &options, 0o644)
            .and_then(|mut f| {
                std::io::Write::write_all(&mut f, run_id.as_bytes())?;
                f.set_modified(began)
            })
            .context("cannot write fetch stamp", &stamp)?;
    }
    drop(guard);
    Ok(())
}

fn branch_commit(repo: &Repo, branch: &str) -> Result<Option<String>, GitError> {
    commit_of(&repo.path, &format!("refs/heads/{branch}"))
}

fn origin_url(repo: &Repo) -> Result<Option<String>, GitError> {
    let (out, line) = git::output(&repo.path, ["config", "--get", "remote.origin.url"])?;
    match out.status.code() {
        Some(0) => {
            let url = String::from_utf8_lossy(&out.stdout).trim().to_string();
            // A relative path is relative to the base (to its main work tree
            // when the base is a worktree), not to the workspace.
            let resolved = resolve_url(repo, &url)?;
            if resolved != url {
                if let Ok(canonical) = fs::canonicalize(&resolved) {
                    return Ok(Some(canonical.to_string_lossy().into_owned()));
                }
            }
            Ok(Some(resolved))
        }
        Some(1) => Ok(None),
        _ => Err(git::failed(line, &out)),
    }
}

/// Removes worktrees of dead owners that hold `branch` of the same base, so
/// a crashed run never blocks its branch (a clone blocks nothing).
fn clean_stale_for_branch(
    dir: &BatonDir,
    new: &Workspace,
    branch: &str,
    wait: WaitPolicy,
) -> Result<(), GitError> {
    for old in registry::all(dir)?.into_iter().flatten() {
        if old.strategy == Strategy::Worktree
            && old.base_git_dir == new.base_git_dir
            && old.branch.as_deref() == Some(branch)
            && old.owner.liveness() == Liveness::Dead
        {
            match remove(dir, &old.id, wait) {
                Ok(_) | Err(GitError::NoSuchWorkspace { .. }) => {}
                Err(e) if e.is_busy() => {} // someone else is removing it
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

/// Copies files that git ignores and `.worktreeinclude` (gitignore syntax, at
/// the base's top) lists, from the base work tree into the workspace.
fn copy_included(repo: &Repo, to: &Path) -> Result<(), GitError> {
    let Some(top) = &repo.toplevel else {
        return Ok(());
    };
    let include = top.join(".worktreeinclude");
    if !include.is_file() {
        return Ok(());
    }
    let list = |exclude: &str| -> Result<HashSet<String>, GitError> {
        let out = git::run(
            top,
            [
                "--no-optional-locks",
                "ls-files",
                "--others",
                "--ignored",
                exclude,
            ],
        )?;
        Ok(out.lines().map(str::to_string).collect())
    };
    let ignored = list("--exclude-standard")?;
    let listed = list(&format!("--exclude-from={}", include.display()))?;
    for rel in ignored.intersection(&listed) {
        if Path::new(rel)
            .components()
            .any(|c| !matches!(c, Component::Normal(_)))
        {
            continue;
        }
        let (src, dst) = (top.join(rel), to.join(rel));
        if let Some(parent) = dst.parent() {
            fs::create_dir_all(parent).context("cannot create directory", parent)?;
        }
        fs::copy(&src, &dst).context("cannot copy ignored file", &src)?;
    }
    Ok(())
}

/// Every workspace in the registry, with its size on disk and age. The
/// first record that cannot be read is the error; [`list_readable`] lists
/// the others and names it instead.
pub fn list(dir: &BatonDir) -> Result<Vec<WorkspaceInfo>, GitError> {
    registry::all(dir)?
        .into_iter()
        .map(|rec| rec.map(info))
        .collect()
}

/// Every workspace whose registry record can be read, with its size on
/// disk and age, and every record that cannot (corrupt, unreadable), with
/// its path and why: one bad record hides none of the others.
pub fn list_readable(dir: &BatonDir) -> Result<Listing, GitError> {
    let mut out = Listing::default();
    for rec in registry::all(dir)? {
        match rec {
            Ok(ws) => out.workspaces.push(info(ws)),
            Err(e) => out.unreadable.push(UnreadableRecord::of(dir, &e)),
        }
    }
    Ok(out)
}

fn info(ws: Workspace) -> WorkspaceInfo {
    let exists = ws.path.exists();
    WorkspaceInfo {
        size_bytes: if exists { disk_usage(&ws.path) } else { 0 },
        age_secs: ws.age().as_secs(),
        owner_alive: ws.owner.liveness(),
        exists,
        workspace: ws,
    }
}

/// One workspace's record.
pub fn get(dir: &BatonDir, id: &str) -> Result<Workspace, GitError> {
    validate_id(id)?;
    registry::get(dir, id)
}

/// Bytes allocated on disk under `path`, each inode counted once (on
/// Windows: the files' lengths, each hard link counted; see
/// [`baton_fs::FileId::of_metadata`]).
fn disk_usage(path: &Path) -> u64 {
    let mut seen = HashSet::new();
    let mut total = 0u64;
    let mut stack = vec![path.to_path_buf()];
    while let Some(p) = stack.pop() {
        let Ok(meta) = fs::symlink_metadata(&p) else {
            continue;
        };
        if baton_fs::FileId::of_metadata(&meta).is_none_or(|id| seen.insert(id)) {
            total = total.saturating_add(baton_fs::allocated_bytes(&meta));
        }
        if meta.is_dir() {
            if let Ok(entries) = fs::read_dir(&p) {
                stack.extend(entries.flatten().map(|e| e.path()));
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_safe_file_and_lock_names() {
        for good in ["a", "run-1", "A.b_c", "0123456789abcdef"] {
            assert!(validate_id(good).is_ok(), "{good}");
        }
        let long = "x".repeat(65);
        for bad in ["", ".hidden", "-x", "a/b", "..", "a b", "é", long.as_str()] {
            assert!(validate_id(bad).is_err(), "{bad}");
        }
    }

    /// Unix: Windows counts each hard link (no file index in std's metadata).
    #[cfg(unix)]
    #[test]
    fn disk_usage_counts_hardlinked_files_once() {
        let tmp = tempfile::tempdir().unwrap();
        let a = tmp.path().join("a");
        fs::write(&a, vec![7u8; 64 * 1024]).unwrap();
        let one = disk_usage(tmp.path());
        fs::hard_link(&a, tmp.path().join("b")).unwrap();
        assert_eq!(disk_usage(tmp.path()), one);
        assert!(one >= 64 * 1024);
    }

    /// Windows: the files' lengths, and each hard link counts.
    #[cfg(windows)]
    #[test]
    fn disk_usage_counts_lengths_and_each_link() {
        let tmp = tempfile::tempdir().unwrap();
        let a = tmp.path().join("a");
        fs::write(&a, vec![7u8; 64 * 1024]).unwrap();
        fs::create_dir(tmp.path().join("sub")).unwrap();
        fs::write(tmp.path().join("sub").join("b"), b"12345").unwrap();
        assert_eq!(disk_usage(tmp.path()), 64 * 1024 + 5);
        fs::hard_link(&a, tmp.path().join("c")).unwrap();
        assert_eq!(disk_usage(tmp.path()), 2 * 64 * 1024 + 5);
    }
}
