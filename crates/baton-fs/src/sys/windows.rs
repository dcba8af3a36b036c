//! baton-fs on Windows: file names are UTF-16, new files take their
//! directory's ACL, and a rename is made durable by a write-through move and
//! a flush of the renamed file (no directory is flushed).

use std::ffi::{OsStr, OsString};
use std::fs::{self, File, FileType, Metadata, OpenOptions};
use std::io;
use std::os::windows::ffi::{OsStrExt, OsStringExt};
use std::path::Path;
use std::time::Duration;

use std::os::windows::fs::OpenOptionsExt;

use windows_sys::Win32::Foundation::{
    ERROR_ACCESS_DENIED, ERROR_BUSY, ERROR_DIR_NOT_EMPTY, ERROR_LOCK_VIOLATION,
    ERROR_SHARING_VIOLATION, ERROR_WRITE_PROTECT, GENERIC_WRITE, INVALID_HANDLE_VALUE,
};
use windows_sys::Win32::Storage::FileSystem::{
    GetFileInformationByHandle, MoveFileExW, ReOpenFile, BY_HANDLE_FILE_INFORMATION,
    FILE_FLAG_OPEN_REPARSE_POINT, FILE_SHARE_DELETE, FILE_SHARE_READ, FILE_SHARE_WRITE,
    MOVEFILE_REPLACE_EXISTING, MOVEFILE_WRITE_THROUGH,
};

use crate::error::{IoResultExt, PathError};

/// `name` unchanged if it has at most `max` UTF-16 code units (what NTFS
/// counts: at most 255 per name), else its first `keep` units and `~`. A
/// surrogate pair is never split: a cut that would is one unit shorter.
pub(crate) fn shorten_name(name: &OsStr, max: usize, keep: usize) -> OsString {
    let units: Vec<u16> = name.encode_wide().collect();
    if units.len() <= max {
        return name.to_os_string();
    }
    let mut end = keep.min(units.len());
    if end > 0 && (0xD800..0xDC00).contains(&units[end - 1]) {
        end -= 1;
    }
    let mut out = OsString::from_wide(&units[..end]);
    out.push("~");
    out
}

/// Creates `path` exclusively (`CREATE_NEW`: it clobbers nothing, not even
/// through a symbolic link), writable, shared for reading, writing and
/// deleting (std's default, which the rename of the open file needs).
///
/// `mode` is ignored: Windows has no permission bits. The new file inherits
/// the ACL of its directory, which in the user's profile (where baton keeps
/// its files by default) admits the user, SYSTEM and Administrators.
pub(crate) fn create_new(path: &Path, mode: u32) -> io::Result<File> {
    let _ = mode;
    OpenOptions::new().write(true).create_new(true).open(path)
}

/// How often a replacement is retried while the target is held open: after
/// 1, 2, 4 ... 512 ms, about 1 s in all.
const RETRIES: u32 = 10;

