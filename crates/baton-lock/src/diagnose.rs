//! Facts about the place a baton dir lives, for `baton doctor` and for the
//! warning `baton run` prints about network filesystems.
//!
//! Every guarantee of this crate rests on the kernel releasing a lock when
//! its holder dies and on waiters blocking in the kernel. On a local
//! filesystem both hold. On a network filesystem (NFS, SMB/CIFS, 9p, Ceph,
//! ...) locks are forwarded to a server's lock manager: a holder on another
//! machine that dies keeps its lock until the server notices, and some
//! servers do not support byte-range locks at all. A FUSE filesystem
//! implements locks in a user-space daemon, or not at all. So the filesystem
//! type is classified ([`filesystem`]), and whether OFD locks exclude and
//! wake each other there is tried for real ([`probe_locks`]).

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::error::LockError;
use crate::ofd::{self, Kind};
use baton_fs::IoResultExt;

/// What kind of filesystem a path is on, as far as locking is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FsClass {
    /// A local filesystem: kernel locks behave as baton expects.
    Local,
    /// A network or cluster filesystem: locks depend on a server.
    Network,
    /// A FUSE filesystem: locks depend on a user-space daemon.
    Fuse,
    /// A type this table does not know.
    Unknown,
}

impl FsClass {
    /// `local`, `network`, `fuse` or `unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            FsClass::Local => "local",
            FsClass::Network => "network",
            FsClass::Fuse => "fuse",
            FsClass::Unknown => "unknown",
        }
    }

    /// Whether kernel locks there cannot be trusted as on a local disk.
    pub fn is_remote(self) -> bool {
        matches!(self, FsClass::Network | FsClass::Fuse)
    }
}

/// The filesystem under a path: its `statfs(2)` type and what it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Filesystem {
    /// `f_type` of `statfs(2)` (the superblock magic number).
    pub magic: u64,
    /// Its usual name (`ext4`, `nfs`, ...), or `unknown`.
    pub name: &'static str,
    /// What it means for locking.
    pub class: FsClass,
}

/// Superblock magic numbers (`linux/magic.h`, `statfs(2)`), by class.
const TYPES: &[(u64, &str, FsClass)] = &[
    (0xEF53, "ext2/3/4", FsClass::Local),
    (0x5846_5342, "xfs", FsClass::Local),
    (0x9123_683E, "btrfs", FsClass::Local),
    (0x0102_1994, "tmpfs", FsClass::Local),
    (0x8584_58F6, "ramfs", FsClass::Local),
    (0x794C_7630, "overlayfs", FsClass::Local),
    (0x2FC1_2FC1, "zfs", FsClass::Local),
    (0xF2F5_2010, "f2fs", FsClass::Local),
    (0xCA45_1A4E, "bcachefs", FsClass::Local),
    (0x5265_4973, "reiserfs", FsClass::Local),
    (0x3153_464A, "jfs", FsClass::Local),
    (0x4D44, "vfat", FsClass::Local),
    (0x2011_BAB0, "exfat", FsClass::Local),
    (0x5346_544E, "ntfs", FsClass::Local),
    (0x7371_7368, "squashfs", FsClass::Local),
    (0xF15F, "ecryptfs", FsClass::Local),
    (0x6969, "nfs", FsClass::Network),
    (0x517B, "smb", FsClass::Network),
    (0xFF53_4D42, "cifs", FsClass::Network),
    (0xFE53_4D42, "smb2", FsClass::Network),
    (0x0102_1997, "9p", FsClass::Network),
    (0x00C3_6400, "ceph", FsClass::Network),
    (0x5346_414F, "afs", FsClass::Network),
    (0x6B41_4653, "afs", FsClass::Network),
    (0x7375_7245, "coda", FsClass::Network),
    (0x564C, "ncp", FsClass::Network),
    (0x0116_1970, "gfs2", FsClass::Network),
    (0x7461_636F, "ocfs2", FsClass::Network),
    (0x0BD0_0BD0, "lustre", FsClass::Network),
    (0x6573_5546, "fuse", FsClass::Fuse),
];

