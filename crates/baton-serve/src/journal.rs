//! The start journal: one line appended (`O_APPEND`, one `write`) per job
//! start, with the process group of its command, written while the command
//! waits to execute. A restarted service reads it to stop what a crashed one
//! left running. One file for all jobs: no new inode per job, and the line
//! survives a crash of the service (the page cache is the kernel's).
//!
//! Whole lines only: a write that fails part way (a full disk) or a crash
//! in the middle of one leaves a torn line at the end; the next record then
//! starts on a new line, so the torn fragment stays a line of its own that
//! `read` skips, and never swallows the record appended after it.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use baton_fs::{Durability, IoResultExt, TempFile};
use serde::{Deserialize, Serialize};

use crate::model::RecordedGroup;

/// Compact the journal when it grows past this.
const COMPACT_AT: u64 = 1024 * 1024;

#[derive(Serialize, Deserialize)]
struct Line {
    id: String,
    #[serde(flatten)]
    group: RecordedGroup,
}

/// The journal file, open for appending.
#[derive(Debug)]
pub struct StartJournal {
    path: PathBuf,
    file: Mutex<Appender>,
}

/// The open file, and whether its last line may be torn.
#[derive(Debug)]
struct Appender {
    file: File,
    torn: bool,
}

impl Appender {
    fn open(path: &Path) -> io::Result<Appender> {
        let file = open_append(path)?;
        Ok(Appender {
            torn: !ends_a_line(path),
            file,
        })
    }
}

/// Whether the file at `path` is empty or ends with a newline.
fn ends_a_line(path: &Path) -> bool {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = File::open(path) else {
        return true;
    };
    let mut last = [0u8; 1];
    match f.seek(SeekFrom::End(-1)) {
        Ok(_) => f.read_exact(&mut last).is_ok_and(|()| last[0] == b'\n'),
        Err(_) => true, // empty: seeking before the start fails
    }
}

fn open_append(path: &Path) -> io::Result<File> {
    crate::sys::private_file(OpenOptions::new().append(true).create(true)).open(path)
}

impl StartJournal {
    /// Opens (creating) the journal at `path`.
    pub fn open(path: &Path) -> io::Result<StartJournal> {
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent)?;
        }
        Ok(StartJournal {
            path: path.to_path_buf(),
            file: Mutex::new(Appender::open(path)?),
        })
    }

    /// Records that job `id`'s command runs in `group`.
    pub fn record(&self, id: &str, group: RecordedGroup) -> io::Result<()> {
        let mut line = serde_json::to_vec(&Line {
            id: id.to_string(),
            group,
        })
        .map_err(io::Error::other)?;
        line.push(b'\n');
        let mut out = self.file.lock().unwrap_or_else(PoisonError::into_inner);
        if out.torn {
            line.insert(0, b'\n');
        }
        // One write (O_APPEND): whole, or torn only by a full disk or a crash.
        match out.file.write_all(&line) {
            Ok(()) => {
                out.torn = false;
                Ok(())
            }
            Err(e) => {
                out.torn = true;
                Err(e)
            }
        }
    }

    /// The latest group recorded for each job.
    pub fn read(&self) -> HashMap<String, RecordedGroup> {
        let text = fs::read_to_string(&self.path).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str::<Line>(l).ok())
            .map(|l| (l.id, l.group))
            .collect()
    }

    /// Keeps only the lines of `keep` (jobs still running), when the file
    /// has grown past 1 MiB (or `force`).
    pub fn compact(&self, keep: &dyn Fn(&str) -> bool, force: bool) -> io::Result<()> {
        let mut out = self.file.lock().unwrap_or_else(PoisonError::into_inner);
        if !force && fs::metadata(&self.path)?.len() < COMPACT_AT {
            return Ok(());
        }
        let text = fs::read_to_string(&self.path).unwrap_or_default();
        let kept: String = text
            .lines()
            .filter(|l| {
                serde_json::from_str::<Line>(l)
                    .map(|line| keep(&line.id))
                    .unwrap_or(false)
            })
            .map(|l| format!("{l}\n"))
            .collect();
        // Flushed before the rename; the directory is not: a compaction
        // lost to a power loss leaves the longer journal, which says the same.
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let as_io = |e: baton_fs::PathError| io::Error::new(e.source.kind(), e);
        let temp =
            TempFile::create(dir, &baton_fs::temp_prefix(&self.path), 0o600).map_err(as_io)?;
        temp.file()
            .write_all(kept.as_bytes())
            .context("cannot write", temp.path())
            .map_err(as_io)?;
        temp.persist(&self.path, Durability::Data)
            .map_err(|e| as_io(e.into_path_error()))?;
        *out = Appender::open(&self.path)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(pgid: i32) -> RecordedGroup {
        RecordedGroup {
            pgid,
            leader_start_time: 1,
            session: pgid,
            grace_ms: 1000,
        }
    }

    /// A torn last line (a crash or a full disk in the middle of a write)
    /// never swallows the next record (issue 37, item 8).
    #[test]
    fn a_record_after_a_torn_line_starts_a_line_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("starts");
        let j = StartJournal::open(&path).unwrap();
        j.record("a", group(10)).unwrap();
        drop(j);
        // Half a line, as a write cut short leaves it.
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(br#"{"id":"b","pg"#).unwrap();
        drop(f);
        let j = StartJournal::open(&path).unwrap();
        j.record("c", group(30)).unwrap();
        let read = j.read();
        assert_eq!(read.get("a").map(|g| g.pgid), Some(10));
        assert_eq!(read.get("c").map(|g| g.pgid), Some(30), "{read:?}");
        assert!(!read.contains_key("b"));
        // And the lines that follow are whole too.
        j.record("d", group(40)).unwrap();
        assert_eq!(j.read().get("d").map(|g| g.pgid), Some(40));
        let text = fs::read_to_string(&path).unwrap();
        assert!(!text.contains("\n\n{\"id\":\"d\""), "{text:?}");
    }
}
