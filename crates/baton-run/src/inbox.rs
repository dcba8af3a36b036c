//! How a newer run of a group tells an older one that it was superseded.
//!
//! Each run of a group listens on a datagram socket in the abstract
//! namespace, `baton/run/<run id>`, bound before it registers in the group
//! document. The newer run marks the older one in the document (the truth)
//! and then sends it one datagram (the wake-up); the older run's watcher
//! thread re-reads its mark and acts only on that, so a stray or forged
//! datagram changes nothing. No process signal is involved, so a process can
//! host any number of runs, and a pid that was reused is never hit.
//!
//! Abstract sockets belong to a network namespace: a run in another network
//! namespace (a container with its own network) is not woken; it still sees
//! its mark when it gets the slot, and never runs after being superseded.

use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::thread::JoinHandle;

fn address(run_id: &str) -> io::Result<SocketAddr> {
    SocketAddr::from_abstract_name(format!("baton/run/{run_id}"))
}

/// The socket a run listens on.
pub(crate) struct Inbox {
    socket: UnixDatagram,
    address: SocketAddr,
}

impl Inbox {
    /// Binds the run's address.
    pub(crate) fn open(run_id: &str) -> io::Result<Inbox> {
        let address = address(run_id)?;
        let socket = UnixDatagram::bind_addr(&address)?;
        Ok(Inbox { socket, address })
    }

    /// Calls `on_message` for each datagram, in a thread, until the returned
    /// watcher is closed.
    pub(crate) fn watch(self, on_message: impl Fn() + Send + 'static) -> io::Result<Watcher> {
        let mut nonce = [0u8; 16];
        let filled = rustix::rand::getrandom(&mut nonce, rustix::rand::GetRandomFlags::empty())
            .map_err(io::Error::from)?;
        if filled < nonce.len() {
            return Err(io::Error::other(
                "short read from the kernel's random source",
            ));
        }
        let socket = self.socket;
        let thread = std::thread::Builder::new()
            .name("baton-supersede".into())
            .spawn(move || {
                let mut buf = [0u8; 64];
                loop {
                    match socket.recv(&mut buf) {
                        Ok(n) if buf[..n] == nonce => break,
                        Ok(_) => on_message(),
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(_) => break,
                    }
                }
            })?;
        Ok(Watcher {
            address: self.address,
            nonce,
            thread: Some(thread),
        })
    }
}

/// The thread reading an inbox; [`Watcher::close`] (or drop) ends it.
pub(crate) struct Watcher {
    address: SocketAddr,
    nonce: [u8; 16],
    thread: Option<JoinHandle<()>>,
}

impl Watcher {
    /// Stops the thread and waits for it (a message being handled finishes first).
    pub(crate) fn close(&mut self) {
        if let Some(thread) = self.thread.take() {
            if send(&self.address, &self.nonce).is_ok() {
                let _ = thread.join();
            }
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.close();
    }
}

fn send(to: &SocketAddr, message: &[u8]) -> io::Result<()> {
    UnixDatagram::unbound()?.send_to_addr(message, to)?;
    Ok(())
}

/// Wakes the runs `run_ids` (best effort: a run that has ended is gone).
pub(crate) fn notify(run_ids: &[String]) {
    for id in run_ids {
        if let Ok(to) = address(id) {
            let _ = send(&to, b"superseded");
        }
    }
}
