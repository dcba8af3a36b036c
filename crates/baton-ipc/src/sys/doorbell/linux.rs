//! Linux: a bell named in the abstract socket namespace (no file; the
//! kernel frees the name with the socket, however its process ends).

use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

use super::socket::{self, Doorbell};

pub(crate) fn bind_named(name: &str) -> io::Result<Doorbell> {
    let address = SocketAddr::from_abstract_name(name)?;
    Ok(Doorbell::new(UnixDatagram::bind_addr(&address)?, None))
}

pub(crate) fn ring_named(name: &str) {
    if let Ok(to) = SocketAddr::from_abstract_name(name) {
        socket::ring(&to);
    }
}
