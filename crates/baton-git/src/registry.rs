//! The workspace registry: one JSON file per workspace under
//! `<baton dir>/workspaces/.registry/`, written atomically (temp file, fsync,
//! link or rename, fsync of the directory), so a crash leaves either no
//! record or a whole one.
//!
//! A record is written *before* its workspace directory is created and
//! removed *after* the directory is gone, so every workspace that may exist
//! on disk has a record naming its owner, and `gc` can find the leftovers of
//! a run that was killed at any point.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use baton_lock::BatonDir;

use crate::error::GitError;
use crate::record::Workspace;
use baton_fs::IoResultExt;

/// `<baton dir>/workspaces`, created `0700` if missing.
pub(crate) fn workspaces_dir(dir: &BatonDir) -> Result<PathBuf, GitError> {
    let ws = dir.path().join("workspaces");
    make_dir(&ws)?;
    Ok(ws)
}

pub(crate) fn registry_dir(dir: &BatonDir) -> Result<PathBuf, GitError> {
    let reg = workspaces_dir(dir)?.join(".registry");
    make_dir(&reg)?;
    Ok(reg)
}

/// 0700, or 2770 in a baton dir shared with a group.
fn make_dir(path: &Path) -> Result<(), GitError> {
    baton_lock::sharing::create_dir(path)
        .context("cannot create directory", path)
        .map_err(Into::into)
}

fn record_path(reg: &Path, id: &str) -> PathBuf {
    reg.join(format!("{id}.json"))
}

/// The file that holds (or would hold) the record of workspace `id`.
pub(crate) fn record_file(dir: &BatonDir, id: &str) -> PathBuf {
    record_path(&dir.path().join("workspaces").join(".registry"), id)
}

/// Writes a new record; fails if one with the same id exists.
pub(crate) fn insert(dir: &BatonDir, ws: &Workspace) -> Result<(), GitError> {
    let reg = registry_dir(dir)?;
    let target = record_path(&reg, &ws.id);
    let tmp = reg.join(format!(".{}.{}.tmp", ws.id, ws.run_id));
    let bytes = serde_json::to_vec_pretty(ws).map_err(|source| GitError::BadRecord {
        path: target.clone(),
        source,
    })?;
    let written = (|| -> io::Result<()> {
        let mut f =
            baton_fs::open_no_follow(OpenOptions::new().write(true).create_new(true), &tmp, 0o600)?;
        baton_lock::sharing::share_new_file(&f, &tmp)?;
        f.write_all(&bytes)?;
        f.write_all(b"\n")?;
        f.sync_data()
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(e)
            .context("cannot write workspace record", &tmp)
            .map_err(Into::into);
    }
    // link(2) publishes the complete record and fails if the id is taken.
    let linked = fs::hard_link(&tmp, &target);
    let _ = fs::remove_file(&tmp);
    match linked {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            let path = get(dir, &ws.id).map(|w| w.path).unwrap_or_default();
            return Err(GitError::WorkspaceExists {
                id: ws.id.clone(),
                path,
            });
        }
        Err(e) => {
            return Err(e)
                .context("cannot publish workspace record", &target)
                .map_err(Into::into)
        }
    }
    sync_dir(&reg)
}

/// Reads one record.
pub(crate) fn get(dir: &BatonDir, id: &str) -> Result<Workspace, GitError> {
    let path = record_path(&registry_dir(dir)?, id);
    match fs::read(&path) {
        Ok(bytes) => {
            serde_json::from_slice(&bytes).map_err(|source| GitError::BadRecord { path, source })
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            Err(GitError::NoSuchWorkspace { id: id.to_string() })
        }
        Err(e) => Err(e)
            .context("cannot read workspace record", path)
            .map_err(Into::into),
    }
}

/// The marker of a creation in progress: made before the record, removed
/// once the workspace is complete. A marker whose workspace lock is free
/// belongs to a creation that was killed: its workspace is half made, and
/// nobody will ever use it ([`creation_abandoned`]).
fn creating_marker(reg: &Path, id: &str) -> PathBuf {
    reg.join(format!("{id}.creating"))
}

