//! Which file a path names, what format it has and which lock guards it.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io;
use std::path::{is_separator, Component, Path, PathBuf, Prefix};

use baton_lock::LockName;
use sha2::{Digest, Sha256};

use crate::error::StateError;
use baton_fs::IoResultExt;

/// How a state file's content is checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `*.json`: the whole content is one JSON value.
    Json,
    /// `*.jsonl`: every line is one JSON value, every line ends in `\n`.
    JsonLines,
    /// Anything else: bytes, not checked.
    Text,
}

impl Format {
    /// The format of a file, from its name's extension (`.json`, `.jsonl`,
    /// any case).
    pub fn of(path: &Path) -> Format {
        match path.extension().and_then(OsStr::to_str) {
            Some(ext) if ext.eq_ignore_ascii_case("json") => Format::Json,
            Some(ext) if ext.eq_ignore_ascii_case("jsonl") => Format::JsonLines,
            _ => Format::Text,
        }
    }
}

/// How many symbolic links (within one directory) are followed.
const MAX_LINK_HOPS: usize = 8;

/// A state file, resolved: the real file it names, the directory it lives
/// in, its format and its default lock.
///
/// Resolution canonicalises the directory (symbolic links in directory
/// components are followed) and keeps the file name, so the file need not
/// exist yet. If the file itself is a symbolic link to a file **in the same
/// directory**, the target is what is read and replaced, and the link is
/// kept; a link pointing into any other directory is refused, because the
/// atomic replace must happen in the directory of the real file.
#[derive(Clone, Debug)]
pub struct StateFile {
    given: PathBuf,
    path: PathBuf,
    dir: PathBuf,
    name: OsString,
    format: Format,
}

