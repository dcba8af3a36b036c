//! macOS: [`crate::lineage`] from `proc_pidinfo` and `proc_pidfdinfo`.
//!
//! Checked by cross-compiling only (`scripts/check-macos`): the structures
//! below are those of `<sys/proc_info.h>`, which the `libc` crate lacks;
//! a call whose size does not match reports nothing, and the caller then
//! takes the parent as the script (what it did before).

use std::ffi::c_int;

/// `PROC_FLAG_EXEC` of `proc_bsdinfo.pbi_flags`: set by `exec`, cleared in
/// a child by `fork`.
const PROC_FLAG_EXEC: u32 = 0x4000;

/// `PROC_PIDFDPIPEINFO`, the `proc_pidfdinfo` flavor of a pipe.
const PROC_PIDFDPIPEINFO: c_int = 6;

/// `struct proc_fileinfo`.
#[repr(C)]
struct ProcFileInfo {
    fi_openflags: u32,
    fi_status: u32,
    fi_offset: i64,
    fi_type: i32,
    fi_guardflags: u32,
}

/// `struct pipe_info`: `pipe_handle` names this end, `pipe_peerhandle` the
/// other.
#[repr(C)]
struct PipeInfo {
    pipe_stat: libc::vinfo_stat,
    pipe_handle: u64,
    pipe_peerhandle: u64,
    pipe_status: c_int,
    rfu_1: c_int,
}

/// `struct pipe_fdinfo`.
#[repr(C)]
struct PipeFdInfo {
    pfi: ProcFileInfo,
    pipeinfo: PipeInfo,
}

// The sizes of <sys/proc_info.h> (vinfo_stat 136, pipe_info 160,
// proc_fileinfo 24).
const _: () = assert!(std::mem::size_of::<ProcFileInfo>() == 24);
const _: () = assert!(std::mem::size_of::<PipeFdInfo>() == 184);

/// `pid` has not executed a program since `fork` made it (the caller has
/// checked that `parent` is its parent).
pub(crate) fn forked_without_exec(pid: i32, _parent: i32) -> bool {
    // SAFETY: a plain C struct, all zeros is a valid value.
    let mut info: libc::proc_bsdinfo = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::proc_bsdinfo>() as c_int;
    // SAFETY: `info` is a buffer of `size` bytes for PROC_PIDTBSDINFO.
    let got =
        unsafe { libc::proc_pidinfo(pid, libc::PROC_PIDTBSDINFO, 0, (&raw mut info).cast(), size) };
    got == size && info.pbi_flags & PROC_FLAG_EXEC == 0
}

/// The (handle, peer handle) of the pipe end `fd` of `pid`, if it is one.
fn pipe_end(pid: i32, fd: i32) -> Option<(u64, u64)> {
    // SAFETY: plain C structs, all zeros is a valid value.
    let mut info: PipeFdInfo = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<PipeFdInfo>() as c_int;
    // SAFETY: `info` is a buffer of `size` bytes for PROC_PIDFDPIPEINFO,
    // whose result has this layout.
    let got =
        unsafe { libc::proc_pidfdinfo(pid, fd, PROC_PIDFDPIPEINFO, (&raw mut info).cast(), size) };
    (got == size).then_some((info.pipeinfo.pipe_handle, info.pipeinfo.pipe_peerhandle))
}

/// The open descriptors of `pid` that are pipes.
fn pipe_fds(pid: i32) -> Vec<i32> {
    // SAFETY: a null buffer asks for the size the list needs, in bytes.
    let need =
        unsafe { libc::proc_pidinfo(pid, libc::PROC_PIDLISTFDS, 0, std::ptr::null_mut(), 0) };
    let Ok(need) = usize::try_from(need) else {
        return Vec::new();
    };
    let entry = std::mem::size_of::<libc::proc_fdinfo>();
    // Room for descriptors opened meanwhile.
    let mut fds: Vec<libc::proc_fdinfo> = Vec::with_capacity(need / entry + 16);
    let bytes = (fds.capacity() * entry) as c_int;
    // SAFETY: `fds` has room for `bytes` bytes of `proc_fdinfo` entries.
    let got = unsafe {
        libc::proc_pidinfo(
            pid,
            libc::PROC_PIDLISTFDS,
            0,
            fds.as_mut_ptr().cast(),
            bytes,
        )
    };
    let Ok(got) = usize::try_from(got) else {
        return Vec::new();
    };
    // SAFETY: the kernel wrote `got` bytes of whole entries, within the
    // capacity it was given.
    unsafe { fds.set_len((got / entry).min(fds.capacity())) };
    fds.iter()
        .filter(|f| f.proc_fdtype == libc::PROX_FDTYPE_PIPE as u32)
        .map(|f| f.proc_fd)
        .collect()
}

/// `pid`'s fd 1 is a pipe end whose peer (the read end, as `pid` writes
/// into it) `reader` has open. A reader that merely shares `pid`'s stdout
/// holds the same end, not its peer.
pub(crate) fn stdout_read_by(pid: i32, reader: i32) -> bool {
    let Some((_, peer)) = pipe_end(pid, 1) else {
        return false;
    };
    pipe_fds(reader)
        .into_iter()
        .any(|fd| pipe_end(reader, fd).is_some_and(|(handle, _)| handle == peer))
}
