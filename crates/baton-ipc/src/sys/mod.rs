//! The platform seam: every call into the operating system that differs
//! between the systems baton runs on is made here, behind safe functions;
//! the rest of the crate calls these.
//!
//! - `doorbell/`: the bells of [`crate::doorbell`] (abstract sockets on
//!   Linux, socket files in a directory on every unix, named events on
//!   Windows);
//! - `lineage/`: the facts of [`crate::lineage`] (`/proc` on Linux,
//!   `proc_pidinfo` on macOS; Windows has none to read).

pub(crate) mod doorbell;
#[cfg(target_os = "linux")]
#[path = "lineage/linux.rs"]
pub(crate) mod lineage;
// `proc_pidinfo` and `proc_pidfdinfo` fill C structures: the SAFETY
// comments there say why each call is sound.
#[cfg(target_os = "macos")]
#[allow(unsafe_code)]
#[path = "lineage/macos.rs"]
pub(crate) mod lineage;

#[cfg(not(any(target_os = "linux", target_os = "macos", windows)))]
compile_error!("baton-ipc supports Linux, macOS and Windows");
