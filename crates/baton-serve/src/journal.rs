//! The start journal: one line appended (`O_APPEND`, one `write`) per job
//! start, with the process group of its command, written while the command
//! waits to execute. A restarted service reads it to stop what a crashed one
//! left running. One file for all jobs: no new inode per job, and the line
//! survives a crash of the service (the page cache is the kernel's).

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
    file: Mutex<File>,
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
            file: Mutex::new(open_append(path)?),
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
        let mut file = self.file.lock().unwrap_or_else(PoisonError::into_inner);
        file.write_all(&line)
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
        let mut file = self.file.lock().unwrap_or_else(PoisonError::into_inner);
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
        *file = open_append(&self.path)?;
        Ok(())
    }
}
