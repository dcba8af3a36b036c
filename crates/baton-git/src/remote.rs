//! A remote as the git commands baton runs in a work tree must name it.
//!
//! git reads a remote URL that is a relative path (`../remote.git`, `./x`)
//! against the directory it runs in, the top of the work tree. A linked
//! worktree (a workspace of the worktree strategy, under
//! `<base>/.git/baton/workspaces`) shares the base's config but not its
//! directory, so a URL that names the remote from the base names nothing
//! there. For every git command baton runs in such a work tree that talks to
//! a remote (push, the fetch of its rebase and retry, `--fetch` from a base
//! that is itself a worktree), the remote's relative URLs are read against
//! the main work tree's top (the repository itself when it is bare), as git
//! reads them from the base, and handed to that one command: the user's
//! config is never written.
//!
//! They go under a name of their own, `-c remote.baton-<name>.url=<path>`
//! with every other `remote.<name>.*` setting copied (its fetch refspecs, so
//! that a push or fetch updates `refs/remotes/<name>/*` exactly as one to
//! `<name>` does; `pushurl`, `tagOpt`, `prune`, ...), because `-c
//! remote.<name>.url=...` adds a URL after the configured one instead of
//! replacing it (git before 2.46 has no way to reset the list), and git uses
//! the first. A hook of the command sees that name as its remote's name.
//!
//! URLs with a scheme (`ssh://`, `file://`: git has no relative `file://`
//! form, it reads `file://../r.git` as `/r.git`), scp-like `host:path` ones
//! and absolute paths are left alone, as are the remotes of a work tree that
//! is not a linked worktree (git reads their paths against its own top,
//! where they were meant).

use std::path::{Path, PathBuf};

use crate::error::GitError;
use crate::git::{self, Repo};

/// How one git command names a remote: the name, and the `-c` settings
/// (before the subcommand) that define it when it is not the configured one.
#[derive(Clone, Debug)]
pub(crate) struct RemoteCall {
    /// The name to give git.
    pub(crate) name: String,
    /// `-c`, `KEY=VALUE` pairs.
    config: Vec<String>,
}

impl RemoteCall {
    /// How git commands run in `repo` reach its remote `name`. Outside a
    /// linked worktree it is `name` itself, without running git.
    pub(crate) fn new(repo: &Repo, name: &str) -> Result<RemoteCall, GitError> {
        let plain = RemoteCall {
            name: name.to_string(),
            config: Vec::new(),
        };
        if !repo.is_linked_worktree() {
            return Ok(plain);
        }
        let (out, line) = git::output(&repo.path, ["config", "-z", "--get-regexp", r"^remote\."])?;
        let text = match out.status.code() {
            Some(0) => String::from_utf8_lossy(&out.stdout).into_owned(),
            Some(1) => return Ok(plain), // no remote configured
            _ => return Err(git::failed(line, &out)),
        };
        // `KEY\nVALUE\0`, or `KEY\0` for a key without a value.
        let entries: Vec<(&str, Option<&str>)> = text
            .split('\0')
            .filter(|e| !e.is_empty())
            .map(|e| match e.split_once('\n') {
                Some((k, v)) => (k, Some(v)),
                None => (e, None),
            })
            .collect();
        let prefix = format!("remote.{name}.");
        let own: Vec<(&str, Option<&str>)> = entries
            .iter()
            .filter_map(|(k, v)| {
                let key = k.strip_prefix(prefix.as_str())?;
                (!key.contains('.')).then_some((key, *v))
            })
            .collect();
        let is_url = |key: &str| key == "url" || key == "pushurl";
        if !own
            .iter()
            .any(|(k, v)| is_url(k) && v.is_some_and(is_relative_path))
        {
            return Ok(plain);
        }
        let top = main_top(repo)?;
        // A name no remote of the repository has.
        let taken = |alias: &str| {
            let p = format!("remote.{alias}.");
            entries.iter().any(|(k, _)| k.starts_with(p.as_str()))
        };
        let mut alias = format!("baton-{name}");
        let mut n = 2;
        while taken(&alias) {
            alias = format!("baton-{name}-{n}");
            n += 1;
        }
        let mut config = Vec::with_capacity(own.len() * 2);
        for (key, value) in own {
            let setting = match value {
                Some(v) if is_url(key) && is_relative_path(v) => {
                    format!("remote.{alias}.{key}={}", top.join(v).display())
                }
                Some(v) => format!("remote.{alias}.{key}={v}"),
                None => format!("remote.{alias}.{key}"),
            };
            config.extend(["-c".to_string(), setting]);
        }
        tracing::debug!(remote = name, alias = %alias, base = %top.display(), "a relative URL of the remote, read against the base's top");
        Ok(RemoteCall {
            name: alias,
            config,
        })
    }

