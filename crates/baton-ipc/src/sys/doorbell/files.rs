//! Bells as socket files in a directory: what macOS uses (it has no
//! abstract sockets), and what any unix caller may choose
//! ([`Bells::files_in`](crate::doorbell::Bells::files_in)); Linux tests run
//! this code.
//!
//! The bell `name` is the datagram socket `<dir>/<h>`, where `<h>` is 16 hex
//! digits of the FNV-1a hash of the name, and its *claim* is an exclusive
//! `flock` on `<dir>/<h>.lock`, held as long as the bell lives:
//!
//! - **bind**: open (create) the lock file, take the lock without waiting
//!   (busy: a live bell has the name, `AddrInUse`), check that the path
//!   still names the file locked (else it was removed meanwhile: again),
//!   remove a socket file a dead bell left, bind the socket;
//! - **close**: remove the socket file, then the lock file, then unlock (by
//!   closing it);
//! - **sweep** (at every bind): every lock file of the directory that can be
//!   locked and is still its path's file is a dead bell's (its process
//!   ended without closing it): removed as on close.
//!
//! The lock makes this race-free: two binds of one name never both win, and
//! the files of a live bell are never removed (a sweep cannot lock them; a
//! remover unlinks the socket before the lock file, so a newer bell's
//! socket is never in the way). A sweep that holds a dead bell's lock for
//! those microseconds makes a bind of that very name fail as taken; names
//! are run ids, never bound twice, so that never happens to baton.
//!
//! A socket path has at most 103 bytes on macOS (107 on Linux). When
//! `<dir>/<h>` is longer, the socket is reached through a symbolic link
//! to `dir` in the temporary directory, `baton-<uid>-<hash of dir>` (the
//! socket itself stays in `dir`, so every process that sees `dir` reaches
//! it, each through its own link); an existing link is used only if it is
//! this user's and points to `dir`. When even that path is too long, bind
//! fails saying so.

use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::path::{Path, PathBuf};

use super::claim::{in_context, remove, sweep, Claim};
use super::socket::{self, Doorbell};

/// Binds the bell `name` in `dir` (see the module documentation).
pub(crate) fn bind(dir: &Path, name: &str) -> io::Result<Doorbell> {
    bind_with(dir, name, &std::env::temp_dir())
}

/// Rings the bell `name` in `dir`, if there is one.
pub(crate) fn ring(dir: &Path, name: &str) {
    ring_with(dir, name, &std::env::temp_dir());
}

/// [`bind`], with the short links in `short_root`.
pub(crate) fn bind_with(dir: &Path, name: &str, short_root: &Path) -> io::Result<Doorbell> {
    sweep(dir);
    let stem = stem(name);
    let address = address(dir, &stem, short_root)?;
    let claim = Claim::take(dir, &stem)?;
    let at = |e: io::Error| in_context(e, "bind the doorbell socket", &claim.socket);
    remove(&claim.socket).map_err(at)?;
    let socket = UnixDatagram::bind_addr(&address).map_err(at)?;
    // Writable for the group too, which a shared baton dir (mode 2770)
    // lets ring; a private one (0700) lets nobody else in anyway.
    fs::set_permissions(&claim.socket, fs::Permissions::from_mode(0o660)).map_err(at)?;
    Ok(Doorbell::new(socket, Some(claim)))
}

/// [`ring`], with the short links in `short_root`.
pub(crate) fn ring_with(dir: &Path, name: &str, short_root: &Path) {
    if let Ok(to) = address(dir, &stem(name), short_root) {
        socket::ring(&to);
    }
}

/// The file name of the bell `name`: 16 hex digits of its FNV-1a hash. Two
/// names with one hash fail safe: the second bind is refused as taken.
fn stem(name: &str) -> String {
    format!("{:016x}", fnv1a(name.as_bytes()))
}

/// FNV-1a, 64 bits: fixed, so every build of baton names a bell alike.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The socket address of `<dir>/<stem>`: the path itself, or through the
/// short link when the path is too long for a socket address.
fn address(dir: &Path, stem: &str, short_root: &Path) -> io::Result<SocketAddr> {
    let direct = dir.join(stem);
    if let Ok(address) = SocketAddr::from_pathname(&direct) {
        return Ok(address);
    }
    let link = short_link(dir, short_root)?;
    SocketAddr::from_pathname(link.join(stem)).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "cannot name a doorbell socket in {}: the path is too long for a Unix socket, and so is {} (use a shorter baton dir or TMPDIR)",
                dir.display(),
                link.display()
            ),
        )
    })
}

