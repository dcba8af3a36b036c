//! Whether the baton dir's filesystem keeps kernel locks as baton needs:
//! `baton doctor` judges it, and `baton run` and `baton lock acquire` warn
//! (once, on stderr) when it is a network or FUSE filesystem.
//!
//! How the filesystem is found is a parameter ([`FsProbe`]): the binary
//! always asks the kernel (`baton_lock::filesystem`); tests pass a probe
//! that names a network or FUSE filesystem, in process, since no such
//! mount can be made where they run.

use std::path::Path;

use baton_lock::{BatonDir, Filesystem, FsClass, LockError};

/// Finds the filesystem under a path: [`baton_lock::filesystem`] (`statfs`)
/// in the binary.
pub type FsProbe = fn(&Path) -> Result<Filesystem, LockError>;

/// What a network or FUSE filesystem means for locks, in one sentence.
pub(crate) fn danger(fs: &Filesystem) -> String {
    let what = match fs.class {
        FsClass::Fuse => "a FUSE filesystem, whose locks a user-space daemon implements, if at all: exclusion, and the release of a dead holder's lock, are only as good as that daemon",
        _ => "a network filesystem, whose locks a server's lock manager keeps, not this kernel: a holder on another machine that dies keeps its lock until the server notices, and exclusion is only as good as that server",
    };
    format!("{} ({what})", fs.name)
}

pub(crate) fn local_dir_remedy() -> String {
    let (local, _) = baton_lock::user_location();
    format!(
        "keep the baton dir on a local filesystem: --dir {0} or BATON_DIR={0} (every process that shares locks must use the same one)",
        local.display()
    )
}

/// `baton run` and `baton lock acquire`: one warning on stderr when the
/// baton dir is on a network or FUSE filesystem (nothing otherwise, and
/// nothing when the type cannot be read: the command itself will say).
pub(crate) fn warn_if_remote(dir: &BatonDir) {
    if let Some(line) = remote_warning(dir.path(), baton_lock::filesystem) {
        warnln!("{line}");
    }
}

/// The warning `warn_if_remote` prints for the baton dir at `dir`, if
/// `probe` finds it on a network or FUSE filesystem.
pub fn remote_warning(dir: &Path, probe: FsProbe) -> Option<String> {
    let fs = probe(dir).ok().filter(|fs| fs.class.is_remote())?;
    Some(format!(
        "baton: warning: the baton dir '{}' is on {}; {} (run `baton doctor`)",
        dir.display(),
        danger(&fs),
        local_dir_remedy()
    ))
}