    /// The arguments of a git command: the `-c` settings, then `args`
    /// (which name the remote as [`RemoteCall::name`]).
    pub(crate) fn args<'a>(&'a self, args: &[&'a str]) -> Vec<&'a str> {
        self.config
            .iter()
            .map(String::as_str)
            .chain(args.iter().copied())
            .collect()
    }
}

/// `url`, a URL of a remote of `repo`, as git reads it from the base: a
/// relative path joined to the main work tree's top in a linked worktree,
/// to `repo`'s own top otherwise; any other URL as it is.
pub(crate) fn resolve_url(repo: &Repo, url: &str) -> Result<String, GitError> {
    if !is_relative_path(url) {
        return Ok(url.to_string());
    }
    let top = if repo.is_linked_worktree() {
        main_top(repo)?
    } else {
        repo.path.clone()
    };
    Ok(top.join(url).to_string_lossy().into_owned())
}

/// The top of the main work tree of `repo` (the repository itself when it
/// is bare): the first of `git worktree list`.
fn main_top(repo: &Repo) -> Result<PathBuf, GitError> {
    let list = git::run(&repo.path, ["worktree", "list", "--porcelain"])?;
    list.lines()
        .next()
        .and_then(|l| l.strip_prefix("worktree "))
        .map(PathBuf::from)
        .ok_or_else(|| GitError::Command {
            command: format!("git -C {} worktree list --porcelain", repo.path.display()),
            status: "exit status: 0".into(),
            stderr: format!("no main worktree in its output: {list:?}"),
        })
}

/// Whether git reads `url` as a relative path.
fn is_relative_path(url: &str) -> bool {
    !url.contains("://")
        && local_path(Path::new("/"), url).is_some()
        && !Path::new(url).is_absolute()
        // On Windows `/srv/r.git` is not absolute to `Path` (no drive), but
        // git reads it from the root of the current drive, not the base.
        && !url.starts_with(['/', '\\'])
        && !url.is_empty()
}

/// The path a remote URL names when git would read it as a local path:
/// `file://[HOST]/PATH` (git ignores the host), or anything without `://`
/// that is not scp-like (`host:path`, a colon before the first slash);
/// relative to `work`. On Windows, as Git for Windows reads them, a drive
/// letter (`C:/r.git`, `C:\\r.git`, `file:///C:/r.git`) is a local path, not
/// a host, and `\\` separates directories too.
pub(crate) fn local_path(work: &Path, url: &str) -> Option<PathBuf> {
    if let Some(rest) = url.strip_prefix("file://") {
        if cfg!(windows) && has_drive_prefix(rest.trim_start_matches('/')) {
            return Some(PathBuf::from(rest.trim_start_matches('/')));
        }
        return rest.find('/').map(|slash| PathBuf::from(&rest[slash..]));
    }
    if url.contains("://") {
        return None;
    }
    if cfg!(windows) && has_drive_prefix(url) {
        return Some(PathBuf::from(url));
    }
    if let Some(colon) = url.find(':') {
        let separator = |c: char| c == '/' || (cfg!(windows) && c == '\\');
        if !url[..colon].contains(separator) {
            return None;
        }
    }
    Some(work.join(url))
}

/// Whether `path` starts with a drive letter and its colon (`C:`).
fn has_drive_prefix(path: &str) -> bool {
    let b = path.as_bytes();
    b.len() >= 2 && b[0].is_ascii_alphabetic() && b[1] == b':'
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_remotes_are_told_from_network_ones_as_git_does() {
        let work = Path::new("/w");
        assert_eq!(
            local_path(work, "/srv/r.git"),
            Some(PathBuf::from("/srv/r.git"))
        );
        assert_eq!(
            local_path(work, "../r.git"),
            Some(PathBuf::from("/w/../r.git"))
        );
        assert_eq!(
            local_path(work, "file:///srv/r.git"),
            Some(PathBuf::from("/srv/r.git"))
        );
        // git ignores the host of a file URL: no relative form.
        assert_eq!(
            local_path(work, "file://../r.git"),
            Some(PathBuf::from("/r.git"))
        );
        assert_eq!(local_path(work, "./a:b"), Some(PathBuf::from("/w/./a:b")));
        for network in [
            "git@github.com:o/r.git",
            "host:r.git",
            "ssh://host/r.git",
            "https://example.com/r.git",
        ] {
            assert_eq!(local_path(work, network), None, "{network}");
        }
        // Git for Windows: a drive letter is a path, not a host.
        let drive = local_path(work, "C:/srv/r.git");
        let backslashed = local_path(work, "C:\\srv\\r.git");
        let file_url = local_path(work, "file:///C:/srv/r.git");
        if cfg!(windows) {
            assert_eq!(drive, Some(PathBuf::from("C:/srv/r.git")));
            assert_eq!(backslashed, Some(PathBuf::from("C:\\srv\\r.git")));
            assert_eq!(file_url, Some(PathBuf::from("C:/srv/r.git")));
        } else {
            assert_eq!((drive, backslashed), (None, None));
        }
    }

    #[test]
    fn only_relative_paths_are_read_against_the_base() {
        for relative in ["../r.git", "./r.git", "r.git", "sub/r.git", "./a:b"] {
            assert!(is_relative_path(relative), "{relative}");
        }
        for other in [
            "/srv/r.git",
            "file://../r.git",
            "file:///srv/r.git",
            "host:r.git",
            "git@github.com:o/r.git",
            "https://example.com/r.git",
            "",
        ] {
            assert!(!is_relative_path(other), "{other}");
        }
    }
}
