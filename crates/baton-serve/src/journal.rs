//! The start journal: one line appended (`O_APPEND`, one `write`) per job
//! start, with the process group of its command, written while the command
//! waits to execute. A restarted service reads it to stop what a crashed one
//! left running. One file for all jobs: no new inode per job, and the line
//! survives a crash of the service (the page cache is the kernel's).

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

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
    OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)
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
        let tmp = self.path.with_extension("tmp");
        let mut out = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        out.write_all(kept.as_bytes())?;
        out.sync_all()?;
        fs::rename(&tmp, &self.path)?;
        *file = open_append(&self.path)?;
        Ok(())
    }
}
