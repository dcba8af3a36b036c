//! Finding and vetting the baton dir, where all coordination state lives.
//!
//! Resolution order (docs/src/design/architecture.md, decision 10): an explicit path, else
//! `BATON_DIR`, else the per-user dir of this machine ([`user_location`]):
//! `<temp dir>/baton-<uid>`. So a lock name means one lock for every process
//! of the user on the machine, whatever clone or directory it runs in, and
//! whether or not it runs in a login session: `$XDG_RUNTIME_DIR` is not
//! used, because a cron job, a systemd service or `sudo -u` does not have
//! it while the user's shells do, and the two would not exclude each other. The directory is created `0700` if missing and
//! refused if it is a symlink, writable by every user, or not ours — unless
//! it is shared with a group we are in (`baton init --shared`, see
//! [`crate::sharing`]).
//!
//! Why a temporary dir (often a tmpfs) and not a dir that lasts: the kernel
//! locks live only as long as their holders anyway, and fencing tokens never
//! go back when lock files are lost (each is at least the wall clock in
//! microseconds, `docs/src/design/locking.md` "Fencing tokens"), so nothing in the dir has to
//! survive a reboot; a lock file deleted under its holder by a cleaner is
//! detected by the next acquirer (`docs/src/design/locking.md`, "When the lock file is
//! deleted").
//! What must survive (workspaces, the repository's lock) is kept per
//! repository, in `<git common dir>/baton`.
//!
//! Before this rule, the default inside a git repository was that
//! repository's `<git common dir>/baton`, one per clone; [`previous_default`]
//! finds it, so that callers can warn about holders still there.

use std::fs;
#[cfg(unix)]
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::error::LockError;
use crate::name::LockName;
use baton_fs::IoResultExt;

/// A vetted baton dir.
#[derive(Clone, Debug)]
pub struct BatonDir {
    path: PathBuf,
    sharing: Sharing,
}

/// Who may use a baton dir.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sharing {
    /// Its owner only.
    Private,
    /// Every member of a group: the dir is set-group-ID and group-writable
    /// (`baton init --shared GROUP DIR`).
    Group {
        /// The group's id.
        gid: u32,
    },
}

/// Which rule of the resolution order (docs/src/design/architecture.md, decision 10) chose a baton
/// dir; see [`BatonDir::locate`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DirRule {
    /// Given explicitly (`--dir`).
    Explicit,
    /// The `BATON_DIR` environment variable.
    Env,
    /// `<temp dir>/baton-<uid>`: this user's dir on this machine.
    TempDir,
}

impl DirRule {
    /// A stable short name: `explicit`, `env`, `temp_dir`.
    pub fn as_str(&self) -> &'static str {
        match self {
            DirRule::Explicit => "explicit",
            DirRule::Env => "env",
            DirRule::TempDir => "temp_dir",
        }
    }
}

impl std::fmt::Display for DirRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DirRule::Explicit => f.write_str("given with --dir"),
            DirRule::Env => f.write_str("from $BATON_DIR"),
            DirRule::TempDir => f.write_str(
                "no --dir or $BATON_DIR: this user's dir on this machine, <temp dir>/baton-<uid>",
            ),
        }
    }
}

impl BatonDir {
    /// Resolves the baton dir from an explicit path, the environment or the
    /// working directory, creates it if needed and vets it.
    pub fn resolve(explicit: Option<&Path>) -> Result<BatonDir, LockError> {
        let (path, _) = BatonDir::locate(explicit)?;
        BatonDir::open(path)
    }

    /// Where [`BatonDir::resolve`] would put the baton dir, and which rule
    /// chose it; creates and vets nothing.
    pub fn locate(explicit: Option<&Path>) -> Result<(PathBuf, DirRule), LockError> {
        if let Some(p) = explicit {
            return Ok((p.to_path_buf(), DirRule::Explicit));
        }
        if let Some(dir) = std::env::var_os("BATON_DIR").filter(|d| !d.is_empty()) {
            return Ok((PathBuf::from(dir), DirRule::Env));
        }
        let (path, rule) = user_location();
        // The temporary dir itself must exist: only this user's dir in it is
        // created (a `$TMPDIR` naming nothing is a mistake to report, not a
        // tree to make).
        if let Some(tmp) = path.parent().filter(|t| !t.is_dir()) {
            return Err(LockError::UnsafeDir {
                path: path.clone(),
                reason: format!(
                    "the temporary dir '{}' ($TMPDIR, else /tmp) is not a directory; set TMPDIR to one, or name a baton dir with --dir or BATON_DIR",
                    tmp.display()
                ),
            });
        }
        Ok((path, rule))
    }