impl StateFile {
    /// Resolves `path`. Fails if its directory does not exist, if it is a
    /// directory or another non-regular file, or if it is a symbolic link
    /// leaving its directory.
    pub fn resolve(path: impl AsRef<Path>) -> Result<StateFile, StateError> {
        let given = path.as_ref().to_path_buf();
        let no_name = || StateError::NoFileName {
            path: given.clone(),
        };
        let name = match given.components().next_back() {
            Some(Component::Normal(n)) => n.to_os_string(),
            _ => return Err(no_name()),
        };
        if ends_in_separator(given.as_os_str()) {
            return Err(no_name());
        }
        let parent = match given.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let dir = fs::canonicalize(parent)
            .and_then(|dir| match fs::metadata(&dir) {
                // The system's own "not a directory" (ENOTDIR, Windows'
                // ERROR_DIRECTORY), from the listing that cannot be made.
                Ok(m) if !m.is_dir() => Err(fs::read_dir(&dir)
                    .err()
                    .unwrap_or_else(|| io::Error::other("not a directory"))),
                _ => Ok(dir),
            })
            .context("cannot resolve the directory of", &given)?;
        let mut name = name;
        let mut hops = 0;
        loop {
            let path = dir.join(&name);
            match fs::symlink_metadata(&path) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                Err(e) => return Err(e).context("cannot inspect", &path).map_err(Into::into),
                Ok(meta) => {
                    let ft = meta.file_type();
                    if ft.is_symlink() {
                        hops += 1;
                        if hops > MAX_LINK_HOPS {
                            return Err(StateError::SymlinkLoop { path: given });
                        }
                        name = same_dir_link_target(&dir, &path)?;
                        continue;
                    }
                    if !ft.is_file() {
                        return Err(StateError::NotAFile {
                            path,
                            what: baton_fs::describe_file_type(&ft),
                        });
                    }
                    break;
                }
            }
        }
        let path = dir.join(&name);
        Ok(StateFile {
            given,
            format: Format::of(&path),
            path,
            dir,
            name,
        })
    }

    /// The path as given to [`StateFile::resolve`].
    pub fn given(&self) -> &Path {
        &self.given
    }

    /// The real file: canonical directory plus file name (a link's target).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The canonical directory the file lives in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file's name within [`StateFile::dir`].
    pub fn name(&self) -> &OsStr {
        &self.name
    }

    /// How its content is checked.
    pub fn format(&self) -> Format {
        self.format
    }

    /// Where [`append`](crate::append) keeps the bytes of torn lines: `FILE.torn`.
    pub fn torn_path(&self) -> PathBuf {
        let mut name = self.name.clone();
        name.push(".torn");
        self.dir.join(name)
    }

    /// The lock that guards this file unless the caller names another:
    /// `state/<canonical path without the leading '/'>`. Paths that are not
    /// valid lock names (too long, not UTF-8, control characters) become
    /// `state/~<hash of the path>/<file name, cleaned and shortened>`.
    ///
    /// On Windows the path is written with `/` between its components, its
    /// drive as `c:` and a network share as `unc/server/share`, all in
    /// lower case: NTFS ignores case, so `Tasks.json` and `tasks.json` name
    /// one file, which must have one lock (`state/c:/users/me/tasks.json`).
    pub fn default_lock_name(&self) -> Result<LockName, StateError> {
        if let Some(rel) = lock_path(&self.path) {
            if let Ok(name) = LockName::new(format!("state/{rel}")) {
                return Ok(name);
            }
        }
        let hash = if cfg!(windows) {
            hex_prefix(fold_case(&self.path.to_string_lossy()).as_bytes(), 16)
        } else {
            hex_prefix(self.path.as_os_str().as_encoded_bytes(), 16)
        };
        let mut short: String = fold_case(&self.name.to_string_lossy())
            .chars()
            .map(|c| if c.is_control() { '_' } else { c })
            .collect();
        truncate_at_char(&mut short, 120);
        // `state/~<hex>` is always valid; the cleaned name almost always is.
        LockName::new(format!("state/~{hash}/{short}"))
            .or_else(|_| LockName::new(format!("state/~{hash}")))
            .map_err(StateError::from)
    }

    /// Whether `name`, in this file's directory, is one of its temporary
    /// files: it starts with [`StateFile::temp_prefix`]; on Windows in any
    /// case (NTFS ignores it, and every spelling shares the file's lock).
    pub(crate) fn is_temp_name(&self, name: &OsStr) -> bool {
        let prefix = self.temp_prefix();
        if cfg!(windows) {
            fold_case(&name.to_string_lossy()).starts_with(&fold_case(&prefix.to_string_lossy()))
        } else {
            name.as_encoded_bytes()
                .starts_with(prefix.as_encoded_bytes())
        }
    }

    /// The prefix of this file's temporary files: `.<name>.baton-tmp-`. A
    /// name too long to leave room for the suffix is shortened and given a
    /// hash, so two files never share a prefix.
    pub(crate) fn temp_prefix(&self) -> OsString {
        let short = baton_fs::shorten_name(&self.name, 180, 160);
        let mut out = OsString::with_capacity(short.len() + 40);
        out.push(".");
        out.push(&short);
        if short != self.name {
            let name = fold_case(&self.name.to_string_lossy());
            if cfg!(windows) {
                out.push(hex_prefix(name.as_bytes(), 16));
            } else {
                out.push(hex_prefix(self.name.as_encoded_bytes(), 16));
            }
        }
        out.push(".baton-tmp-");
        out
    }
}

/// The target of the link at `link` (inside `dir`), as a name in `dir`;
/// refuses targets in any other directory.
fn same_dir_link_target(dir: &Path, link: &Path) -> Result<OsString, StateError> {
    let target = fs::read_link(link).context("cannot read symbolic link", link)?;
    let outside = || StateError::SymlinkOutside {
        path: link.to_path_buf(),
        target: target.clone(),
    };
    let Some(Component::Normal(name)) = target.components().next_back() else {
        return Err(outside());
    };
    let name = name.to_os_string();
    if ends_in_separator(target.as_os_str()) {
        return Err(outside());
    }
    let parent = match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => return Ok(name),
    };
    let parent = if parent.is_absolute() {
        parent.to_path_buf()
    } else {
        dir.join(parent)
    };
    match fs::canonicalize(&parent) {
        Ok(p) if p == dir => Ok(name),
        _ => Err(outside()),
    }
}