/// `<short_root>/baton-<uid>-<hash of dir>`, a symbolic link to `dir`:
/// made, or found as this user's link to `dir`.
fn short_link(dir: &Path, short_root: &Path) -> io::Result<PathBuf> {
    let refuse = |why: String| io::Error::new(io::ErrorKind::InvalidInput, why);
    if !dir.is_absolute() {
        return Err(refuse(format!(
            "cannot link to the doorbell directory {}: not an absolute path",
            dir.display()
        )));
    }
    let uid = rustix::process::geteuid().as_raw();
    let link = short_root.join(format!(
        "baton-{uid}-{:016x}",
        fnv1a(dir.as_os_str().as_bytes())
    ));
    match std::os::unix::fs::symlink(dir, &link) {
        Ok(()) => return Ok(link),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(io::Error::new(
                e.kind(),
                format!("cannot create the doorbell link {}: {e}", link.display()),
            ))
        }
    }
    let ours = fs::symlink_metadata(&link)
        .is_ok_and(|m| m.file_type().is_symlink() && m.uid() == uid)
        && fs::read_link(&link).is_ok_and(|to| to == dir);
    if ours {
        Ok(link)
    } else {
        Err(refuse(format!(
            "cannot use {} as the short path of the doorbell directory {}: it is not this user's link to it (remove it)",
            link.display(),
            dir.display()
        )))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    use std::sync::{mpsc, Arc, Barrier};
    use std::time::Duration;

    use super::*;

    fn files(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// A bell whose process was killed leaves its socket and lock file; the
    /// next bind of any name removes them, and its name can be bound again.
    #[test]
    fn a_killed_process_bell_is_cleaned_up_by_the_next_bind() {
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "sys::doorbell::files::tests::bind_and_wait_helper",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("BATON_TEST_BELL_DIR", dir.path())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        assert!(
            lines.any(|l| l.is_ok_and(|l| l.contains("bound"))),
            "the helper did not bind"
        );
        // Bound: the name is taken while its process lives.
        let err = bind(dir.path(), "dies").err().unwrap();
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse);
        child.kill().unwrap();
        child.wait().unwrap();
        let stem = stem("dies");
        assert_eq!(files(dir.path()), [stem.clone(), format!("{stem}.lock")]);
        // Another name's bind sweeps the dead bell away.
        let other = bind(dir.path(), "other").unwrap();
        let other_stem = super::stem("other");
        assert_eq!(
            files(dir.path()),
            [other_stem.clone(), format!("{other_stem}.lock")]
        );
        // And the dead bell's name is free, and rings reach its new bell.
        let (tx, rx) = mpsc::channel();
        let _watcher = bind(dir.path(), "dies")
            .unwrap()
            .watch(move || tx.send(()).unwrap())
            .unwrap();
        ring(dir.path(), "dies");
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
        drop(other);
    }

    /// Run by the test above: binds "dies" in `BATON_TEST_BELL_DIR`, says
    /// so, and waits to be killed.
    #[test]
    #[ignore = "a helper: run by a_killed_process_bell_is_cleaned_up_by_the_next_bind"]
    fn bind_and_wait_helper() {
        let Ok(dir) = std::env::var("BATON_TEST_BELL_DIR") else {
            return;
        };
        let _bell = bind(Path::new(&dir), "dies").unwrap();
        println!("bound");
        std::thread::sleep(Duration::from_secs(600));
    }

    /// Threads binding one name at once (each with its own open lock
    /// file, as processes would), again and again: one wins each round,
    /// the others are told the name is taken.
    #[test]
    fn binds_of_one_name_at_once_have_one_winner() {
        let dir = tempfile::tempdir().unwrap();
        for round in 0..20 {
            let name = format!("race-{round}");
            let barrier = Arc::new(Barrier::new(4));
            let outcomes: Vec<io::Result<Doorbell>> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..4)
                    .map(|_| {
                        let barrier = Arc::clone(&barrier);
                        let (dir, name) = (dir.path(), &name);
                        s.spawn(move || {
                            barrier.wait();
                            bind(dir, name)
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let won = outcomes.iter().filter(|o| o.is_ok()).count();
            assert_eq!(won, 1, "round {round}");
            for o in &outcomes {
                if let Err(e) = o {
                    assert_eq!(e.kind(), io::ErrorKind::AddrInUse, "{e}");
                }
            }
        }
        // Every winner was dropped: nothing is left.
        assert!(files(dir.path()).is_empty(), "{:?}", files(dir.path()));
    }

    #[test]
    fn a_missing_directory_is_named_in_the_error() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing");
        let err = bind(&missing, "x").err().unwrap();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(
            err.to_string().contains(&*missing.to_string_lossy()),
            "{err}"
        );
    }

    /// A directory whose socket paths are too long is reached through a
    /// short link; a link that is not this user's link to it is refused.
    #[test]
    fn a_long_directory_is_reached_through_a_short_link() {
        let base = tempfile::tempdir().unwrap();
        let long = base.path().join("d".repeat(60)).join("e".repeat(60));
        fs::create_dir_all(&long).unwrap();
        assert!(SocketAddr::from_pathname(long.join(stem("x"))).is_err());
        let short = tempfile::tempdir().unwrap();
        let (tx, rx) = mpsc::channel();
        let mut watcher = bind_with(&long, "x", short.path())
            .unwrap()
            .watch(move || tx.send(()).unwrap())
            .unwrap();
        ring_with(&long, "x", short.path());
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
        // The socket is in the long directory itself.
        assert!(long.join(stem("x")).exists());
        watcher.close();
        assert!(files(&long).is_empty(), "{:?}", files(&long));
        let links = files(short.path());
        assert_eq!(links.len(), 1, "{links:?}");
        // Someone else's link (here: to another directory) is not used.
        let link = short.path().join(&links[0]);
        fs::remove_file(&link).unwrap();
        std::os::unix::fs::symlink(base.path(), &link).unwrap();
        let err = bind_with(&long, "x", short.path()).err().unwrap();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(err.to_string().contains("not this user's link"), "{err}");
        // A short root that is too long itself: a clear error.
        let deep = short.path().join("f".repeat(100));
        fs::create_dir(&deep).unwrap();
        let err = bind_with(&long, "x", &deep).err().unwrap();
        assert!(err.to_string().contains("too long"), "{err}");
    }
}
