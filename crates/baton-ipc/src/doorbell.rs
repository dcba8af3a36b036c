//! A doorbell: a process wakes a thread of another (or of itself) by a
//! name, without a signal, so a process can host any number of bells and a
//! reused pid is never hit. A ring carries no data and may be forged or
//! lost: the woken side re-reads the truth (a document) and acts only on
//! that.
//!
//! Where the bells of a set of processes live is a [`Bells`] value:
//!
//! - Linux: a datagram socket in the abstract namespace, named `name`
//!   (abstract names belong to a network namespace: a process in another
//!   one cannot ring).
//! - Windows: a named auto-reset event, `Local\<name>` (the session's
//!   namespace: a process of another logon session cannot ring).
//! - macOS, which has neither (no abstract sockets): a datagram socket
//!   file in the directory the processes share (the baton dir's `bells/`),
//!   claimed by a `flock` on a lock file next to it, so that a bell left by
//!   a killed process is cleaned up by the next bind, race-free; a
//!   directory too long for a socket path is reached through a short link
//!   in the temporary directory. Every unix can choose these
//!   ([`Bells::files_in`]); Linux tests run them. The protocol is in
//!   `src/sys/doorbell/files.rs`.

use std::io;
use std::path::Path;
#[cfg(unix)]
use std::path::PathBuf;

use crate::sys::doorbell as sys;

/// Where the bells of processes that ring each other live.
#[derive(Clone, Debug)]
pub struct Bells(Place);

#[derive(Clone, Debug)]
enum Place {
    /// Machine-wide names (abstract sockets, named events).
    #[cfg(any(target_os = "linux", windows))]
    Named,
    /// Socket files in a directory.
    #[cfg(unix)]
    Files(PathBuf),
}

impl Bells {
    /// This platform's bells for processes sharing the directory `dir`
    /// (absolute): named machine-wide on Linux and Windows, where `dir` is
    /// not used; socket files in `dir`, which must exist, on macOS (as
    /// [`Bells::files_in`]). [`Bells::uses_dir`] tells which.
    pub fn for_dir(dir: &Path) -> Bells {
        #[cfg(target_os = "macos")]
        return Bells::files_in(dir);
        #[cfg(not(target_os = "macos"))]
        {
            let _ = dir;
            Bells(Place::Named)
        }
    }

    /// Bells named machine-wide (Linux's abstract sockets, Windows' named
    /// events), with no directory.
    #[cfg(any(target_os = "linux", windows))]
    pub fn named() -> Bells {
        Bells(Place::Named)
    }

    /// Bells as socket files in the existing directory `dir` (absolute),
    /// which every process that rings them must see; reachable across
    /// network namespaces, unlike Linux's abstract names.
    #[cfg(unix)]
    pub fn files_in(dir: &Path) -> Bells {
        Bells(Place::Files(dir.to_path_buf()))
    }

    /// Whether these bells are files in the directory given (which the
    /// caller must then create, with the permissions its users need).
    pub fn uses_dir(&self) -> bool {
        match &self.0 {
            #[cfg(any(target_os = "linux", windows))]
            Place::Named => false,
            #[cfg(unix)]
            Place::Files(_) => true,
        }
    }