/// The canonical `path` as the default lock name has it (see
/// [`StateFile::default_lock_name`]), `None` if it is not valid Unicode: on
/// unix without its leading `/`, on Windows with `/` between components
/// and in lower case.
fn lock_path(path: &Path) -> Option<String> {
    if !cfg!(windows) {
        let s = path.to_str()?;
        return Some(s.strip_prefix('/').unwrap_or(s).to_owned());
    }
    let mut parts = Vec::new();
    for c in path.components() {
        match c {
            Component::Prefix(p) => match p.kind() {
                Prefix::Disk(d) | Prefix::VerbatimDisk(d) => {
                    parts.push(format!("{}:", char::from(d)));
                }
                Prefix::UNC(server, share) | Prefix::VerbatimUNC(server, share) => {
                    parts.push(format!("unc/{}/{}", server.to_str()?, share.to_str()?));
                }
                Prefix::Verbatim(x) | Prefix::DeviceNS(x) => parts.push(x.to_str()?.to_owned()),
            },
            Component::Normal(n) => parts.push(n.to_str()?.to_owned()),
            Component::RootDir | Component::CurDir | Component::ParentDir => {}
        }
    }
    Some(fold_case(&parts.join("/")))
}

/// `s` in lower case on Windows, whose file systems ignore case; as it is
/// elsewhere.
fn fold_case(s: &str) -> String {
    if cfg!(windows) {
        s.to_lowercase()
    } else {
        s.to_owned()
    }
}

/// Whether `path` ends in a separator (`/`; on Windows `\\` too), which
/// `Path::components` would hide.
fn ends_in_separator(path: &OsStr) -> bool {
    path.as_encoded_bytes()
        .last()
        .is_some_and(|&b| is_separator(char::from(b)))
}

/// The first `digits` hex digits of the SHA-256 of `bytes`.
pub(crate) fn hex_prefix(bytes: &[u8], digits: usize) -> String {
    let digest = Sha256::digest(bytes);
    let mut hex = String::with_capacity(digits + 1);
    for b in digest.iter().take(digits.div_ceil(2)) {
        hex.push_str(&format!("{b:02x}"));
    }
    hex.truncate(digits);
    hex
}

