//! The JSON document inside a lock file: fencing counter and holder records.
//!
//! The document is for people and tools; exclusion never depends on it. It is
//! read and written only under the lock file's META byte lock. A write is one
//! `pwrite` at offset 0 followed by a truncation to the new length; readers
//! take the first JSON value in the file and ignore what follows, so a writer
//! killed between the two steps leaves a readable document.

use std::fs::File;

use serde::{Deserialize, Serialize};

use crate::identity::ProcessIdentity;
use crate::outcome::{HolderOutcome, SlotOutcome};

/// What is recorded about one holder of a lock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HolderRecord {
    /// The process holding the lock.
    #[serde(flatten)]
    pub process: ProcessIdentity,
    /// Who the holder acts for (default `user@host`).
    pub owner: String,
    /// What the holder is doing, free text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<String>,
    /// The run this grant belongs to.
    pub run_id: String,
    /// When the lock was granted, RFC 3339.
    pub acquired_at: String,
    /// The fencing token of this grant.
    pub token: u64,
    /// `exclusive`, `shared` or `semaphore`.
    pub mode: String,
    /// Which slot of a semaphore is held (0 otherwise).
    #[serde(default)]
    pub slot: u32,
    /// What kind of process holds it.
    #[serde(default)]
    pub kind: HolderKind,
    /// The process group of the command the holder runs, once it runs: if the
    /// holder dies, the next holder terminates what is left of it first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command_group: Option<CommandGroup>,
    /// The process this holder holds the lock for (the script that ran
    /// `baton lock acquire`), which alone may release it without its token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acquired_for: Option<ProcessIdentity>,
    /// The holder let go of the lock because the process it held it for
    /// ended without releasing it ([`crate::LockGuard::abandon`]): for the
    /// next holder, as if it had died.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub abandoned: bool,
    /// The holder this grant followed, when that one ended without
    /// releasing (died, or [`HolderRecord::abandoned`]): its work may be
    /// half done. Its own `previous_holder` is not kept.
    #[serde(
        default,
        rename = "previous_holder",
        skip_serializing_if = "Option::is_none"
    )]
    pub previous: Option<Box<HolderRecord>>,
    /// The thread of `acquired_for` that started the holder (through
    /// `baton lock acquire`), or the thread of a `library` holder that
    /// holds it: the caller a second request from the same thread would
    /// deadlock with. Absent in records of older versions, and when it
    /// could not be told.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller_thread: Option<i32>,
    /// How the holder before this grant ended ([`HolderOutcome`]): `died`
    /// when [`HolderRecord::previous`] is set, else what it left when it
    /// released. Absent for the first grant of a lock, and in records of
    /// older versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_outcome: Option<HolderOutcome>,
}

impl HolderRecord {
    /// Whether this record, left on a slot nobody holds, belongs to a holder
    /// that ended without releasing: it was abandoned, or its process no
    /// longer runs (one that still runs is releasing: the slot is freed
    /// before the record is removed).
    pub fn ended_without_release(&self) -> bool {
        self.abandoned || self.process.liveness() != crate::identity::Liveness::Alive
    }
}

/// The process group a holder's command runs in (docs/src/design/architecture.md, decision 11).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandGroup {
    /// The group id (the pid of the command, which leads it).
    pub pgid: i32,
    /// Start time of the leader in clock ticks since boot, so that a reused
    /// group id is never taken for this group.
    pub leader_start_time: u64,
    /// How long the holder would have waited between TERM and KILL.
    pub grace_ms: u64,
    /// The session the group belongs to (0: not recorded).
    #[serde(default)]
    pub session: i32,
    /// When an acquirer first sent the group TERM after its holder died
    /// (milliseconds since the Unix epoch): the grace runs from then,
    /// whichever acquirer finishes the work, so that a bounded wait can give
    /// up without restarting the grace or skipping the KILL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopping_since_ms: Option<u64>,
}

impl CommandGroup {
    /// The group of a command just started, with its leader's identity
    /// (start time, and on Unix its session) read now, so that a reused
    /// group id is never taken for it; Windows has no sessions.
    pub fn of_started(started: baton_proc::Started, grace_ms: u64) -> CommandGroup {
        #[cfg(unix)]
        let (leader_start_time, session) =
            baton_proc::procfs::stat(started.pgid).map_or((0, 0), |s| (s.start_time, s.session));
        #[cfg(windows)]
        let (leader_start_time, session) =
            (crate::identity::start_time(started.pgid).unwrap_or(0), 0);
        CommandGroup {
            pgid: started.pgid,
            leader_start_time,
            grace_ms,
            session,
            stopping_since_ms: None,
        }
    }
}

/// What kind of process holds a lock (`kind` in metadata and `--json`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum HolderKind {
    /// A program using the library directly.
    #[default]
    Library,
    /// A `baton run` supervisor (it releases the lock when its command ends).
    Run,
    /// The background holder of `baton lock acquire`.
    Hold,
    /// baton's git operations (repository lock, push queue, workspaces).
    Git,
    /// Written by a newer baton: shown, never acted on.
    #[serde(other)]
    Other,
}

impl HolderKind {
    /// The name used in metadata and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            HolderKind::Library => "library",
            HolderKind::Run => "run",
            HolderKind::Hold => "hold",
            HolderKind::Git => "git",
            HolderKind::Other => "other",
        }
    }
}

