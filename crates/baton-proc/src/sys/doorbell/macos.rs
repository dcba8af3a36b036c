//! macOS: no abstract sockets, so no doorbell (a typed refusal).

use std::io;

pub(crate) struct Doorbell;
pub(crate) struct Watcher;

impl Doorbell {
    pub(crate) fn bind(_name: &str) -> io::Result<Doorbell> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "macOS has no abstract sockets to wake another run by name (Linux only, or named events on Windows)",
        ))
    }

    pub(crate) fn watch(self, _on_ring: impl Fn() + Send + 'static) -> io::Result<Watcher> {
        Ok(Watcher)
    }
}

impl Watcher {
    pub(crate) fn close(&mut self) {}
}

pub(crate) fn ring(_name: &str) {}