    /// Binds the bell `name` (at most one bell per name at a time).
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::AddrInUse`] when a bell has that name already;
    /// [`io::ErrorKind::InvalidInput`] when a socket file's path is too long
    /// even through a short link (the message says which); else the
    /// system's.
    pub fn bind(&self, name: &str) -> io::Result<Doorbell> {
        match &self.0 {
            #[cfg(any(target_os = "linux", windows))]
            Place::Named => sys::bind_named(name).map(Doorbell),
            #[cfg(unix)]
            Place::Files(dir) => sys::files::bind(dir, name).map(Doorbell),
        }
    }

    /// Rings the bell `name`, if there is one (best effort: a bell that is
    /// gone is not an error).
    pub fn ring(&self, name: &str) {
        match &self.0 {
            #[cfg(any(target_os = "linux", windows))]
            Place::Named => sys::ring_named(name),
            #[cfg(unix)]
            Place::Files(dir) => sys::files::ring(dir, name),
        }
    }
}

/// A bell bound to a name, not yet watched.
pub struct Doorbell(sys::Doorbell);

impl Doorbell {
    /// Calls `on_ring` for each ring, in a thread of its own, until the
    /// returned watcher is closed (rings close together may be seen once).
    ///
    /// # Errors
    ///
    /// The system's, when the thread or what it waits with cannot be made.
    pub fn watch(self, on_ring: impl Fn() + Send + 'static) -> io::Result<DoorbellWatcher> {
        self.0.watch(on_ring).map(DoorbellWatcher)
    }
}

/// The thread watching a bell; [`DoorbellWatcher::close`] (or drop) ends it.
pub struct DoorbellWatcher(sys::Watcher);

impl DoorbellWatcher {
    /// Stops the thread and waits for it (a ring being handled finishes
    /// first); the name is free again afterwards.
    pub fn close(&mut self) {
        self.0.close();
    }
}

impl Drop for DoorbellWatcher {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

    fn unique(tag: &str) -> String {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        format!("baton-test/{tag}/{}-{nanos}", std::process::id())
    }

    /// The platform's bells, and on unix the file bells too.
    fn every_kind(dir: &Path) -> Vec<Bells> {
        #[allow(unused_mut)] // one kind on Windows
        let mut kinds = vec![Bells::for_dir(dir)];
        #[cfg(unix)]
        kinds.push(Bells::files_in(dir));
        kinds
    }

    #[test]
    fn a_ring_wakes_the_watcher_and_a_name_is_bound_once() {
        let dir = tempfile::tempdir().unwrap();
        for bells in every_kind(dir.path()) {
            let name = unique("ring");
            let bell = bells.bind(&name).unwrap();
            let again = bells.bind(&name).err().unwrap();
            assert_eq!(again.kind(), io::ErrorKind::AddrInUse, "{bells:?}");
            let (tx, rx) = mpsc::channel();
            let mut watcher = bell.watch(move || tx.send(()).unwrap()).unwrap();
            assert!(
                rx.recv_timeout(Duration::from_millis(200)).is_err(),
                "woken unrung: {bells:?}"
            );
            bells.ring(&name);
            rx.recv_timeout(Duration::from_secs(5)).unwrap();
            // Rung twice, woken again (not only once per bell).
            bells.ring(&name);
            rx.recv_timeout(Duration::from_secs(5)).unwrap();
            watcher.close();
            // Closed: the name is free again, and a ring of a gone bell is no error.
            bells.ring(&name);
            drop(bells.bind(&name).unwrap());
            bells.ring(&unique("nobody"));
        }
        // The file bells left no file behind.
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn a_ring_from_another_process_wakes_the_watcher() {
        let dir = tempfile::tempdir().unwrap();
        for (kind, bells) in every_kind(dir.path()).into_iter().enumerate() {
            let name = unique("process");
            let (tx, rx) = mpsc::channel();
            let _watcher = bells
                .bind(&name)
                .unwrap()
                .watch(move || tx.send(()).unwrap())
                .unwrap();
            let status = std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "doorbell::tests::ring_helper",
                    "--ignored",
                    "--quiet",
                ])
                .env("BATON_TEST_RING", &name)
                .env("BATON_TEST_RING_DIR", dir.path())
                .env("BATON_TEST_RING_KIND", kind.to_string())
                .stdout(std::process::Stdio::null())
                .status()
                .unwrap();
            assert!(status.success());
            rx.recv_timeout(Duration::from_secs(5)).unwrap();
        }
    }

    /// Run by the test above, in a process of its own: rings the bell named
    /// in `BATON_TEST_RING` (of the kind numbered `BATON_TEST_RING_KIND` in
    /// `BATON_TEST_RING_DIR`).
    #[test]
    #[ignore = "a helper: run by a_ring_from_another_process_wakes_the_watcher"]
    fn ring_helper() {
        let (Ok(name), Ok(dir), Ok(kind)) = (
            std::env::var("BATON_TEST_RING"),
            std::env::var("BATON_TEST_RING_DIR"),
            std::env::var("BATON_TEST_RING_KIND"),
        ) else {
            return;
        };
        let kinds = every_kind(Path::new(&dir));
        kinds[kind.parse::<usize>().unwrap()].ring(&name);
    }
}