/// Renames `from` over `to`, replacing it atomically for readers.
///
/// Not `durable`: `std::fs::rename`, which is `MoveFileExW` with
/// `MOVEFILE_REPLACE_EXISTING` and, when that is refused with "access
/// denied" (the target is open in another process, or read-only), a
/// rename of the source's handle with POSIX semantics
/// (`FileRenameInfoEx`, `FILE_RENAME_FLAG_REPLACE_IF_EXISTS |
/// FILE_RENAME_FLAG_POSIX_SEMANTICS`, NTFS on Windows 10 1709 and later):
/// the target is replaced while readers have it open, if they share it for
/// deleting (Rust's `File::open` and most programs do); they keep reading
/// the old file.
///
/// `durable`: first `MoveFileExW(MOVEFILE_REPLACE_EXISTING |
/// MOVEFILE_WRITE_THROUGH)`, which returns once the move is on disk;
/// should that fail, `std::fs::rename` as above (which [`flush_rename`]
/// then makes durable).
///
/// Where an open target cannot be replaced (a reader that does not share
/// deleting; file systems without POSIX renames, such as FAT32 and most
/// network shares; wine, which refuses to replace any open file), the
/// rename is retried for about 1 s ([`RETRIES`]), as readers hold a file
/// briefly, and then fails, changing nothing.
pub(crate) fn rename(from: &Path, to: &Path, durable: bool) -> io::Result<()> {
    let mut attempt = 0;
    loop {
        let renamed = if durable {
            move_file_write_through(from, to).or_else(|_| fs::rename(from, to))
        } else {
            fs::rename(from, to)
        };
        match renamed {
            Err(e) if attempt < RETRIES && held_open(&e, to) => {
                std::thread::sleep(Duration::from_millis(1 << attempt));
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// Whether the rename failed because `to`, a writable file, is open in a
/// way that forbids replacing it now: "access denied" or "sharing
/// violation" for a file that is neither a directory nor read-only (which
/// a retry would not change).
fn held_open(e: &io::Error, to: &Path) -> bool {
    let code = e.raw_os_error().and_then(|c| u32::try_from(c).ok());
    matches!(code, Some(ERROR_ACCESS_DENIED | ERROR_SHARING_VIOLATION))
        && fs::symlink_metadata(to).is_ok_and(|m| m.is_file() && !m.permissions().readonly())
}

/// Makes a rename durable: `FlushFileBuffers` of the renamed `file` (now at
/// `target`), which on NTFS writes its metadata, its new name included,
/// through the file system's journal. No directory is flushed: Windows
/// documents `FlushFileBuffers` for files and volumes (a volume needs
/// administrator rights), not for directories, and NTFS does not need it:
/// the rename, directory entries included, is one journalled metadata
/// change, on disk once the write-through move or this flush returned.
pub(crate) fn flush_rename(file: &File, target: &Path, _dir: &Path) -> Result<(), PathError> {
    file.sync_all().context("cannot flush", target)
}

/// 64 bits from the system's random source (`ProcessPrng`, via the
/// getrandom crate), or `None` if it did not answer.
pub(crate) fn random_u64() -> Option<u64> {
    let mut buf = [0u8; 8];
    getrandom::fill(&mut buf).ok()?;
    Some(u64::from_ne_bytes(buf))
}

/// `path` as a NUL-terminated UTF-16 string, for a Windows API.
fn wide(path: &Path) -> io::Result<Vec<u16>> {
    let mut units: Vec<u16> = path.as_os_str().encode_wide().collect();
    if units.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a path contains a NUL character",
        ));
    }
    units.push(0);
    Ok(units)
}

/// `MoveFileExW(from, to, MOVEFILE_REPLACE_EXISTING | MOVEFILE_WRITE_THROUGH)`.
#[allow(unsafe_code)]
fn move_file_write_through(from: &Path, to: &Path) -> io::Result<()> {
    let (from, to) = (wide(from)?, wide(to)?);
    // SAFETY: `from` and `to` are NUL-terminated UTF-16 strings without an
    // inner NUL (`wide`), alive for the whole call; MoveFileExW only reads
    // them and keeps no pointer after it returns.
    let moved = unsafe {
        MoveFileExW(
            from.as_ptr(),
            to.as_ptr(),
            MOVEFILE_REPLACE_EXISTING | MOVEFILE_WRITE_THROUGH,
        )
    };
    if moved == 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Opens with `FILE_FLAG_OPEN_REPARSE_POINT`: a symbolic link or junction
/// is opened itself, then refused. `mode` is ignored (no permission bits).
pub(crate) fn open_no_follow(
    options: &mut OpenOptions,
    path: &Path,
    mode: u32,
) -> io::Result<File> {
    let _ = mode;
    let file = options
        .custom_flags(FILE_FLAG_OPEN_REPARSE_POINT)
        .open(path)?;
    if file.metadata()?.file_type().is_symlink() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a symbolic link or junction, which is not followed here",
        ));
    }
    Ok(file)
}

/// `ReadFile` at `offset` (std's `seek_read`) until `buf` is full.
pub(crate) fn read_exact_at(file: &File, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
    use std::os::windows::fs::FileExt;
    while !buf.is_empty() {
        match file.seek_read(buf, offset) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the file ends before the bytes to read",
                ))
            }
            Ok(n) => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// `SetFileInformationByHandle(FileEndOfFileInfo)` (std's `set_len`); a
/// handle opened only for appending lacks the right to it, so that case
/// goes through a second handle of the same open file with write access.
pub(crate) fn set_len(file: &File, len: u64) -> io::Result<()> {
    match file.set_len(len) {
        Err(e) if e.raw_os_error() == i32::try_from(ERROR_ACCESS_DENIED).ok() => {
            reopen_for_writing(file)?.set_len(len)
        }
        done => done,
    }
}

