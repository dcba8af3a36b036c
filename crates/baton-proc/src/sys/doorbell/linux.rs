//! Linux: a datagram socket in the abstract namespace. The watcher's thread
//! blocks in `recv`; closing it sends a random nonce only it knows.

use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::thread::JoinHandle;

pub(crate) struct Doorbell {
    socket: UnixDatagram,
    address: SocketAddr,
}

impl Doorbell {
    pub(crate) fn bind(name: &str) -> io::Result<Doorbell> {
        let address = SocketAddr::from_abstract_name(name)?;
        let socket = UnixDatagram::bind_addr(&address)?;
        Ok(Doorbell { socket, address })
    }

    pub(crate) fn watch(self, on_ring: impl Fn() + Send + 'static) -> io::Result<Watcher> {
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
            .name("baton-doorbell".into())
            .spawn(move || {
                let mut buf = [0u8; 64];
                loop {
                    match socket.recv(&mut buf) {
                        Ok(n) if buf[..n] == nonce => break,
                        Ok(_) => on_ring(),
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

pub(crate) struct Watcher {
    address: SocketAddr,
    nonce: [u8; 16],
    thread: Option<JoinHandle<()>>,
}

impl Watcher {
    pub(crate) fn close(&mut self) {
        if let Some(thread) = self.thread.take() {
            if send(&self.address, &self.nonce).is_ok() {
                let _ = thread.join();
            }
        }
    }
}

fn send(to: &SocketAddr, message: &[u8]) -> io::Result<()> {
    UnixDatagram::unbound()?.send_to_addr(message, to)?;
    Ok(())
}

pub(crate) fn ring(name: &str) {
    if let Ok(to) = SocketAddr::from_abstract_name(name) {
        let _ = send(&to, b"ring");
    }
}