    /// Uses `path` as the baton dir, creating it (mode 0700) if needed.
    pub fn open(path: impl Into<PathBuf>) -> Result<BatonDir, LockError> {
        let path = path.into();
        let path = if path.is_absolute() {
            path
        } else {
            std::env::current_dir()
                .context("cannot read the working directory for", &path)?
                .join(path)
        };
        match fs::symlink_metadata(&path) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                crate::sys::create_private_dir_all(&path)
                    .context("cannot create baton dir", &path)?;
                // Inside a shared baton dir (`groups/`), shared in turn.
                if path.parent().is_some_and(crate::sharing::is_shared) {
                    crate::sys::set_mode(&path, 0o2770)
                        .context("cannot create baton dir", &path)?;
                }
            }
            Err(e) => {
                return Err(e)
                    .context("cannot inspect baton dir", &path)
                    .map_err(Into::into)
            }
        }
        let sharing = vet(&path)?;
        // One spelling per directory (`d/`, `./d`, a symlinked parent): the
        // marker of a lock is derived from this path (docs/src/design/locking.md).
        let path = fs::canonicalize(&path).context("cannot resolve baton dir", &path)?;
        let dir = BatonDir { path, sharing };
        let locks = dir.locks_dir();
        crate::sharing::create_dir(&locks).context("cannot create lock directory", &locks)?;
        vet(&locks)?;
        Ok(dir)
    }

    /// Makes `path` (created if missing) a baton dir shared by the members of
    /// group `gid`: the group owns it and what is already in it, it is
    /// set-group-ID and group-writable (mode 2770), and not accessible to
    /// others. The caller must own it (or be root) and be in the group (or
    /// be root). Idempotent.
    #[cfg(windows)]
    pub fn init_shared(path: &Path, gid: u32) -> Result<BatonDir, LockError> {
        Err(LockError::UnsafeDir {
            path: path.to_path_buf(),
            reason: format!("cannot be shared with group gid {gid}: Windows has no set-group-ID directories; share the directory through its ACL instead"),
        })
    }

    /// Makes `path` (created if missing) a baton dir shared by the members of
    /// group `gid`: the group owns it and what is already in it, it is
    /// set-group-ID and group-writable (mode 2770), and not accessible to
    /// others. The caller must own it (or be root) and be in the group (or
    /// be root). Idempotent.
    #[cfg(unix)]
    pub fn init_shared(path: &Path, gid: u32) -> Result<BatonDir, LockError> {
        let refuse = |reason: String| LockError::UnsafeDir {
            path: path.to_path_buf(),
            reason,
        };
        let root = rustix::process::geteuid().is_root();
        if !root && !crate::sharing::is_member(gid) {
            return Err(refuse(format!(
                "cannot be shared with group {}: you are not in it",
                crate::sharing::describe_group(gid)
            )));
        }
        match fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(refuse(
                    "is a symbolic link; use the real directory path".into(),
                ))
            }
            Ok(m) if !m.is_dir() => return Err(refuse("is not a directory".into())),
            Ok(m) if !root && m.uid() != rustix::process::geteuid().as_raw() => {
                return Err(refuse(format!(
                    "is owned by uid {}; only its owner (or root) can share it",
                    m.uid()
                )))
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                crate::sys::create_private_dir_all(path)
                    .context("cannot create baton dir", path)?;
            }
            Err(e) => {
                return Err(e)
                    .context("cannot inspect baton dir", path)
                    .map_err(Into::into)
            }
        }
        share_tree(path, gid, 0)?;
        BatonDir::open(path)
    }

    /// Who may use this dir.
    pub fn sharing(&self) -> Sharing {
        self.sharing
    }

    /// The directory itself.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `<baton dir>/locks`, where lock files live.
    pub fn locks_dir(&self) -> PathBuf {
        self.path.join("locks")
    }

    /// The lock file of `name`.
    pub fn lock_path(&self, name: &LockName) -> PathBuf {
        self.locks_dir().join(format!("{}.lock", name.file_stem()))
    }
}

