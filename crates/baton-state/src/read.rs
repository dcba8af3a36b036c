//! Consistent reads.

use std::path::PathBuf;

use baton_lock::LockGuard;

use crate::atomic;
use crate::error::StateError;
use crate::file::{Format, StateFile};
use crate::version::Version;

/// A state file's content and version at one instant.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Snapshot {
    /// The real file read.
    pub path: PathBuf,
    /// Its format.
    pub format: Format,
    /// The version of `content`.
    pub version: Version,
    /// The content; `None` if the file does not exist. For a `.jsonl` file,
    /// its complete lines only: a torn last line is left out, and a last
    /// line that is a whole record lacking its newline counts, newline
    /// added (as the next append will write it).
    pub content: Option<Vec<u8>>,
}

impl Snapshot {
    /// The content as JSON, the `content` field of `baton state get --json`:
    /// the parsed value for a `.json` file, a string for any other file,
    /// `null` for a missing file. Never lossy: a `.json` file that does not
    /// parse, and any other file that is not UTF-8, is an error
    /// ([`StateError::NotUtf8`] names the offset of the first bad byte).
    pub fn content_json(&self) -> Result<serde_json::Value, StateError> {
        let Some(bytes) = &self.content else {
            return Ok(serde_json::Value::Null);
        };
        match self.format {
            Format::Json => {
                serde_json::from_slice(bytes).map_err(|source| StateError::CorruptJson {
                    path: self.path.clone(),
                    source,
                })
            }
            Format::JsonLines | Format::Text => match std::str::from_utf8(bytes) {
                Ok(text) => Ok(serde_json::Value::String(text.to_owned())),
                Err(e) => Err(StateError::NotUtf8 {
                    path: self.path.clone(),
                    offset: e.valid_up_to(),
                }),
            },
        }
    }
}

/// Reads `file` while the caller holds a lock that covers it (shared is
/// enough), so no append or edit of a writer using that lock is in
/// progress.
pub fn read_locked(file: &StateFile, held: &LockGuard) -> Result<Snapshot, StateError> {
    let _ = held;
    let current = atomic::read(file)?;
    let content = match (current.bytes, file.format()) {
        (Some(b), Format::JsonLines) => Some(atomic::counted_lines(&b).0.into_owned()),
        (b, _) => b,
    };
    Ok(Snapshot {
        path: file.path().to_path_buf(),
        format: file.format(),
        version: Version::of(content.as_deref()),
        content,
    })
}
