//! The Linux-only parts of baton-fs; `unix.rs` has the fallbacks other
//! unix systems (macOS) use.

/// 64 bits from `getrandom(2)`, or `None` if the kernel did not answer
/// (a seccomp filter, an exotic kernel).
pub(crate) fn random_u64() -> Option<u64> {
    let mut buf = [0u8; 8];
    match rustix::rand::getrandom(&mut buf, rustix::rand::GetRandomFlags::empty()) {
        Ok(8) => Some(u64::from_ne_bytes(buf)),
        _ => None,
    }
}