/// Gives group `gid` the directory `path` and, below it, what baton keeps
/// there (not the checkouts of workspaces, which belong to their users).
#[cfg(unix)]
fn share_tree(path: &Path, gid: u32, depth: u32) -> Result<(), LockError> {
    let meta = fs::symlink_metadata(path).context("cannot inspect", path)?;
    if meta.file_type().is_symlink() {
        return Ok(());
    }
    rustix::fs::chown(path, None, Some(rustix::fs::Gid::from_raw(gid)))
        .map_err(std::io::Error::from)
        .context("cannot change the group of", path)?;
    let mode = if meta.is_dir() {
        (meta.mode() & 0o7777 & !0o007) | 0o2770
    } else {
        (meta.mode() & 0o777 & !0o007) | 0o060
    };
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .context("cannot change the permissions of", path)?;
    if !meta.is_dir() || depth > 3 {
        return Ok(());
    }
    let in_workspaces = path.file_name().is_some_and(|n| n == "workspaces") && depth == 1;
    for entry in fs::read_dir(path).context("cannot list", path)? {
        let entry = entry.context("cannot list", path)?;
        let is_checkout = in_workspaces && entry.file_name() != ".registry";
        if is_checkout {
            continue;
        }
        share_tree(&entry.path(), gid, depth + 1)?;
    }
    Ok(())
}

/// Refuses a directory that another user could tamper with; says whether it
/// is shared with a group.
fn vet(path: &Path) -> Result<Sharing, LockError> {
    let refuse = |reason: String| LockError::UnsafeDir {
        path: path.to_path_buf(),
        reason,
    };
    let meta = fs::symlink_metadata(path).context("cannot inspect baton dir", path)?;
    if meta.file_type().is_symlink() {
        return Err(refuse(
            "is a symbolic link; use the real directory path".into(),
        ));
    }
    if !meta.is_dir() {
        return Err(refuse("is not a directory".into()));
    }
    crate::sys::vet_owner(&meta).map_err(refuse)
}

/// This user's baton dir on this machine, the default when neither `--dir`
/// nor `BATON_DIR` names one: `<temp dir>/baton-<uid>` (`$TMPDIR`, else
/// `/tmp`), vetted like any baton dir when opened (one made by another user
/// first is refused, never used). Not `$XDG_RUNTIME_DIR`: processes of one
/// user outside a login session (cron, systemd services, `sudo -u`) do not
/// have it, and would get another dir than the user's shells.
pub fn user_location() -> (PathBuf, DirRule) {
    (
        std::env::temp_dir().join(format!("baton-{}", crate::sys::user_tag())),
        DirRule::TempDir,
    )
}

/// The baton dir an older baton used by default in the git repository
/// around `cwd` (`<git common dir>/baton`, one per clone), if it exists and
/// has locks in it; `None` when it is `current` (named explicitly).
pub fn previous_default(cwd: &Path, current: &Path) -> Option<PathBuf> {
    let old = git_common_dir(cwd)?.join("baton");
    let same = fs::canonicalize(current).is_ok_and(|c| c == old);
    (!same && old.join("locks").is_dir()).then_some(old)
}

/// The common git dir of the repository containing `start`, found without
/// running git: `.git` directories, `.git` files of worktrees (`gitdir:`) and
/// their `commondir` pointers.
pub fn git_common_dir(start: &Path) -> Option<PathBuf> {
    for dir in start.ancestors() {
        let dotgit = dir.join(".git");
        let meta = match fs::metadata(&dotgit) {
            Ok(m) => m,
            Err(_) => continue,
        };
        let gitdir = if meta.is_dir() {
            dotgit
        } else {
            let text = fs::read_to_string(&dotgit).ok()?;
            let target = text.strip_prefix("gitdir:")?.trim();
            let target = Path::new(target);
            if target.is_absolute() {
                target.to_path_buf()
            } else {
                dir.join(target)
            }
        };
        let common = match fs::read_to_string(gitdir.join("commondir")) {
            Ok(rel) => {
                let rel = Path::new(rel.trim());
                if rel.is_absolute() {
                    rel.to_path_buf()
                } else {
                    gitdir.join(rel)
                }
            }
            Err(_) => gitdir,
        };
        return fs::canonicalize(&common).ok();
    }
    None
}