fn truncate_at_char(s: &mut String, max: usize) {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    // Symbolic links are tested on unix only: Windows needs a privilege to
    // make one, and wine's read back as something else.
    #[cfg(unix)]
    use std::os::unix::fs::symlink;

    #[test]
    fn format_follows_the_extension() {
        assert_eq!(Format::of(Path::new("a/tasks.json")), Format::Json);
        assert_eq!(Format::of(Path::new("EVENTS.JSONL")), Format::JsonLines);
        assert_eq!(Format::of(Path::new("notes.md")), Format::Text);
        assert_eq!(Format::of(Path::new("json")), Format::Text);
    }

    #[test]
    fn resolves_missing_files_and_same_directory_links() {
        let t = tempfile::tempdir().unwrap();
        let dir = fs::canonicalize(t.path()).unwrap();
        let f = StateFile::resolve(t.path().join("new.json")).unwrap();
        assert_eq!(f.path(), dir.join("new.json"));
        assert_eq!(f.format(), Format::Json);
        #[cfg(unix)]
        same_directory_links(&dir);
    }

    #[cfg(unix)]
    fn same_directory_links(dir: &Path) {
        fs::write(dir.join("real.json"), "{}").unwrap();
        symlink("real.json", dir.join("link.json")).unwrap();
        symlink(dir.join("link.json"), dir.join("link2.json")).unwrap();
        for l in ["link.json", "link2.json"] {
            let f = StateFile::resolve(dir.join(l)).unwrap();
            assert_eq!(f.path(), dir.join("real.json"), "{l}");
        }
        // A dangling link inside the directory names the file to create.
        symlink("later.json", dir.join("dangling.json")).unwrap();
        let f = StateFile::resolve(dir.join("dangling.json")).unwrap();
        assert_eq!(f.path(), dir.join("later.json"));
    }

    #[test]
    fn refuses_directories_links_outside_and_loops() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path();
        fs::create_dir(dir.join("sub")).unwrap();
        fs::write(dir.join("sub/x.json"), "{}").unwrap();
        assert!(matches!(
            StateFile::resolve(dir.join("sub")),
            Err(StateError::NotAFile {
                what: "a directory",
                ..
            })
        ));
        #[cfg(unix)]
        {
            symlink("sub/x.json", dir.join("out.json")).unwrap();
            assert!(matches!(
                StateFile::resolve(dir.join("out.json")),
                Err(StateError::SymlinkOutside { .. })
            ));
            symlink("/etc/passwd", dir.join("abs")).unwrap();
            assert!(matches!(
                StateFile::resolve(dir.join("abs")),
                Err(StateError::SymlinkOutside { .. })
            ));
            symlink("loop2", dir.join("loop1")).unwrap();
            symlink("loop1", dir.join("loop2")).unwrap();
            assert!(matches!(
                StateFile::resolve(dir.join("loop1")),
                Err(StateError::SymlinkLoop { .. })
            ));
        }
        for bad in ["", "/", "a/..", "x/"] {
            assert!(
                matches!(StateFile::resolve(bad), Err(StateError::NoFileName { .. })),
                "{bad:?}"
            );
        }
        assert!(matches!(
            StateFile::resolve(dir.join("missing-dir/x.json")),
            Err(StateError::Io(_))
        ));
    }

    #[test]
    fn default_lock_names_are_valid_for_any_path() {
        let t = tempfile::tempdir().unwrap();
        let f = StateFile::resolve(t.path().join("tasks.json")).unwrap();
        let name = f.default_lock_name().unwrap();
        if cfg!(windows) {
            // `state/c:/...`, in lower case: one lock for every spelling.
            let other = StateFile::resolve(t.path().join("TASKS.Json")).unwrap();
            assert_eq!(other.default_lock_name().unwrap(), name);
            let rest = name.as_str().strip_prefix("state/").unwrap();
            assert!(rest.as_bytes()[0].is_ascii_lowercase(), "{name}");
            assert_eq!(&rest[1..3], ":/", "{name}");
            assert!(
                !rest.contains('\\') && rest.ends_with("/tasks.json"),
                "{name}"
            );
            assert_eq!(rest, rest.to_lowercase());
        } else {
            let expect = format!(
                "state/{}",
                f.path().to_str().unwrap().trim_start_matches('/')
            );
            assert_eq!(name.as_str(), expect);
        }

        let long = "n".repeat(250);
        // Not UTF-8 (unix), or with a character no lock name may have.
        #[cfg(unix)]
        let odd =
            <OsString as std::os::unix::ffi::OsStringExt>::from_vec(b"bad\n\xffname.json".to_vec());
        #[cfg(windows)]
        let odd = OsString::from("bad\u{85}name.json");
        let a = StateFile::resolve(t.path().join(&long)).unwrap();
        let b = StateFile::resolve(t.path().join(&odd)).unwrap();
        let c = StateFile::resolve(t.path().join(format!("{long}x"))).unwrap();
        for f in [&a, &b, &c] {
            let n = f.default_lock_name().unwrap();
            assert!(n.as_str().starts_with("state/~"), "{n}");
        }
        assert_ne!(
            a.default_lock_name().unwrap(),
            c.default_lock_name().unwrap()
        );
        assert!(a.temp_prefix().len() < 200);
        assert_ne!(a.temp_prefix(), c.temp_prefix());
    }
}
