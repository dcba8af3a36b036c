//! The event log: one JSON line per run lifecycle event, in
//! `<baton dir>/events.jsonl`, rotated to `events.jsonl.1` at a size bound.
//!
//! Logging is best effort: a run never fails because its event could not be
//! written. The bound is [`LogConfig::max_bytes`] (`BATON_EVENTS_MAX_BYTES`,
//! default 4 MiB); one old file is kept, so the log takes at most about twice
//! that.
//!
//! # Appending and rotating
//!
//! An append opens the log `O_APPEND`, takes an exclusive `flock` on that open
//! file (on Windows a `LockFileEx` lock on one byte beyond any data, which
//! hinders neither reads nor writes), and checks that the file it locked is still the one at the log's path
//! (same device and inode; a rotation may have renamed it while the append
//! waited, and then the append opens the log again). Under the lock it writes
//! the line, and if the file has reached the bound it renames it to
//! `events.jsonl.1`, replacing the previous old file. The next append creates
//! a new `events.jsonl`. The rename is the commit point of a rotation.
//!
//! Why a lock on the log file and not a named baton lock: the lock and the
//! file are the same object, so "is this still the log?" is one
//! `fstat`/`stat` comparison under the lock; an `flock` is one system call and
//! leaves nothing behind, where a named lock would write holder metadata for
//! every event and show up in `baton lock list`; the kernel drops it when its
//! holder dies, even by SIGKILL. Why exclusive, even between appenders: the
//! size check then sees every line before it, so a file never exceeds the
//! bound by more than the one line that crossed it, and exactly one appender
//! sees the crossing. The lock is held for one `write`, one `fstat` and at
//! most one `rename`. The kernel has no timed `flock`, so a waiter retries a
//! non-blocking one with a short backoff until [`LogConfig::lock_wait`] has
//! passed, and then appends without the lock: a stopped holder must not stall
//! every run, and a line written unlocked is better than a line dropped.
//!
//! Guaranteed, for appends that got the lock:
//! - each line is written whole and once, into the file that is the log at
//!   that moment;
//! - only the appender whose line crossed the bound renames the file, and only
//!   while it is still the log: a file is never rotated twice, and a younger
//!   file never replaces it early;
//! - no line is written to a file after it was renamed, so a reader that sees
//!   the rename can drain the old file to its end and move on;
//! - each file stays below the bound plus one line.
//!
//! Not guaranteed:
//! - durability: lines are not fsynced, a machine crash may lose the latest;
//! - retention: a rotation deletes the previous old file, so a follower more
//!   than one rotation behind misses the lines it held;
//! - an append that gave up waiting for the lock, or whose file system has no
//!   `flock`, is written whole but may land in a file just renamed, after a
//!   follower left it, and never rotates the log.
//! - on Windows, a rotation whose rename cannot replace `events.jsonl.1`
//!   within about 1 s (a reader holds it open, where open files cannot be
//!   replaced: wine, FAT32, network shares) fails; the line is written, the
//!   append reports the error, and the next append rotates.
//!
//! # Reading
//!
//! [`print_events`] prints `events.jsonl.1`, then `events.jsonl`. Which file
//! comes next is decided by opening the log first and looking at the old name
//! second: if the file there is one already read (or there is none), no
//! rotation happened in between, so the log just opened is the next file;
//! otherwise the file at the old name is unread and comes first. Files read are
//! kept open, so their inode numbers cannot be reused meanwhile.
//!
//! `--follow` waits with inotify on the baton dir, for changes to either name
//! (a watch on the file itself would follow it to its new name and fall
//! silent after a rotation); macOS and Windows have no inotify, and there it
//! looks again every 100 ms ([`baton_fs::shared_log::POLL`]). When the file it reads is no longer at the log's
//! path, it drains that file to its end and continues with the next one from
//! its start.

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use baton_fs::shared_log::{self, DirWatch};
use baton_fs::FileId;
use baton_lock::BatonDir;
use serde::{Deserialize, Serialize};

pub use crate::error::EventLogError;
use crate::error::RunError;

