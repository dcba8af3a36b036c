//! What the unix bells share: a datagram socket (abstract on Linux, a file
//! in a directory otherwise) whose watcher thread waits in one `poll` on it
//! and on the end of a socket pair whose other end closing the watcher
//! closes. A ring is any datagram; rings that arrive together are handled
//! once.

use std::io;
use std::os::unix::net::{SocketAddr, UnixDatagram, UnixStream};
use std::thread::JoinHandle;

use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;

use super::claim::Claim;

/// A bound bell; `claim` is the lock on a file bell's name (none for an
/// abstract one, whose name the kernel frees with the socket).
pub(crate) struct Doorbell {
    socket: UnixDatagram,
    claim: Option<Claim>,
}

impl Doorbell {
    pub(crate) fn new(socket: UnixDatagram, claim: Option<Claim>) -> Doorbell {
        Doorbell { socket, claim }
    }

    pub(crate) fn watch(self, on_ring: impl Fn() + Send + 'static) -> io::Result<Watcher> {
        self.socket.set_nonblocking(true)?;
        // Closing `stop` (the watcher's end) makes `stopped` readable (end
        // of file).
        let (stop, stopped) = UnixStream::pair()?;
        let socket = self.socket;
        let thread = std::thread::Builder::new()
            .name("baton-doorbell".into())
            .spawn(move || loop {
                let mut fds = [
                    PollFd::new(&socket, PollFlags::IN),
                    PollFd::new(&stopped, PollFlags::IN),
                ];
                match rustix::event::poll(&mut fds, None) {
                    Ok(_) => {}
                    Err(Errno::INTR) => continue,
                    Err(_) => break,
                }
                if !fds[1].revents().is_empty() {
                    break;
                }
                if fds[0].revents().is_empty() {
                    continue;
                }
                match drain(&socket) {
                    Ok(true) => on_ring(),
                    Ok(false) => {}
                    Err(_) => break,
                }
            })?;
        Ok(Watcher {
            stop: Some(stop),
            thread: Some(thread),
            _claim: self.claim,
        })
    }
}

/// Reads every datagram waiting; whether there was one.
fn drain(socket: &UnixDatagram) -> io::Result<bool> {
    let mut buf = [0u8; 64];
    let mut rung = false;
    loop {
        match socket.recv(&mut buf) {
            Ok(_) => rung = true,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(rung),
            Err(e) => return Err(e),
        }
    }
}

/// The watching thread; the claim (a file bell's name) is given up after
/// the thread, and so the socket, has ended.
pub(crate) struct Watcher {
    /// Closed to stop the thread.
    stop: Option<UnixStream>,
    thread: Option<JoinHandle<()>>,
    _claim: Option<Claim>,
}

impl Watcher {
    pub(crate) fn close(&mut self) {
        self.stop = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        self._claim = None;
    }
}

/// Sends a ring to `to` (best effort: a bell that is gone is no error).
pub(crate) fn ring(to: &SocketAddr) {
    if let Ok(socket) = UnixDatagram::unbound() {
        let _ = socket.send_to_addr(b"ring", to);
    }
}
