//! The repository a session works on: its work-tree top (paths and state
//! files are relative to it), where its workspaces go, and its identity,
//! the namespace of its reservations: every clone and worktree of one
//! repository on the machine shares it.

use std::path::{Path, PathBuf};
use std::process::Command;

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
        let workspaces = baton_git::workspaces_of(&dir, named, &top)?;
        Ok(Config {
            dir,
            workspaces,
            repo_key: identity(&opened, &top),
            repo: top,
            agent,
        })
    }
}

/// The repository's identity: its origin's URL, normalized (scheme, user
/// and a trailing `.git` or `/` dropped, host in lower case), so that every
/// clone of one origin agrees; else its canonical common git dir, which
/// every worktree of it shares.
fn identity(repo: &Repo, top: &Path) -> String {
    let url = Command::new("git")
        .arg("-C")
        .arg(top)
        .args(["config", "--get", "remote.origin.url"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty());
    match url {
        Some(url) => normalize_url(&url, top),
        None => repo.common_dir.display().to_string(),
    }
}

/// `https://User@Host.com/a/b.git/` and `git@host.com:a/b` alike: `host.com/a/b`;
/// a local path: its canonical form.
pub fn normalize_url(url: &str, base: &Path) -> String {
    let (host_and_path, remote) = if let Some((_, rest)) = url.split_once("://") {
        if url.starts_with("file://") {
            (rest.to_string(), false)
        } else {
            (rest.to_string(), true)
        }
    } else if let Some((user_host, path)) = url.split_once(':').filter(|(h, _)| {
        // scp-like `host:path`; not a Windows drive (`C:\...`) or a local path.
        h.len() > 1 && !h.contains('/') && !h.contains('\\')
    }) {
        (format!("{user_host}/{path}"), true)
    } else {
        (url.to_string(), false)
    };
    if !remote {
        let path = base.join(&host_and_path);
        let canon = std::fs::canonicalize(&path).unwrap_or(path);
        return canon.display().to_string();
    }
    let without_user = match host_and_path.split_once('/') {
        Some((authority, path)) => {
            let host = authority.rsplit('@').next().unwrap_or(authority);
            format!("{}/{}", host.to_lowercase(), path)
        }
        None => host_and_path.to_lowercase(),
    };
    let trimmed = without_user.trim_end_matches('/');
    trimmed.strip_suffix(".git").unwrap_or(trimmed).to_string()
}

#[cfg(test)]
mod tests {
    use super::normalize_url;
    use std::path::Path;

    #[test]
    fn clones_of_one_origin_agree() {
        let base = Path::new("/nonexistent");
        let want = "github.com/org/repo";
        for url in [
            "https://github.com/org/repo.git",
            "https://User@GitHub.com/org/repo/",
            "ssh://git@github.com/org/repo.git",
            "git@github.com:org/repo.git",
            "git@github.com:org/repo",
        ] {
            assert_eq!(normalize_url(url, base), want, "{url}");
        }
    }
}