/// The whole document.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockDoc {
    /// Format version of this document.
    #[serde(default)]
    pub format: u32,
    /// The lock's full name (file names of long names are shortened).
    #[serde(default)]
    pub name: String,
    /// Number of slots: 1 for exclusive/shared locks, N for semaphores.
    #[serde(default = "one")]
    pub max: u32,
    /// The last fencing token granted; only ever increases.
    #[serde(default)]
    pub token: u64,
    /// Holders at the time of the last change (some may have died since).
    #[serde(default)]
    pub holders: Vec<HolderRecord>,
    /// Inode of the file this document was last granted in; a document in a
    /// file with another inode was copied, or the file is new.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inode: Option<u64>,
    /// What each slot's last releasing holder left for the next grant
    /// (one per slot; a grant of the slot takes it). Older versions ignore
    /// it and drop it when they rewrite the document, which only makes the
    /// next grant report `released`, never a wrong failure.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outcomes: Vec<SlotOutcome>,
    /// Length of the file this document was read from, so a rewrite knows
    /// whether it must truncate without asking the kernel again.
    #[serde(skip)]
    stored_len: u64,
}

fn one() -> u32 {
    1
}

/// The outcome of reading a lock file's document.
#[derive(Debug)]
pub(crate) enum DocRead {
    /// Nothing written yet.
    Empty,
    /// A valid document.
    Valid(LockDoc),
    /// Content that is not a lock document; the reason says why. The number
    /// is the largest fencing token still recognisable in it (0 if none).
    Unreadable(String, u64),
}

impl DocRead {
    /// The document, or a fresh one if there is none or it is unreadable.
    pub fn or_fresh(self) -> LockDoc {
        let token = match self {
            DocRead::Valid(doc) => return doc,
            DocRead::Empty => 0,
            DocRead::Unreadable(_, token) => token,
        };
        LockDoc {
            format: 1,
            max: 1,
            token,
            // Unknown length: the next write truncates to its own.
            stored_len: u64::MAX,
            ..LockDoc::default()
        }
    }
}

/// Longest document we read; anything longer is reported as unreadable.
const MAX_DOC: usize = 1 << 20;

pub(crate) fn read_doc(file: &File) -> std::io::Result<DocRead> {
    // One buffer per thread, zeroed once: a fresh zeroed 4 KiB for every
    // read cost as much as parsing the document (measured with callgrind).
    thread_local! {
        static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    BUF.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => read_doc_into(file, &mut buf),
        // Never nested; but if it were, a buffer of its own.
        Err(_) => read_doc_into(file, &mut Vec::new()),
    })
}

fn read_doc_into(file: &File, buf: &mut Vec<u8>) -> std::io::Result<DocRead> {
    if buf.len() < 4096 {
        buf.resize(4096, 0);
    }
    // Read until end of file without asking for its size first: one system
    // call for the usual small document.
    let mut got = 0;
    loop {
        if got == buf.len() {
            if buf.len() >= MAX_DOC {
                return Ok(DocRead::Unreadable(
                    format!("more than {MAX_DOC} bytes, larger than a lock document can be"),
                    0,
                ));
            }
            buf.resize(buf.len() * 4, 0);
        }
        let want = buf.len() - got;
        let n = crate::sys::read_at(file, &mut buf[got..], got as u64)?;
        got += n;
        // A short read of a regular file is its end.
        if n < want {
            break;
        }
    }
    let buf = &buf[..got];
    if buf.iter().all(|b| b.is_ascii_whitespace()) {
        return Ok(DocRead::Empty);
    }
    let mut values = serde_json::Deserializer::from_slice(buf).into_iter::<LockDoc>();
    match values.next() {
        Some(Ok(mut doc)) => {
            doc.stored_len = got as u64;
            Ok(DocRead::Valid(doc))
        }
        Some(Err(e)) => Ok(DocRead::Unreadable(
            format!("not a lock document: {e}"),
            salvage_token(buf),
        )),
        None => Ok(DocRead::Empty),
    }
}

/// The largest number following `"token":` in damaged content, so that a
/// damaged document does not send fencing tokens backwards.
fn salvage_token(buf: &[u8]) -> u64 {
    const KEY: &[u8] = b"\"token\":";
    let mut best = 0;
    for (i, w) in buf.windows(KEY.len()).enumerate() {
        if w == KEY {
            let digits: String = buf[i + KEY.len()..]
                .iter()
                .skip_while(|b| **b == b' ')
                .take_while(|b| b.is_ascii_digit())
                .map(|b| char::from(*b))
                .collect();
            best = best.max(digits.parse().unwrap_or(0));
        }
    }
    best
}

/// Up to this size a document that shrank is padded with spaces (valid JSON
/// whitespace) instead of the file being truncated: a truncate is a costly
/// file system operation on the handoff path (the releaser removes its record
/// before the next holder can run), and a read covers this much in one call.
const PAD_LIMIT: u64 = 4096;

pub(crate) fn write_doc(file: &File, doc: &mut LockDoc) -> std::io::Result<()> {
    let mut bytes = serde_json::to_vec(doc).map_err(std::io::Error::other)?;
    let len = bytes.len() as u64 + 1;
    let pad = doc.stored_len > len && doc.stored_len <= PAD_LIMIT;
    if pad {
        bytes.resize(
            usize::try_from(doc.stored_len - 1).unwrap_or(usize::MAX),
            b' ',
        );
    }
    bytes.push(b'\n');
    crate::sys::write_all_at(file, &bytes, 0)?;
    if doc.stored_len > bytes.len() as u64 {
        file.set_len(bytes.len() as u64)?;
    }
    doc.stored_len = bytes.len() as u64;
    Ok(())
}