impl Filesystem {
    /// Classifies a `statfs(2)` type.
    pub fn from_magic(magic: u64) -> Filesystem {
        let magic = magic & 0xFFFF_FFFF;
        match TYPES.iter().find(|(m, _, _)| *m == magic) {
            Some(&(magic, name, class)) => Filesystem { magic, name, class },
            None => Filesystem {
                magic,
                name: "unknown",
                class: FsClass::Unknown,
            },
        }
    }
}

/// The filesystem `path` is on (`statfs(2)`).
pub fn filesystem(path: &Path) -> Result<Filesystem, LockError> {
    let magic = crate::sys::filesystem_magic(path).context("cannot statfs", path)?;
    Ok(Filesystem::from_magic(magic))
}

/// Space left for workspaces and state on the filesystem of a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Space {
    /// Bytes available to unprivileged users.
    pub available_bytes: u64,
    /// Size of the filesystem in bytes.
    pub total_bytes: u64,
    /// Inodes (files) available to unprivileged users.
    pub available_inodes: u64,
}

/// Free space on the filesystem of `path` (`statvfs(2)`).
pub fn free_space(path: &Path) -> Result<Space, LockError> {
    crate::sys::free_space(path)
        .context("cannot statvfs", path)
        .map_err(Into::into)
}

/// What [`probe_locks`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LockProbe {
    /// One descriptor's lock blocked the other until it was released.
    Works,
    /// The filesystem refused OFD locks (the error says how).
    Unsupported(String),
    /// The second descriptor got the lock while the first held it.
    NotExclusive,
    /// The release did not let the waiting descriptor in.
    NotReleased,
}

/// How long the probe's blocked descriptor waits before it counts as blocked.
const BLOCKED_FOR: Duration = Duration::from_millis(30);
/// How long the probe waits for the lock after its release.
const RELEASE_PATIENCE: Duration = Duration::from_secs(2);

/// Tries OFD locks for real in `dir`: a fresh file opened twice (two open
/// file descriptions, as two processes would have), a write lock on the
/// first, then the second must be refused at once, stay blocked in the
/// kernel until a deadline, and get the lock once the first releases it.
/// The file is unlinked as soon as both are open.
pub fn probe_locks(dir: &Path) -> Result<LockProbe, LockError> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let path = dir.join(format!(".probe-{}-{nanos}", std::process::id()));
    let open = |create: bool| {
        crate::sys::probe_file_options()
            .create_new(create)
            .open(&path)
    };
    let first = open(true).context("cannot create probe file", &path)?;
    let second = open(false);
    let removed = fs::remove_file(&path);
    let second = second.context("cannot open probe file", &path)?;
    removed.context("cannot remove probe file", &path)?;
    let (a, b) = (&first, &second);
    let refused = |e: std::io::Error| Ok(LockProbe::Unsupported(e.to_string()));
    match ofd::try_lock(a, Kind::Write, 0, 1) {
        Ok(true) => {}
        Ok(false) => return Ok(LockProbe::NotExclusive),
        Err(e) => return refused(e),
    }
    match ofd::try_lock(b, Kind::Write, 0, 1) {
        Ok(false) => {}
        Ok(true) => return Ok(LockProbe::NotExclusive),
        Err(e) => return refused(e),
    }
    match ofd::lock_wait(
        b,
        Kind::Write,
        0,
        1,
        Some(Instant::now() + BLOCKED_FOR),
        None,
    ) {
        Ok(false) => {}
        Ok(true) => return Ok(LockProbe::NotExclusive),
        Err(e) => return refused(e),
    }
    if let Err(e) = ofd::unlock(a, 0, 1) {
        return refused(e);
    }
    let deadline = Some(Instant::now() + RELEASE_PATIENCE);
    match ofd::lock_wait(b, Kind::Write, 0, 1, deadline, None) {
        Ok(true) => Ok(LockProbe::Works),
        Ok(false) => Ok(LockProbe::NotReleased),
        Err(e) => refused(e),
    }
}

