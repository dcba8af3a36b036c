//! The leaf helpers every baton crate that touches files shares: one path
//! error, one atomic write, one random number. It depends on nothing of
//! baton, so the lock, state, git, run and service crates can all use it.
//!
//! - [`PathError`] and [`IoResultExt::context`]: every I/O error says what
//!   was being done and to which path (`cannot flush directory '/x'`); each
//!   crate turns it into the `Io` variant of its own error type with `?`.
//! - [`write_atomic`] and [`TempFile`]: replace a file so that a reader or a
//!   crash of the writer sees the old content or the new, never a mix, with
//!   a [`Durability`] that says what a power loss may still undo.
//! - [`open_no_follow`], [`read_exact_at`], [`set_len`], [`flush_entry`], [`flush_dir`],
//!   [`check_write_access`], [`copy_owner_and_mode`], [`describe_file_type`]
//!   and [`shorten_name`]: what a crate that edits files in place
//!   (baton-state) needs of the system, alike on every platform.
//! - [`error_cause`], [`not_empty_error`] and [`allocated_bytes`]: what
//!   baton-git needs to advise on a failed removal and to measure a
//!   workspace.
//! - [`FileId`] ([`file_id`], [`path_id`], [`FileId::of_metadata`]): a
//!   file's identity, the one way baton tells whether two names are one file
//!   (a workspace's hard links, an event log's rotated segments).
//! - [`random_u64`]: from the kernel's random source, with a fallback for
//!   the uses here (unique names, jitter), where uniqueness matters and
//!   secrecy does not.
//!
//! ```
//! use baton_fs::{write_atomic, Durability};
//!
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("doc.json");
//! write_atomic(&path, b"{}\n", Durability::DataAndDir)?;
//! assert_eq!(std::fs::read(&path)?, b"{}\n");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Atomic replacement: what is and is not guaranteed
//!
//! The rename is the commit point. A reader, or the next writer after a
//! crash of this one (even `kill -9`), sees the old content or the new,
//! never a mix. What a power loss (or a kernel crash) may still undo
//! depends on the [`Durability`]. A writer that dies before the rename
//! leaves its temp file (`.NAME.baton-tmp-PID-RANDOM`, see [`temp_prefix`]),
//! for its caller to clean up; one that fails removes it.
//!
//! Not guaranteed: anything when two writers replace the same file at once
//! without a lock (the last rename wins, whole); the owner and mode of the
//! file being replaced (the new file is the writer's, with the mode given
//! to [`TempFile::create`]; callers that care copy them onto the temp file
//! before [`TempFile::persist`], as baton-state does).
//!
//! Modelled on jj's `lib/src/file_util.rs` (`PathError`, `IoResultExt`,
//! `persist_temp_file`).
//!
//! ## Platforms
//!
//! Linux, macOS and Windows. Every call that differs is in one private
//! module, `sys` (`sys/unix.rs`, `sys/linux.rs` for the Linux-only parts,
//! `sys/windows.rs`); the design, platform modules inside each crate that
//! touches the OS, is described in `src/sys/mod.rs`. What differs for a
//! caller:
//!
//! | | Linux | macOS | Windows |
//! |---|---|---|---|
//! | replace | `rename(2)` | `rename(2)` | `MoveFileExW(MOVEFILE_REPLACE_EXISTING)` (`std::fs::rename`), falling back to a POSIX-semantics rename when the target is open or read-only |
//! | [`Durability::Data`] | `fsync(2)` of the temp file | `fcntl(F_FULLFSYNC)` (std's `sync_all`: plain `fsync` does not flush the drive's cache there) | `FlushFileBuffers` of the temp file |
//! | [`Durability::DataAndDir`] | and `fsync(2)` of the directory | and `F_FULLFSYNC` of the directory (plain `fsync(2)` where refused) | and `MOVEFILE_WRITE_THROUGH`, then `FlushFileBuffers` of the renamed file; no directory is flushed (Windows documents no such flush, and NTFS journals the rename) |
//! | open readers of the target | keep reading the old file | same | keep reading the old file if they share it for deleting (Rust's `File::open` does) and NTFS renames with POSIX semantics (Windows 10 1709+); otherwise (a reader not sharing deletes, FAT, most network shares, wine) the replacement is retried for about 1 s, then fails, unchanged |
//! | `mode` of [`TempFile::create`] | bits minus umask | same | ignored: the file inherits its directory's ACL |
//! | names, [`temp_prefix`] | bytes, exact | bytes, exact | UTF-16, cut between characters |
//! | [`random_u64`] | `getrandom(2)` | `getentropy(2)` | `ProcessPrng` |
//! | [`open_no_follow`] | `O_NOFOLLOW \| O_NONBLOCK`, `mode` | same | `FILE_FLAG_OPEN_REPARSE_POINT`, a link refused once open; `mode` ignored |
//! | [`flush_dir`] | `fsync(2)` of the directory | `F_FULLFSYNC` (plain `fsync` where refused) | nothing (no directory flush exists; NTFS journals entries) |
//! | [`set_len`] of a file opened for appending | `ftruncate(2)` | same | through `ReOpenFile(GENERIC_WRITE)` of the same open file |
//! | [`check_write_access`] | `faccessat(W_OK, AT_EACCESS)` | same | the read-only attribute of a file only (ACLs decide at open) |
//! | [`copy_owner_and_mode`] | owner (root), group (root or member), mode bits | same | nothing: the new file has its directory's inherited ACL |
//! | [`IoResultExt`] for `rustix::io::Errno` | yes | yes | no (no rustix) |

#![deny(unsafe_code)]

mod atomic;
mod cause;
mod error;
mod file;
mod identity;
mod random;
pub mod shared_log;
mod sys;

pub use atomic::{temp_prefix, write_atomic, Durability, TempFile, WriteError};
pub use cause::{error_cause, not_empty_error, ErrorCause};
pub use error::{IoResultExt, PathError};
pub use file::{
    allocated_bytes, check_write_access, copy_owner_and_mode, describe_file_type, flush_dir,
    flush_entry, open_no_follow, read_exact_at, set_len, shorten_name,
};
pub use identity::{file_id, path_id, FileId};
pub use random::random_u64;
