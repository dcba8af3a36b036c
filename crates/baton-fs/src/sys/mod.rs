//! The platform seam of baton-fs: every call into the operating system that
//! differs between platforms is in this module, as a safe function; the rest
//! of the crate uses only these.
//!
//! baton ports to Windows and macOS (issue 25) with **platform modules
//! inside the crates that touch the OS** (baton-fs: files; baton-proc:
//! processes; baton-lock: kernel locks), not one `baton-sys` crate below
//! them all: each crate's platform code stays next to the guarantee it
//! implements and is tested with it, and a crate above these uses no
//! platform API directly. Each such crate has this layout:
//!
//! - `sys/unix.rs`: Linux and macOS (rustix and `std::os::unix`);
//! - `sys/linux.rs`: the Linux-only parts, each with a unix fallback in
//!   `sys/unix.rs` for macOS;
//! - `sys/windows.rs`: Windows (`windows-sys` and `std::os::windows`).
//!
//! What each function means per platform is said on the function, the
//! differences a caller sees in the [crate](crate) documentation.

#[cfg(target_os = "linux")]
mod linux;
pub(crate) mod shared_log;
#[cfg(unix)]
mod unix;
#[cfg(windows)]
mod windows;

#[cfg(target_os = "linux")]
pub(crate) use linux::random_u64;
#[cfg(all(unix, not(target_os = "linux")))]
pub(crate) use unix::random_u64;
#[cfg(unix)]
pub(crate) use unix::{
    allocated_bytes, check_write_access, copy_owner_and_mode, create_new, describe_special,
    file_id, flush_dir, flush_rename, metadata_id, open_no_follow, path_id, read_exact_at, rename,
    set_len, shorten_name, BUSY, DENIED, NOT_EMPTY, NOT_EMPTY_CODES, READ_ONLY,
};
#[cfg(windows)]
pub(crate) use windows::{
    allocated_bytes, check_write_access, copy_owner_and_mode, create_new, describe_special,
    file_id, flush_dir, flush_rename, metadata_id, open_no_follow, path_id, random_u64,
    read_exact_at, rename, set_len, shorten_name, BUSY, DENIED, NOT_EMPTY, NOT_EMPTY_CODES,
    READ_ONLY,
};

#[cfg(not(any(unix, windows)))]
compile_error!("baton-fs supports unix (Linux, macOS) and Windows");
