//! The repository a session works on: its work-tree top (paths and state
//! files are relative to it), where its workspaces go, and its identity
//! (`baton_git::repository_identity`), the namespace of its reservations:
//! every clone and worktree of one repository on the machine shares it.

use std::path::{Path, PathBuf};

use baton_git::{GitError, Repo};
use baton_lock::BatonDir;

use crate::session::Config;

/// Why the session's repository cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum RepoError {
    /// The working directory could not be read.
    #[error("cannot read the working directory: {0}")]
    Cwd(#[source] std::io::Error),
    /// Not a repository, or git failed.
    #[error(transparent)]
    Git(#[from] GitError),
    /// A bare repository: no files to reserve.
    #[error("'{}' is a bare repository: give --repo a work tree", path.display())]
    Bare {
        /// The repository.
        path: PathBuf,
    },
}

impl Config {
    /// The configuration of a session on the repository at or above `repo`
    /// (default: the working directory), with locks in `dir` (`named`: the
    /// user chose it with `--dir` or `BATON_DIR`, so workspaces go there too).
    pub fn for_repo(
        dir: BatonDir,
        named: bool,
        repo: Option<&Path>,
        agent: Option<String>,
    ) -> Result<Config, RepoError> {
        let start = match repo {
            Some(p) => p.to_path_buf(),
            None => std::env::current_dir().map_err(RepoError::Cwd)?,
        };
        let opened = Repo::open(&start)?;
        let Some(top) = opened.toplevel.clone() else {
            return Err(RepoError::Bare { path: opened.path });
        };
        let (repo_key, _) = baton_git::repository_identity(&top)?;
        let workspaces = baton_git::workspaces_of(&dir, named, &top)?;
        Ok(Config {
            reservations: std::sync::Arc::new(baton_lock::reserve::LocalReservations::new(
                dir.clone(),
            )),
            dir,
            workspaces,
            repo_key,
            repo: top,
            agent,
        })
    }
}