/// Marks workspace `id` as being created (see [`creating_marker`]).
pub(crate) fn mark_creating(dir: &BatonDir, id: &str) -> Result<(), GitError> {
    let reg = registry_dir(dir)?;
    let path = creating_marker(&reg, id);
    fs::write(&path, b"")
        .context("cannot mark workspace creation", path)
        .map_err(Into::into)
}

/// Clears the mark of [`mark_creating`] (absent is fine).
pub(crate) fn unmark_creating(dir: &BatonDir, id: &str) {
    if let Ok(reg) = registry_dir(dir) {
        let _ = fs::remove_file(creating_marker(&reg, id));
    }
}

/// Whether workspace `id` was left half made by a creation that ended
/// (killed): true only while its mark remains, so callers must hold the
/// workspace's lock, which a creation in progress holds.
pub(crate) fn creation_abandoned(dir: &BatonDir, id: &str) -> bool {
    registry_dir(dir).is_ok_and(|reg| creating_marker(&reg, id).exists())
}

/// Deletes a record (absent is fine).
pub(crate) fn delete(dir: &BatonDir, id: &str) -> Result<(), GitError> {
    let reg = registry_dir(dir)?;
    let path = record_path(&reg, id);
    match fs::remove_file(&path) {
        Ok(()) => sync_dir(&reg),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e)
            .context("cannot remove workspace record", path)
            .map_err(Into::into),
    }
}

/// Every record, sorted by creation time; unreadable ones as errors with their path.
pub(crate) fn all(dir: &BatonDir) -> Result<Vec<Result<Workspace, GitError>>, GitError> {
    let reg = registry_dir(dir)?;
    let mut out = Vec::new();
    for entry in fs::read_dir(&reg).context("cannot list workspace registry", &reg)? {
        let entry = entry.context("cannot list workspace registry", &reg)?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let Some(id) = name.strip_suffix(".json") else {
            continue;
        };
        if name.starts_with('.') {
            continue;
        }
        match get(dir, id) {
            Err(GitError::NoSuchWorkspace { .. }) => {} // removed meanwhile
            r => out.push(r),
        }
    }
    out.sort_by(|a, b| match (a, b) {
        (Ok(a), Ok(b)) => a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)),
        (Ok(_), Err(_)) => std::cmp::Ordering::Less,
        (Err(_), Ok(_)) => std::cmp::Ordering::Greater,
        (Err(_), Err(_)) => std::cmp::Ordering::Equal,
    });
    Ok(out)
}

fn sync_dir(path: &Path) -> Result<(), GitError> {
    baton_fs::flush_dir(path)
        .context("cannot sync directory", path)
        .map_err(Into::into)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Strategy;
    use baton_lock::ProcessIdentity;

    /// The record files on the real file system: published by a hard link
    /// (a second insert of the id fails), listed, read back, deleted, with
    /// the registry directory flushed as each platform can.
    #[test]
    fn records_are_published_once_listed_and_deleted() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = BatonDir::open(tmp.path().join("baton")).unwrap();
        let ws = Workspace {
            id: "w1".into(),
            path: tmp.path().join("baton").join("workspaces").join("w1"),
            root: None,
            strategy: Strategy::Clone,
            base_repo: tmp.path().join("src"),
            base_git_dir: tmp.path().join("src").join(".git"),
            reference: "HEAD".into(),
            commit: "0".repeat(40),
            branch: None,
            owner: ProcessIdentity::current(),
            run_id: "r1".into(),
            created_at: "2026-01-01T00:00:00Z".into(),
            abandoned_ref: None,
            abandoned_commit: None,
        };
        insert(&dir, &ws).unwrap();
        assert!(matches!(
            insert(&dir, &ws),
            Err(GitError::WorkspaceExists { .. })
        ));
        assert_eq!(get(&dir, "w1").unwrap().path, ws.path);
        let listed = all(&dir).unwrap();
        assert_eq!(listed.len(), 1);
        // No temp file is left beside the record.
        let names: Vec<_> = fs::read_dir(registry_dir(&dir).unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["w1.json"]);
        delete(&dir, "w1").unwrap();
        assert!(matches!(
            get(&dir, "w1"),
            Err(GitError::NoSuchWorkspace { .. })
        ));
        delete(&dir, "w1").unwrap();
    }
}