/// One lifecycle event of a group run: a line of `baton events`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Event {
    /// When (RFC 3339).
    pub ts: String,
    /// The group key.
    pub group: String,
    /// The run.
    pub run_id: String,
    /// `queued`, `started`, `superseded`, `finished`, `skipped` or `gave_up`.
    pub event: String,
    /// The baton process.
    pub pid: i32,
    /// Exit code, for `finished`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<i32>,
    /// The superseding run, for `superseded`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// A `baton git push` of the run's command landed, for `finished` and
    /// `superseded` (mode supersede; present only when true). A run
    /// superseded after its push landed ends `finished` with its own code
    /// when its command ended by itself within the grace period.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pushed: bool,
    /// Free text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl Event {
    /// A new event stamped now.
    pub fn new(group: &str, run_id: &str, event: &str) -> Event {
        Event {
            ts: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            group: group.into(),
            run_id: run_id.into(),
            event: event.into(),
            pid: std::process::id() as i32,
            code: None,
            by: None,
            pushed: false,
            detail: None,
        }
    }

    /// Adds free text.
    pub fn detail(mut self, text: &str) -> Event {
        self.detail = Some(text.into());
        self
    }
}

/// The environment variable that sets [`LogConfig::max_bytes`].
pub const MAX_BYTES_ENV: &str = "BATON_EVENTS_MAX_BYTES";

/// The default [`LogConfig::max_bytes`]: 4 MiB.
pub const DEFAULT_MAX_BYTES: u64 = 4 << 20;

/// The default [`LogConfig::lock_wait`].
pub const DEFAULT_LOCK_WAIT: Duration = Duration::from_secs(1);

/// How the event log is bounded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogConfig {
    /// The size in bytes at which the log is renamed to `events.jsonl.1`.
    /// A file ends below this plus one line.
    pub max_bytes: u64,
    /// How long an append waits for another append or a rotation to finish
    /// before it writes without the lock.
    pub lock_wait: Duration,
}

impl Default for LogConfig {
    fn default() -> LogConfig {
        LogConfig {
            max_bytes: DEFAULT_MAX_BYTES,
            lock_wait: DEFAULT_LOCK_WAIT,
        }
    }
}

impl LogConfig {
    /// The defaults, with `max_bytes` from [`MAX_BYTES_ENV`] when it holds a
    /// positive number of bytes (anything else keeps the default: logging is
    /// best effort and must not fail a run).
    pub fn from_env() -> LogConfig {
        let max_bytes = std::env::var(MAX_BYTES_ENV)
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .filter(|&n| n > 0)
            .unwrap_or(DEFAULT_MAX_BYTES);
        LogConfig {
            max_bytes,
            ..LogConfig::default()
        }
    }
}

/// Attaches an operation and a path to an I/O error.
fn at<'p, E: Into<io::Error>>(
    op: &'static str,
    path: &'p Path,
) -> impl FnOnce(E) -> EventLogError + 'p {
    move |source| EventLogError {
        op,
        path: path.to_path_buf(),
        source: source.into(),
    }
}

/// How an append went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Appended {
    /// The line was written under the log's lock (see the module doc for what
    /// an unlocked append does not guarantee).
    pub locked: bool,
    /// This append rotated the log.
    pub rotated: bool,
}

/// `<baton dir>/events.jsonl`.
pub fn log_path(dir: &BatonDir) -> PathBuf {
    dir.path().join("events.jsonl")
}

/// Where the log at `log` is rotated to: `events.jsonl.1` next to it.
pub fn rotated_path(log: &Path) -> PathBuf {
    let mut name = log.as_os_str().to_owned();
    name.push(".1");
    PathBuf::from(name)
}

/// Appends one event (best effort), bounded by [`LogConfig::from_env`].
pub(crate) fn append(path: &Path, event: &Event) {
    let _ = append_with(path, event, &LogConfig::from_env());
}

