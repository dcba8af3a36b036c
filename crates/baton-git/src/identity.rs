//! A repository's identity, whatever the clone or worktree: the namespace
//! of path reservations (`baton_lock::reserve::Space`).

use std::path::{Path, PathBuf};

use crate::error::GitError;
use crate::git::{self, Repo};
use crate::remote::{local_path, resolve_url};

/// The identity of the repository at or above `dir` and the top of the
/// caller's work tree (the repository itself when it is bare).
///
/// The key is the same for every worktree of a repository and every clone
/// of the same origin: `path:<canonical common git dir>` of the origin when
/// it is a repository on this machine (a local path or `file://` URL),
/// else `url:<host>/<path>` of the origin's URL (scheme, user, port, a
/// trailing `/` and `.git` left out, so `git@host:a/b.git` and
/// `https://host/a/b` are one), else, without an origin,
/// `path:<canonical common git dir>` of the repository itself.
pub fn repository_identity(dir: &Path) -> Result<(String, PathBuf), GitError> {
    let repo = Repo::open(dir)?;
    let top = repo.toplevel.clone().unwrap_or_else(|| repo.path.clone());
    let key = match origin(&repo)? {
        Some(url) => match local_path(&repo.path, &url).and_then(|p| Repo::open(&p).ok()) {
            Some(remote) => path_key(&remote.common_dir),
            None => format!("url:{}", normalize_url(&url)),
        },
        None => path_key(&repo.common_dir),
    };
    Ok((key, top))
}

fn path_key(common_dir: &Path) -> String {
    format!("path:{}", common_dir.display())
}

/// `remote.origin.url`, a relative path resolved as git does.
fn origin(repo: &Repo) -> Result<Option<String>, GitError> {
    let (out, line) = git::output(&repo.path, ["config", "--get", "remote.origin.url"])?;
    match out.status.code() {
        Some(0) => {
            let url = String::from_utf8_lossy(&out.stdout).trim().to_string();
            Ok(Some(resolve_url(repo, &url)?))
        }
        Some(1) => Ok(None),
        _ => Err(git::failed(line, &out)),
    }
}

/// `host/path` of a network URL (`scheme://user@host:port/path`, or scp's
/// `user@host:path`), without a trailing `/` or `.git`; the host in lower case.
pub(crate) fn normalize_url(url: &str) -> String {
    let (host, path) = match url.split_once("://") {
        Some((_, rest)) => {
            let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
            let host = authority.rsplit('@').next().unwrap_or(authority);
            let host = host.split(':').next().unwrap_or(host);
            (host.to_string(), path.to_string())
        }
        None => match url.split_once(':') {
            Some((authority, path)) => {
                let host = authority.rsplit('@').next().unwrap_or(authority);
                (host.to_string(), path.to_string())
            }
            None => (String::new(), url.to_string()),
        },
    };
    let path = path.trim_matches('/');
    let path = path
        .strip_suffix(".git")
        .unwrap_or(path)
        .trim_end_matches('/');
    format!("{}/{path}", host.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::normalize_url;

    #[test]
    fn spellings_of_one_url_are_one() {
        let want = "github.com/a/b";
        for url in [
            "https://github.com/a/b.git",
            "https://github.com/a/b",
            "https://user@GitHub.com/a/b/",
            "git@github.com:a/b.git",
            "ssh://git@github.com:22/a/b.git",
        ] {
            assert_eq!(normalize_url(url), want, "{url}");
        }
        assert_ne!(normalize_url("https://github.com/a/c"), want);
    }
}
