//! The namespace of reservations (one repository) and turning what a user
//! typed into a [`Pattern`] inside it.

use std::path::{Component, Path, PathBuf};

use super::pattern::Pattern;
use super::ReserveError;

/// The namespace of reservations: one repository, whatever the clone or
/// worktree.
///
/// `key` is the repository's identity (normalized origin URL, else the
/// canonical git common dir) computed by the caller; `root` is the caller's
/// work-tree top, used only to validate and normalize paths.
#[derive(Clone, Debug)]
pub struct Space {
    key: String,
    root: PathBuf,
}

impl Space {
    /// A space keyed `key`, whose paths are relative to `root`.
    pub fn new(key: impl Into<String>, root: impl Into<PathBuf>) -> Space {
        Space {
            key: key.into(),
            root: root.into(),
        }
    }

    /// The repository's identity.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The caller's work-tree top.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Parses a user-given path or glob into a pattern relative to the
    /// root: relative to the root, or absolute inside it. `..` segments,
    /// paths outside the root and symlinks leading out (checked on the
    /// longest existing prefix) are refused ([`ReserveError::BadPath`]).
    pub fn pattern(&self, raw: &str) -> Result<Pattern, ReserveError> {
        let bad = |reason: String| ReserveError::BadPath {
            path: raw.to_string(),
            reason,
        };
        if let Some(c) = raw.chars().find(|c| c.is_control()) {
            return Err(bad(format!(
                "contains the control character {:?}: name paths as they appear in the repository",
                c
            )));
        }
        let root = self.canonical_root();
        let given = Path::new(raw);
        let relative: PathBuf = if given.is_absolute() {
            match strip_root(given, &self.root).or_else(|| strip_root(given, &root)) {
                Some(rel) => rel,
                None => {
                    return Err(bad(format!(
                        "is outside the repository '{}'",
                        self.root.display()
                    )))
                }
            }
        } else {
            given.to_path_buf()
        };
        let mut segments: Vec<String> = Vec::new();
        for part in relative.components() {
            match part {
                Component::CurDir => {}
                Component::ParentDir => {
                    return Err(bad(
                        "'..' is not allowed: name paths inside the repository from its root"
                            .into(),
                    ))
                }
                Component::Normal(s) => {
                    let s = s.to_str().ok_or_else(|| bad("is not valid UTF-8".into()))?;
                    if cfg!(windows) {
                        segments.extend(s.split('\\').filter(|x| !x.is_empty()).map(String::from));
                    } else {
                        segments.push(s.to_string());
                    }
                }
                Component::RootDir | Component::Prefix(_) => {
                    return Err(bad("is not a path inside the repository".into()))
                }
            }
        }
        if segments.iter().any(|s| s == "..") {
            return Err(bad("'..' is not allowed".into()));
        }
        let refs: Vec<&str> = segments.iter().map(String::as_str).collect();
        let pattern = Pattern::from_segments(&refs).map_err(bad)?;
        self.check_links(&root, &refs).map_err(bad)?;
        Ok(pattern)
    }

    fn canonical_root(&self) -> PathBuf {
        std::fs::canonicalize(&self.root).unwrap_or_else(|_| self.root.clone())
    }

    /// Refuses a pattern whose longest existing literal prefix resolves
    /// (through symbolic links) outside the root.
    fn check_links(&self, root: &Path, segments: &[&str]) -> Result<(), String> {
        let literal = segments
            .iter()
            .take_while(|s| !s.contains(['*', '?', '[', ']', '{', '}', '\\']))
            .count();
        let mut at = self.root.clone();
        let mut longest = None;
        for s in &segments[..literal] {
            at.push(s);
            match std::fs::symlink_metadata(&at) {
                Ok(_) => longest = Some(at.clone()),
                Err(_) => break,
            }
        }
        let Some(longest) = longest else {
            return Ok(());
        };
        match std::fs::canonicalize(&longest) {
            Ok(real) if real.starts_with(root) => Ok(()),
            Ok(real) => Err(format!(
                "'{}' leads outside the repository (to '{}')",
                longest.display(),
                real.display()
            )),
            // A dangling link: where it points is not inside for sure.
            Err(e) => Err(format!(
                "cannot resolve '{}' inside the repository: {e}",
                longest.display()
            )),
        }
    }
}

/// `path` relative to `root`, lexically (`.` and `..` of `path` resolved
/// first); `None` if it is not inside.
fn strip_root(path: &Path, root: &Path) -> Option<PathBuf> {
    let mut clean = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                clean.pop();
            }
            Component::CurDir => {}
            other => clean.push(other),
        }
    }
    clean.strip_prefix(root).ok().map(Path::to_path_buf)
}
