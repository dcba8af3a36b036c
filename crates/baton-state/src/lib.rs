//! Crash-safe state files: atomic JSON edits, JSONL appends with torn-tail
//! repair, and compare-and-swap, serialised by baton locks.
//!
//! Agents keep their memory in plain files: `tasks.json` rewritten whole,
//! `events.jsonl` appended. Done naively, two writers that both read version
//! 11 both write version 12 and one update is lost; a writer killed
//! mid-write leaves half a document; two appenders interleave partial lines.
//! This crate makes each change of a file serialised (one lock, taken in the
//! kernel, released even if the holder is SIGKILLed), atomic and durable
//! (docs/src/design/architecture.md, decision 8):
//!
//! - **edit** ([`edit`], [`edit_locked`], [`edit_with_filter`]): under the
//!   lock, read the file, compute the new content, check it (a `.json`
//!   file must stay one JSON value), write it to a temp file
//!   `.<name>.baton-tmp-<pid>-<random>` in the same directory, give it the
//!   old file's group and permission bits (and owner, as root), fsync it,
//!   rename it over the file, fsync the directory (`baton_fs::TempFile`
//!   with `Durability::DataAndDir`). The rename is the commit point. A
//!   [`Filter`] runs under baton-proc's supervisor, as a contained child;
//!   its output is capped ([`Filter::max_output`], default
//!   [`DEFAULT_MAX_OUTPUT`]), so an endless one is stopped, not buffered.
//! - **append** ([`append`], [`append_locked`]): under the lock, check all
//!   records, cut off a torn last line (keeping its bytes in `FILE.torn`),
//!   write the records with one `write` (cut back off if it fails),
//!   fdatasync. The write is the commit point.
//! - **get** ([`get`], [`read_locked`]): read under a shared lock; the
//!   content comes with its [`Version`], a content hash that
//!   [`Options::if_version`] turns an edit into a compare-and-swap.
//!   [`Snapshot::content_json`] is exact or an error, never lossy.
//!
//! ## What is guaranteed
//!
//! - Anyone reading the file, with or without baton, sees the old or the new
//!   content of an edit, never a mix, also after `kill -9` of the writer or
//!   a power loss: the file is only ever replaced by `rename(2)`.
//! - When an edit or append returns `Ok`, its data has been flushed with
//!   fsync/fdatasync (and the directory too, when a name changed), so it
//!   survives a power loss on file systems that honour fsync.
//! - When it returns an error, the file's content is as it was, so the call
//!   may be repeated — except for [`StateError::NotDurable`]: the change was
//!   made (after the commit point) but flushing it failed, and repeating it
//!   without a compare-and-swap could apply it twice; and for
//!   [`StateError::PartlyAppended`] below ([`StateError::changed`] says
//!   which case it is).
//! - One append writes all of its records or none: they go to the file in
//!   one `write`, and a write that fails or comes up short (disk full, file
//!   size limit) is cut back to the file's previous length. Only if that
//!   cut fails too is the result [`StateError::PartlyAppended`].
//! - Writers that use the same lock are serialised, so no update is lost;
//!   a compare-and-swap fails instead of overwriting a change it has not
//!   seen.
//! - A writer killed mid-edit leaves the old content and, at most, its temp
//!   file, which the next edit of the file removes (it holds the lock, so no
//!   live writer can own the temp file). A writer killed mid-append leaves a
//!   torn last line, which the next append or edit moves to `FILE.torn` —
//!   moved, never silently dropped. Reads of a `.jsonl` file leave it out.
//! - A `.jsonl` file whose last line is a whole JSON record lacking only its
//!   newline (written by another tool) is not torn: reads, versions and
//!   edits see the record, and the next append writes the newline before
//!   its own records.
//!
//! ## What is not
//!
//! - Locks are advisory: a program that writes the file without baton, or a
//!   baton writer using a *different* lock for the same file, is not
//!   serialised. The default lock is named after the file's canonical path,
//!   so paths through symbolic links to directories agree, but hard links do
//!   not. If several files share one lock (`Options::lock`), every writer
//!   must name it.
//! - A version is a hash of the content, not a counter: after A → B → A, a
//!   compare-and-swap expecting A succeeds. 64 bits of SHA-256 make an
//!   accidental collision negligible; they do not resist a forger.
//! - Replacing creates a new inode: other hard links of the file keep the
//!   old content, and extended attributes and ACLs are not copied. The
//!   permission bits are kept. The owner is kept only when the writer is
//!   root (nobody else may give a file away): otherwise the new file belongs
//!   to the writer and the old owner keeps only the access its group or
//!   others have. The group is set separately and kept whenever the writer
//!   may set it (root, or a member of the group), so a file shared through
//!   a group stays shared whoever edits it. Where the group cannot be kept,
//!   the file gets the writer's group, which gets no more access than
//!   others had; set-user-ID and set-group-ID bits are kept only with the
//!   owner and group they refer to. New files get mode 0666 minus the
//!   umask; a new `FILE.torn` gets the state file's owner, group and bits
//!   (without execute) on the same terms.
//! - Appends of several records in one call are one `write`, but a reader
//!   that does not take the lock may see a prefix of them, and a writer
//!   killed or a machine crashing in the middle of that write may leave a
//!   prefix: the records before the cut stay, the one cut is a torn line.
//!   All-or-none holds for errors, not for crashes; where part of a batch
//!   would be wrong, make the batch one record.
//! - A directory the writer cannot read cannot be opened to flush it:
//!   changes there that create or rename a file end in
//!   [`StateError::NotDurable`].
//! - A crash while a torn line is being moved may leave it twice in
//!   `FILE.torn`.
//! - A last line without its newline counts as whole only in a `.jsonl`
//!   file, and only if it is one JSON value other than a bare number (`12`
//!   may be `123` cut between digits): such a line, and any unterminated
//!   last line of another file, is treated as torn.
//! - Symbolic links are resolved before the lock is taken; a file that is a
//!   link to another file in the same directory is edited through its
//!   target (the link stays); links to other directories are refused.
//! - Network file systems: `rename` is atomic on NFS, but locks and fsync
//!   depend on the server.
//!
//! ## Platforms
//!
//! Linux, macOS and Windows; this crate calls no platform API itself (its
//! file calls are baton-fs's, its filters baton-proc's supervisor, its
//! locks baton-lock's). What differs from the above on Windows:
//!
//! - **Replace** is `MoveFileExW(MOVEFILE_REPLACE_EXISTING |
//!   MOVEFILE_WRITE_THROUGH)`, then `FlushFileBuffers` of the new file (no
//!   directory is flushed: NTFS journals the rename). Readers that have the
//!   file open keep the old content if they share it for deleting (Rust's
//!   `File::open` does) and NTFS renames with POSIX semantics; where the
//!   replacement is refused meanwhile (another kind of reader, FAT, most
//!   network shares, wine), it is retried for about 1 s, then fails and
//!   changes nothing (`baton_fs::TempFile::persist`).
//! - **Permissions**: no owner, group or mode bits are copied; the new file
//!   has the ACL it inherits from its directory (an ACL set on the old file
//!   itself is not kept, as ACLs are not on unix). A file with the
//!   read-only attribute is refused, as an unwritable file is on unix.
//! - **The default lock name** is the path in lower case with `/` between
//!   components (`state/c:/users/me/tasks.json`): NTFS ignores case, so
//!   every spelling of a name is one file with one lock.
//! - **Filters** run in a Job Object: a timeout or what a filter leaves
//!   running ends its whole tree (`TerminateJobObject`), and it dies with
//!   baton however baton dies; a `kill -9` of a writer is `TerminateProcess`
//!   here, with the same outcome (old or new content, a temp file at most).
//! - **Torn lines** are cut through a second handle of the same open file
//!   (`ReOpenFile`), as a handle opened for appending may not change the
//!   file's size.
//! - Lines ended by CRLF are records like any other (`\r` is JSON white
//!   space); appends end theirs with `\n`.
//!
//! macOS runs the unix code; its flushes are `F_FULLFSYNC`.
//!
//! ## Example
//!
//! ```
//! use baton_lock::{acquire, BatonDir, LockRequest};
//! use baton_state::{append, append_locked, edit, edit_locked, get, Options, StateFile};
//!
//! let tmp = tempfile::tempdir()?;
//! let dir = BatonDir::open(tmp.path().join("baton"))?;
//! let counter = tmp.path().join("counter.json");
//!
//! // Read-modify-write under the file's own lock.
//! for _ in 0..3 {
//!     edit(&dir, &counter, &Options::new(), |old| {
//!         let n: u64 = match old {
//!             Some(bytes) => serde_json::from_slice::<serde_json::Value>(bytes)?["n"]
//!                 .as_u64()
//!                 .unwrap_or(0),
//!             None => 0,
//!         };
//!         Ok::<_, serde_json::Error>(Some(format!("{{\"n\":{}}}\n", n + 1).into_bytes()))
//!     })?;
//! }
//! let snap = get(&dir, &counter, &Options::new())?;
//! assert_eq!(snap.content.as_deref(), Some(&b"{\"n\":3}\n"[..]));
//!
//! // Compare-and-swap: an edit against a stale version changes nothing.
//! let stale = Options::new().if_version(baton_state::Version::absent());
//! assert!(edit(&dir, &counter, &stale, |_| Ok::<_, std::io::Error>(Some(b"{}".to_vec()))).is_err());
//!
//! // One lock over a directory: a task and its event change together.
//! let guard = acquire(&dir, &LockRequest::new("memory".parse()?))?;
//! let tasks = StateFile::resolve(tmp.path().join("tasks.json"))?;
//! let events = StateFile::resolve(tmp.path().join("events.jsonl"))?;
//! edit_locked(&tasks, &guard, None, |_| {
//!     Ok::<_, std::io::Error>(Some(br#"{"t1":"done"}"#.to_vec()))
//! })?;
//! append_locked(&events, &guard, None, &[r#"{"event":"t1 done"}"#])?;
//! drop(guard);
//!
//! // Appends from anywhere else name the same lock.
//! append(&dir, tmp.path().join("events.jsonl"), &Options::new().lock("memory".parse()?), &["{}"])?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]