/// `ReOpenFile(file, GENERIC_WRITE)`, sharing everything (as std opens
/// files), so the new handle conflicts with no other.
#[allow(unsafe_code)]
fn reopen_for_writing(file: &File) -> io::Result<File> {
    use std::os::windows::io::{AsRawHandle, FromRawHandle};
    // SAFETY: `file` is an open handle, borrowed for the call; ReOpenFile
    // returns a new handle (or INVALID_HANDLE_VALUE) and keeps no reference
    // to the old one.
    let handle = unsafe {
        ReOpenFile(
            file.as_raw_handle(),
            GENERIC_WRITE,
            FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE,
            0,
        )
    };
    if handle == INVALID_HANDLE_VALUE {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `handle` is a valid file handle that nothing else owns: the
    // File takes it over and closes it when dropped.
    Ok(unsafe { File::from_raw_handle(handle) })
}

/// A file with the read-only attribute is refused (`ERROR_ACCESS_DENIED`);
/// anything else passes: access is decided by ACLs when a file is opened.
pub(crate) fn check_write_access(path: &Path) -> io::Result<()> {
    let meta = fs::metadata(path)?;
    if !meta.is_dir() && meta.permissions().readonly() {
        return Err(io::Error::from_raw_os_error(ERROR_ACCESS_DENIED as i32));
    }
    Ok(())
}

/// Nothing to copy: no owner, group or mode bits; the new file keeps the
/// ACL it inherited from its directory.
pub(crate) fn copy_owner_and_mode(file: &File, like: &Metadata, mask: u32) -> io::Result<()> {
    let _ = (file, like, mask);
    Ok(())
}

/// Windows has no FIFOs, sockets or devices in its file systems.
pub(crate) fn describe_special(file_type: &FileType) -> Option<&'static str> {
    let _ = file_type;
    None
}

/// `ERROR_DIR_NOT_EMPTY`.
pub(crate) const NOT_EMPTY: i32 = ERROR_DIR_NOT_EMPTY as i32;

/// The Windows error codes of each cause of `crate::ErrorCause`
/// (`cause.rs` tells them apart with these): denied, read-only, not empty,
/// busy.
pub(crate) const DENIED: &[i32] = &[ERROR_ACCESS_DENIED as i32];
pub(crate) const READ_ONLY: &[i32] = &[ERROR_WRITE_PROTECT as i32];
pub(crate) const NOT_EMPTY_CODES: &[i32] = &[ERROR_DIR_NOT_EMPTY as i32];
pub(crate) const BUSY: &[i32] = &[
    ERROR_SHARING_VIOLATION as i32,
    ERROR_LOCK_VIOLATION as i32,
    ERROR_BUSY as i32,
];

/// `None`: std's `Metadata` has no stable file index here
/// (`crate::FileId::of_metadata`).
pub(crate) fn metadata_id(meta: &Metadata) -> Option<(u64, u64)> {
    let _ = meta;
    None
}

/// Volume serial number and file index of the open `file`.
#[allow(unsafe_code)]
pub(crate) fn file_id(file: &File) -> io::Result<(u64, u64)> {
    use std::os::windows::io::AsRawHandle;
    use windows_sys::Win32::Foundation::HANDLE;

    // SAFETY: an all-zero BY_HANDLE_FILE_INFORMATION is valid (plain integers).
    let mut info: BY_HANDLE_FILE_INFORMATION = unsafe { std::mem::zeroed() };
    // SAFETY: the handle is open for the borrow of `file`; `info` is a valid
    // out-pointer for the call.
    let ok = unsafe { GetFileInformationByHandle(file.as_raw_handle() as HANDLE, &mut info) };
    if ok == 0 {
        return Err(io::Error::last_os_error());
    }
    let index = (u64::from(info.nFileIndexHigh) << 32) | u64::from(info.nFileIndexLow);
    Ok((u64::from(info.dwVolumeSerialNumber), index))
}

/// The same of the file at `path` (opened: a symbolic link followed).
pub(crate) fn path_id(path: &Path) -> io::Result<(u64, u64)> {
    // std opens with reading, writing and deleting shared: a rename of the
    // file by another process is not hindered.
    file_id(&File::open(path)?)
}

/// A file's length, 0 for a directory (std's `Metadata` has no
/// allocation size here; a directory's entries live in the MFT).
pub(crate) fn allocated_bytes(meta: &Metadata) -> u64 {
    if meta.is_file() {
        meta.len()
    } else {
        0
    }
}

/// Nothing: Windows documents no flush of a directory, and NTFS journals
/// the changes of its entries.
pub(crate) fn flush_dir(dir: &Path) -> io::Result<()> {
    let _ = dir;
    Ok(())
}