/// Whether inotify can be used, and its per-user limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inotify {
    /// An instance could be created and could watch the directory asked
    /// about; else the error (waiters for semaphore slots then poll).
    pub usable: Result<(), String>,
    /// `/proc/sys/fs/inotify/max_user_instances`.
    pub max_user_instances: Option<u64>,
    /// `/proc/sys/fs/inotify/max_user_watches`.
    pub max_user_watches: Option<u64>,
    /// `/proc/sys/fs/inotify/max_queued_events`.
    pub max_queued_events: Option<u64>,
}

/// Tries inotify on `dir` (an instance and a watch) and reads its limits.
pub fn inotify(dir: &Path) -> Inotify {
    let limit = |name: &str| {
        fs::read_to_string(format!("/proc/sys/fs/inotify/{name}"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
    };
    let usable = crate::sys::try_inotify(dir);
    Inotify {
        usable,
        max_user_instances: limit("max_user_instances"),
        max_user_watches: limit("max_user_watches"),
        max_queued_events: limit("max_queued_events"),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test
    use super::*;

    #[test]
    fn network_and_fuse_filesystems_are_told_from_local_ones() {
        for (magic, name) in [
            (0x6969, "nfs"),
            (0xFF53_4D42, "cifs"),
            (0xFE53_4D42, "smb2"),
            (0x517B, "smb"),
            (0x0102_1997, "9p"),
            (0x00C3_6400, "ceph"),
        ] {
            let fs = Filesystem::from_magic(magic);
            assert_eq!((fs.name, fs.class), (name, FsClass::Network), "{magic:#x}");
            assert!(fs.class.is_remote());
        }
        let fuse = Filesystem::from_magic(0x6573_5546);
        assert_eq!(fuse.class, FsClass::Fuse);
        assert!(fuse.class.is_remote());
        for magic in [0xEF53, 0x0102_1994, 0x9123_683E, 0x5846_5342, 0x794C_7630] {
            let fs = Filesystem::from_magic(magic);
            assert_eq!(fs.class, FsClass::Local, "{magic:#x}");
            assert!(!fs.class.is_remote());
        }
        let odd = Filesystem::from_magic(0x1234_5678);
        assert_eq!((odd.name, odd.class), ("unknown", FsClass::Unknown));
        assert!(!odd.class.is_remote());
    }

    #[test]
    fn a_sign_extended_magic_is_still_recognised() {
        // A 32-bit `long` holding CIFS's magic is negative; widened, it
        // carries ones in the upper half.
        let widened = 0xFF53_4D42_u32 as i32 as i64 as u64;
        assert_eq!(Filesystem::from_magic(widened).name, "cifs");
    }

    #[test]
    fn every_magic_appears_once() {
        for (i, (m, _, _)) in TYPES.iter().enumerate() {
            assert!(TYPES[i + 1..].iter().all(|(n, _, _)| n != m), "{m:#x}");
        }
    }

    #[test]
    fn the_probe_finds_working_locks_on_a_local_directory_and_leaves_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(probe_locks(tmp.path()).unwrap(), LockProbe::Works);
        assert_eq!(fs::read_dir(tmp.path()).unwrap().count(), 0);
        let here = filesystem(tmp.path()).unwrap();
        // Windows has no filesystem magic numbers to classify.
        if cfg!(unix) {
            assert_ne!(here.class, FsClass::Unknown, "{here:?}");
        }
        assert!(free_space(tmp.path()).unwrap().total_bytes > 0);
        if cfg!(target_os = "linux") {
            assert_eq!(inotify(tmp.path()).usable, Ok(()));
        } else {
            assert!(inotify(tmp.path()).usable.is_err());
        }
    }
}
