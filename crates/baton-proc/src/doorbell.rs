//! A doorbell: a process wakes a thread of another (or of itself) by a
//! name, without a signal, so a process can host any number of bells and a
//! reused pid is never hit. A ring carries no data and may be forged or
//! lost: the woken side re-reads the truth (a document) and acts only on
//! that.
//!
//! - Linux: a datagram socket in the abstract namespace, named `name`
//!   (abstract names belong to a network namespace: a process in another
//!   one cannot ring).
//! - Windows: a named auto-reset event, `Local\<name>` (the session's
//!   namespace: a process of another logon session cannot ring).
//! - macOS: has neither (no abstract sockets); [`Doorbell::bind`] fails
//!   with [`std::io::ErrorKind::Unsupported`], saying so.

use std::io;

use crate::sys::doorbell as sys;

/// A bell bound to a name, not yet watched.
pub struct Doorbell(sys::Doorbell);

impl Doorbell {
    /// Binds `name` (at most one bell per name at a time).
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::AddrInUse`] when a bell has that name already;
    /// [`io::ErrorKind::Unsupported`] on macOS; else the system's.
    pub fn bind(name: &str) -> io::Result<Doorbell> {
        sys::Doorbell::bind(name).map(Doorbell)
    }

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

/// Rings the bell named `name`, if there is one (best effort: a bell that
/// is gone is not an error).
pub fn ring(name: &str) {
    sys::ring(name);
}

#[cfg(all(test, any(target_os = "linux", windows)))]
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

    #[test]
    fn a_ring_wakes_the_watcher_and_a_name_is_bound_once() {
        let name = unique("ring");
        let bell = Doorbell::bind(&name).unwrap();
        let again = Doorbell::bind(&name).err().unwrap();
        assert_eq!(again.kind(), io::ErrorKind::AddrInUse);
        let (tx, rx) = mpsc::channel();
        let mut watcher = bell.watch(move || tx.send(()).unwrap()).unwrap();
        assert!(
            rx.recv_timeout(Duration::from_millis(200)).is_err(),
            "woken unrung"
        );
        ring(&name);
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
        watcher.close();
        // Closed: the name is free again, and a ring of a gone bell is no error.
        ring(&name);
        drop(Doorbell::bind(&name).unwrap());
        ring(&unique("nobody"));
    }

    #[test]
    fn a_ring_from_another_process_wakes_the_watcher() {
        let name = unique("process");
        let (tx, rx) = mpsc::channel();
        let _watcher = Doorbell::bind(&name)
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
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
    }

    /// Run by the test above, in a process of its own: rings the bell named
    /// in `BATON_TEST_RING`.
    #[test]
    #[ignore = "a helper: run by a_ring_from_another_process_wakes_the_watcher"]
    fn ring_helper() {
        if let Ok(name) = std::env::var("BATON_TEST_RING") {
            ring(&name);
        }
    }
}