mod append;
mod atomic;
mod edit;
mod error;
mod file;
mod filter;
mod read;
mod version;

use std::path::Path;

use baton_lock::{
    acquire, BatonDir, HolderKind, LockGuard, LockName, LockRequest, Mode, WaitPolicy,
};

pub use append::{append_locked, Appended, Torn};
pub use edit::{edit_locked, edit_with_filter_locked, Edited};
pub use error::{EditError, StateError};
pub use file::{Format, StateFile};
pub use filter::{Filter, DEFAULT_MAX_OUTPUT};
pub use read::{read_locked, Snapshot};
pub use version::Version;

/// How [`edit`], [`append`] and [`get`] lock and what they expect.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Options {
    /// The lock to take; `None` takes the file's own lock
    /// ([`StateFile::default_lock_name`]). Name one lock for several files
    /// to change them together.
    pub lock: Option<LockName>,
    /// How long to wait for the lock (default: forever).
    pub wait: WaitPolicy,
    /// Compare-and-swap for edits and appends: proceed only if the file's
    /// version is still this. Ignored by [`get`].
    pub if_version: Option<Version>,
    /// What the holder does, shown by `baton lock status` (default:
    /// `state edit <path>` and the like).
    pub operation: Option<String>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            lock: None,
            wait: WaitPolicy::Forever,
            if_version: None,
            operation: None,
        }
    }
}