/// Appends one event to the log at `path`, rotating it when it reaches
/// `config.max_bytes` (see the module doc for the protocol).
pub fn append_with(
    path: &Path,
    event: &Event,
    config: &LogConfig,
) -> Result<Appended, EventLogError> {
    let mut line = serde_json::to_vec(event).map_err(at("encode an event for", path))?;
    line.push(b'\n');
    let start = Instant::now();
    let deadline = start
        .checked_add(config.lock_wait)
        .unwrap_or(start + DEFAULT_LOCK_WAIT);
    loop {
        let mut file = open_append(path)?;
        if !matches!(lock_exclusive(&file, deadline), Ok(true)) {
            break; // timed out, or no flock here: append without the lock below
        }
        let id = baton_fs::file_id(&file).map_err(at("inspect", path))?;
        if path_id(path)? != Some(id) {
            continue; // rotated while we waited: this file is no longer the log
        }
        file.write_all(&line).map_err(at("append to", path))?;
        let size = file.metadata().map_err(at("inspect", path))?.len();
        let rotated = size >= config.max_bytes;
        if rotated {
            let old = rotated_path(path);
            shared_log::rename_over(path, &old).map_err(at("rotate", path))?;
        }
        // Closing `file` on return releases the lock.
        return Ok(Appended {
            locked: true,
            rotated,
        });
    }
    open_append(path)?
        .write_all(&line)
        .map_err(at("append to", path))?;
    Ok(Appended {
        locked: false,
        rotated: false,
    })
}

fn open_append(path: &Path) -> Result<File, EventLogError> {
    let mut options = OpenOptions::new();
    options.append(true);
    // 0600, or 0660 in a baton dir shared with a group.
    baton_lock::sharing::open_or_create(path, &options, 0o600).map_err(at("open", path))
}

/// First and longest pause between attempts to take the log's lock.
const FIRST_PAUSE: Duration = Duration::from_micros(20);
const LONGEST_PAUSE: Duration = Duration::from_millis(1);

