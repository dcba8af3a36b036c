//! Whether the baton dir's filesystem keeps kernel locks as baton needs:
//! `baton doctor` judges it, and `baton run` and `baton lock acquire` warn
//! (once, on stderr) when it is a network or FUSE filesystem.
//!
//! Test seam: `BATON_TEST_FS_MAGIC` (a `statfs` type such as `0x6969`)
//! replaces the filesystem type of the baton dir, so that the network and
//! FUSE warnings can be tested without such a mount.

use std::path::{Path, PathBuf};

use baton_lock::{BatonDir, Filesystem, FsClass, LockError};

/// The test seam described in the module doc.
const FS_MAGIC_ENV: &str = "BATON_TEST_FS_MAGIC";

/// The filesystem under `path`, or the one `BATON_TEST_FS_MAGIC` names.
pub(crate) fn filesystem_of(path: &Path) -> Result<Filesystem, LockError> {
    let seam = std::env::var(FS_MAGIC_ENV).ok().and_then(|v| {
        let v = v.trim();
        match v.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16).ok(),
            None => v.parse().ok(),
        }
    });
    match seam {
        Some(magic) => Ok(Filesystem::from_magic(magic)),
        None => baton_lock::filesystem(path),
    }
}

/// What a network or FUSE filesystem means for locks, in one sentence.
pub(crate) fn danger(fs: &Filesystem) -> String {
    let what = match fs.class {
        FsClass::Fuse => "a FUSE filesystem, whose locks a user-space daemon implements, if at all: exclusion, and the release of a dead holder's lock, are only as good as that daemon",
        _ => "a network filesystem, whose locks a server's lock manager keeps, not this kernel: a holder on another machine that dies keeps its lock until the server notices, and exclusion is only as good as that server",
    };
    format!("{} ({what})", fs.name)
}

pub(crate) fn local_dir_remedy() -> String {
    let uid = rustix::process::geteuid().as_raw();
    let local = std::env::var_os("XDG_RUNTIME_DIR")
        .filter(|d| !d.is_empty())
        .map(|d| PathBuf::from(d).join("baton"))
        .unwrap_or_else(|| std::env::temp_dir().join(format!("baton-{uid}")));
    format!(
        "keep the baton dir on a local filesystem: --dir {0} or BATON_DIR={0} (every process that shares locks must use the same one)",
        local.display()
    )
}

/// `baton run` and `baton lock acquire`: one warning on stderr when the
/// baton dir is on a network or FUSE filesystem (nothing otherwise, and
/// nothing when the type cannot be read: the command itself will say).
pub(crate) fn warn_if_remote(dir: &BatonDir) {
    if let Ok(fs) = filesystem_of(dir.path()) {
        if fs.class.is_remote() {
            errln!(
                "baton: warning: the baton dir '{}' is on {}; {} (run `baton doctor`)",
                dir.path().display(),
                danger(&fs),
                local_dir_remedy()
            );
        }
    }
}