impl Options {
    /// The file's own lock, waiting forever, no compare-and-swap.
    pub fn new() -> Options {
        Options::default()
    }

    /// Takes `lock` instead of the file's own lock.
    pub fn lock(mut self, lock: LockName) -> Options {
        self.lock = Some(lock);
        self
    }

    /// Sets how long to wait for the lock.
    pub fn wait(mut self, wait: impl Into<WaitPolicy>) -> Options {
        self.wait = wait.into();
        self
    }

    /// Makes edits and appends a compare-and-swap against `version`.
    pub fn if_version(mut self, version: Version) -> Options {
        self.if_version = Some(version);
        self
    }

    /// Sets the operation recorded in the lock's metadata.
    pub fn operation(mut self, operation: impl Into<String>) -> Options {
        self.operation = Some(operation.into());
        self
    }
}

/// Takes the exclusive lock that [`edit`] and [`append`] would take for
/// `file`: `opts.lock`, else the file's own lock.
pub fn lock(dir: &BatonDir, file: &StateFile, opts: &Options) -> Result<LockGuard, StateError> {
    lock_as(dir, file, opts, Mode::Exclusive, "state edit")
}

fn lock_as(
    dir: &BatonDir,
    file: &StateFile,
    opts: &Options,
    mode: Mode,
    verb: &str,
) -> Result<LockGuard, StateError> {
    take(dir, file, opts, mode, verb, HolderKind::Library)
}

