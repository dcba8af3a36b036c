//! Where workspaces are made: `<baton dir>/workspaces` by default, or a root
//! chosen per base repository — by the caller (`--workspace-root`), else by
//! the base's git setting `baton.workspaceRoot` (a fast disk, a volume with
//! room) — while the registry stays in the baton dir.
//!
//! baton deletes a workspace directory only where it made it: under the
//! default root, or as a direct child of a chosen root that carries baton's
//! marker file ([`MARKER`], written when the root is first used), whatever
//! a record says.

use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};

use baton_fs::IoResultExt;
use baton_lock::BatonDir;

use crate::error::GitError;
use crate::git::{self, Repo};
use crate::record::Workspace;
use crate::registry;

/// The git setting that chooses a base's workspace root.
pub const ROOT_SETTING: &str = "baton.workspaceRoot";

/// The file that marks a directory as a workspace root made by baton.
pub(crate) const MARKER: &str = ".baton-workspace-root";

/// The root for a new workspace of `repo`, created if missing: `requested`
/// (relative to the current directory), else the base's
/// [`ROOT_SETTING`] (relative to the base's top), else
/// `<baton dir>/workspaces`. Returns it, and whether it was chosen (it is
/// then recorded with the workspace). A root inside the base's work tree is
/// refused: the workspace would be untracked files of the base.
pub(crate) fn choose(
    dir: &BatonDir,
    repo: &Repo,
    requested: Option<&Path>,
) -> Result<(PathBuf, bool), GitError> {
    let chosen = match requested {
        Some(p) => Some((
            std::path::absolute(p).context("cannot resolve workspace root", p)?,
            "--workspace-root",
        )),
        None => setting(repo)?.map(|p| (p, ROOT_SETTING)),
    };
    let Some((root, from)) = chosen else {
        return Ok((registry::workspaces_dir(dir)?, false));
    };
    if let Some(top) = &repo.toplevel {
        if canonical_prefix(&root).starts_with(top) {
            return Err(GitError::Invalid(format!(
                "workspace root '{}' ({from}) is inside the work tree of '{}': choose a directory outside it",
                root.display(),
                top.display()
            )));
        }
    }
    fs::create_dir_all(&root).context("cannot create workspace root", &root)?;
    let root = fs::canonicalize(&root).context("cannot resolve workspace root", &root)?;
    let marker = root.join(MARKER);
    match fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&marker)
    {
        Ok(mut f) => io::Write::write_all(
            &mut f,
            b"baton makes workspaces here; it deletes a workspace directory only with its record\n",
        )
        .context("cannot write", &marker)?,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e).context("cannot write", &marker).map_err(Into::into),
    }
    Ok((root, true))
}

/// `baton.workspaceRoot` as the base sees it (its own config, then the
/// user's), `~` expanded, relative to the base's top.
fn setting(repo: &Repo) -> Result<Option<PathBuf>, GitError> {
    let (out, line) = git::output(&repo.path, ["config", "--get", "--type=path", ROOT_SETTING])?;
    match out.status.code() {
        Some(0) => {
            let value = String::from_utf8_lossy(&out.stdout).trim().to_string();
            if value.is_empty() {
                return Ok(None);
            }
            Ok(Some(repo.path.join(value)))
        }
        Some(1) => Ok(None),
        _ => Err(git::failed(line, &out)),
    }
}

/// `path` with its longest existing ancestor canonicalized (the rest, not
/// yet made, appended as it is).
fn canonical_prefix(path: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut at = path;
    loop {
        if let Ok(c) = fs::canonicalize(at) {
            return rest.iter().rev().fold(c, |p, r| p.join(r));
        }
        match (at.parent(), at.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                at = parent;
            }
            _ => return path.to_path_buf(),
        }
    }
}

/// Where workspace `ws` may be deleted: the root it was made in.
pub(crate) fn root_of(dir: &BatonDir, ws: &Workspace) -> PathBuf {
    ws.root
        .clone()
        .unwrap_or_else(|| dir.path().join("workspaces"))
}

/// Whether baton may delete the record's path: a directory under the
/// default root, or directly in a chosen root that carries [`MARKER`].
pub(crate) fn may_delete(dir: &BatonDir, ws: &Workspace) -> bool {
    let root = root_of(dir, ws);
    let plain = ws
        .path
        .components()
        .all(|c| !matches!(c, Component::ParentDir));
    match &ws.root {
        None => plain && ws.path.starts_with(&root) && ws.path != root,
        Some(root) => {
            plain && ws.path.parent() == Some(root.as_path()) && root.join(MARKER).is_file()
        }
    }
}