/// Takes an exclusive lock on `file` (`flock`; on Windows a `LockFileEx`
/// byte beyond the data, see [`baton_fs::shared_log`]); `Ok(false)` once
/// `deadline` has passed. The kernel has no timed `flock`, and the lock is
/// held for one write, so a short backoff between non-blocking attempts is
/// enough.
fn lock_exclusive(file: &File, deadline: Instant) -> io::Result<bool> {
    let mut pause = FIRST_PAUSE;
    loop {
        if shared_log::try_lock_exclusive(file)? {
            return Ok(true);
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(false);
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(LONGEST_PAUSE);
    }
}

/// The identity (device and inode; volume and file index on Windows) of
/// the file at `path`, `None` if there is none.
fn path_id(path: &Path) -> Result<Option<FileId>, EventLogError> {
    baton_fs::path_id(path).map_err(at("inspect", path))
}

fn open_read(path: &Path) -> Result<Option<File>, EventLogError> {
    match File::open(path) {
        Ok(f) => Ok(Some(f)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(at("open", path)(e)),
    }
}

/// One file of the log, being read.
struct Segment {
    reader: BufReader<File>,
    id: FileId,
    /// The name it was opened under, for errors.
    path: PathBuf,
    /// It has been renamed away from the log's path, so nothing more will be
    /// written to it.
    renamed: bool,
}

impl Segment {
    fn new(file: File, path: &Path, renamed: bool) -> Result<Segment, EventLogError> {
        let id = baton_fs::file_id(&file).map_err(at("inspect", path))?;
        Ok(Segment {
            reader: BufReader::new(file),
            id,
            path: path.to_path_buf(),
            renamed,
        })
    }
}

/// Files read to their end, kept open so that their inode numbers are not
/// reused while they are compared with the files at the log's names (not
/// on Windows, where file ids are not reused and an open file would keep
/// a rotation from replacing it: [`shared_log::KEEP_OPEN_FOR_IDENTITY`]).
struct Done(Vec<(FileId, Option<File>)>);

impl Done {
    fn contains(&self, id: FileId) -> bool {
        self.0.iter().any(|(d, _)| *d == id)
    }

    fn push(&mut self, segment: Segment) {
        // The old name holds the last file read or a newer one (or, if the
        // log was deleted by hand, the one before): two are enough.
        if self.0.len() == 2 {
            self.0.remove(0);
        }
        let file = segment.reader.into_inner();
        self.0.push((
            segment.id,
            shared_log::KEEP_OPEN_FOR_IDENTITY.then_some(file),
        ));
    }
}

/// The file to read after those in `done`, `None` if there is no log yet.
fn next_segment(log: &Path, old: &Path, done: &Done) -> Result<Option<Segment>, EventLogError> {
    // Open the log first, then look at the old name: if nothing unread is
    // there, no rotation happened in between and the log is the next file.
    let current = open_read(log)?;
    if path_id(old)?.is_some_and(|id| !done.contains(id)) {
        if let Some(file) = open_read(old)? {
            let segment = Segment::new(file, old, true)?;
            if !done.contains(segment.id) {
                return Ok(Some(segment));
            }
        }
    }
    current.map(|f| Segment::new(f, log, false)).transpose()
}

/// Only what filtering by group needs of a line.
#[derive(Deserialize)]
struct GroupOf {
    group: String,
}

/// Prints the complete lines from `segment`'s position to its end; a partial
/// last line stays in `pending`.
fn drain(
    segment: &mut Segment,
    pending: &mut Vec<u8>,
    group: Option<&str>,
    out: &mut dyn Write,
) -> Result<(), RunError> {
    loop {
        let n = segment
            .reader
            .read_until(b'\n', pending)
            .map_err(at("read", &segment.path))?;
        if n == 0 || pending.last() != Some(&b'\n') {
            return Ok(()); // the end, perhaps in a line still being written
        }
        let keep = match group {
            None => true,
            Some(g) => serde_json::from_slice::<GroupOf>(pending).is_ok_and(|e| e.group == g),
        };
        if keep {
            out.write_all(pending).map_err(|source| RunError::Io {
                op: "write events",
                source,
            })?;
        }
        pending.clear();
    }
}

/// A watch on the log's directory, for changes to the log's names (inotify
/// on Linux; elsewhere a look every [`shared_log::POLL`]).
struct Watch(DirWatch);

impl Watch {
    fn new(log: &Path, old: &Path) -> Result<Watch, EventLogError> {
        let dir = match log.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let names = [log, old]
            .iter()
            .filter_map(|p| p.file_name().map(|n| n.to_owned()))
            .collect();
        Ok(Watch(
            DirWatch::new(&dir, names).map_err(at("watch", &dir))?,
        ))
    }

    /// Blocks until one of the log's names changed (or events were lost).
    fn wait(&self) -> Result<(), EventLogError> {
        self.0
            .wait()
            .map_err(at("wait for changes in", self.0.dir()))
    }
}

/// Prints the events of `group` (all groups if `None`) to `out`, oldest
/// first across the rotated file and the log, then, with `follow`, keeps
/// printing new ones as they are appended, across rotations (inotify, no
/// polling, on Linux; a look every 100 ms on macOS and Windows).
pub fn print_events(
    dir: &BatonDir,
    group: Option<&str>,
    follow: bool,
    out: &mut dyn Write,
) -> Result<(), RunError> {
    let log = log_path(dir);
    let old = rotated_path(&log);
    // Watch before the first read, so that no change after it goes unseen.
    let watch = if follow {
        Some(Watch::new(&log, &old)?)
    } else {
        None
    };
    let mut done = Done(Vec::new());
    let mut current: Option<Segment> = None;
    let mut pending = Vec::new();
    loop {
        let segment = match current.as_mut() {
            Some(s) => s,
            None => match next_segment(&log, &old, &done)? {
                Some(s) => current.insert(s),
                None => match &watch {
                    Some(w) => {
                        w.wait()?;
                        continue;
                    }
                    None => return Ok(()), // no log yet
                },
            },
        };
        drain(segment, &mut pending, group, out)?;
        if segment.renamed {
            // Complete: every append to it happened before it was renamed.
            // A partial last line could only be the rest of a failed write.
            pending.clear();
            if let Some(s) = current.take() {
                done.push(s);
            }
            continue;
        }
        let Some(w) = &watch else {
            return Ok(());
        };
        if path_id(&log)? != Some(segment.id) {
            // Rotated: read on to its end (appends may have landed since the
            // drain above), then continue with the next file.
            segment.renamed = true;
            continue;
        }
        out.flush().map_err(|source| RunError::Io {
            op: "write events",
            source,
        })?;
        w.wait()?;
    }
}