/// The lock of a change to `file`, refused when this process runs inside
/// the filter of an edit of that same file (see [`Filter`]): through the
/// edit's hold the change would be made, then overwritten by the filter's
/// output.
fn lock_to_change(
    dir: &BatonDir,
    file: &StateFile,
    opts: &Options,
    verb: &str,
    kind: HolderKind,
) -> Result<LockGuard, StateError> {
    let guard = take(dir, file, opts, Mode::Exclusive, verb, kind)?;
    if guard.is_borrowed()
        && std::env::var_os(filter::STATE_FILE_VAR).is_some_and(|f| Path::new(&f) == file.path())
    {
        return Err(StateError::InsideOwnFilter {
            path: file.path().to_path_buf(),
        });
    }
    Ok(guard)
}

/// Takes the lock as a holder of `kind`: [`HolderKind::Run`] for an edit
/// that runs a filter, so that the filter (a descendant of the holder) may
/// use the hold for other files instead of waiting for it forever.
fn take(
    dir: &BatonDir,
    file: &StateFile,
    opts: &Options,
    mode: Mode,
    verb: &str,
    kind: HolderKind,
) -> Result<LockGuard, StateError> {
    let name = match &opts.lock {
        Some(n) => n.clone(),
        None => file.default_lock_name()?,
    };
    let operation = opts
        .operation
        .clone()
        .unwrap_or_else(|| format!("{verb} {}", file.path().display()));
    // Run by a script that already holds the lock (`baton run --lock`, or
    // `baton lock acquire` in the script): use that hold.
    let req = LockRequest::new(name)
        .mode(mode)
        .wait(opts.wait)
        .operation(operation)
        .kind(kind)
        .use_ancestor_hold();
    Ok(acquire(dir, &req)?)
}

/// Edits the file at `path` under its lock (see [`edit_locked`] for what
/// `f` gets and returns, and [`Options`] for the lock and the
/// compare-and-swap).
///
/// The lock is released when this returns; to change several files under
/// one lock, take it once and call [`edit_locked`] and [`append_locked`].
pub fn edit<F, E>(
    dir: &BatonDir,
    path: impl AsRef<Path>,
    opts: &Options,
    f: F,
) -> Result<Edited, EditError<E>>
where
    F: FnOnce(Option<&[u8]>) -> Result<Option<Vec<u8>>, E>,
{
    let file = StateFile::resolve(path)?;
    let guard = lock_to_change(dir, &file, opts, "state edit", HolderKind::Library)?;
    edit_locked(&file, &guard, opts.if_version.as_ref(), f)
}

/// Edits the file at `path` under its lock with an external [`Filter`]
/// (what `baton state edit FILE -- FILTER...` does); see
/// [`edit_with_filter_locked`].
pub fn edit_with_filter(
    dir: &BatonDir,
    path: impl AsRef<Path>,
    opts: &Options,
    filter: &Filter,
) -> Result<Edited, StateError> {
    let file = StateFile::resolve(path)?;
    let guard = lock_to_change(dir, &file, opts, "state edit", HolderKind::Run)?;
    edit_with_filter_locked(&file, &guard, opts.if_version.as_ref(), filter)
}

/// Appends `records` to the file at `path` under its lock; see
/// [`append_locked`].
pub fn append<R: AsRef<[u8]>>(
    dir: &BatonDir,
    path: impl AsRef<Path>,
    opts: &Options,
    records: &[R],
) -> Result<Appended, StateError> {
    let file = StateFile::resolve(path)?;
    let guard = lock_to_change(dir, &file, opts, "state append", HolderKind::Library)?;
    append_locked(&file, &guard, opts.if_version.as_ref(), records)
}

/// Reads the file at `path` and its version under a shared lock, so no
/// writer using that lock is half-way through an append (an edit is never
/// visible half-way anyway).
pub fn get(dir: &BatonDir, path: impl AsRef<Path>, opts: &Options) -> Result<Snapshot, StateError> {
    let file = StateFile::resolve(path)?;
    let guard = lock_as(dir, &file, opts, Mode::Shared, "state get")?;
    read_locked(&file, &guard)
}
