//! The event log: one JSON line per run lifecycle event, in
//! `<baton dir>/events.jsonl`.
//!
//! Each event is written with one `write` on a file opened `O_APPEND`; the
//! kernel serialises appends to a regular file, so lines from concurrent runs
//! never interleave. Logging is best effort: a run never fails because its
//! event could not be written.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::mem::MaybeUninit;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use baton_lock::BatonDir;
use rustix::event::{PollFd, PollFlags};
use rustix::fs::inotify::{self, CreateFlags, WatchFlags};
use serde::{Deserialize, Serialize};

use crate::error::RunError;

/// One lifecycle event.
#[derive(Clone, Debug, Serialize, Deserialize)]
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
            detail: None,
        }
    }

    /// Adds free text.
    pub fn detail(mut self, text: &str) -> Event {
        self.detail = Some(text.into());
        self
    }
}

/// `<baton dir>/events.jsonl`.
pub fn log_path(dir: &BatonDir) -> PathBuf {
    dir.path().join("events.jsonl")
}

/// Appends one event (best effort).
pub(crate) fn append(path: &Path, event: &Event) {
    let Ok(mut line) = serde_json::to_vec(event) else {
        return;
    };
    line.push(b'\n');
    if let Ok(mut f) = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
    {
        let _ = f.write_all(&line);
    }
}

/// Prints the events of `group` (all groups if `None`) to `out`, then, with
/// `follow`, keeps printing new ones as they are appended (inotify, no polling).
pub fn print_events(
    dir: &BatonDir,
    group: Option<&str>,
    follow: bool,
    out: &mut dyn Write,
) -> Result<(), RunError> {
    let path = log_path(dir);
    let io = |op: &'static str| move |source| RunError::Io { op, source };
    let watch = if follow {
        let fd =
            inotify::init(CreateFlags::CLOEXEC).map_err(|e| io("watch the event log")(e.into()))?;
        // Create the log if needed so it can be watched from the start.
        drop(
            OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .open(&path)
                .map_err(io("open the event log"))?,
        );
        inotify::add_watch(&fd, &path, WatchFlags::MODIFY)
            .map_err(|e| io("watch the event log")(e.into()))?;
        Some(fd)
    } else {
        None
    };
    let file = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io("open the event log")(e)),
    };
    let mut reader = BufReader::new(file);
    let mut pending = String::new();
    loop {
        let mut line = String::new();
        let n = reader
            .read_line(&mut line)
            .map_err(io("read the event log"))?;
        if n > 0 {
            pending.push_str(&line);
            if !pending.ends_with('\n') {
                continue; // a line still being written
            }
            let whole = std::mem::take(&mut pending);
            let keep = match group {
                None => true,
                Some(g) => serde_json::from_str::<Event>(whole.trim())
                    .map(|e| e.group == g)
                    .unwrap_or(false),
            };
            if keep {
                out.write_all(whole.as_bytes())
                    .map_err(io("write events"))?;
            }
            continue;
        }
        let Some(fd) = &watch else {
            return Ok(());
        };
        out.flush().map_err(io("write events"))?;
        let mut fds = [PollFd::new(fd, PollFlags::IN)];
        match rustix::event::poll(&mut fds, None) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(io("wait for events")(e.into())),
        }
        let mut buf = [MaybeUninit::<u8>::uninit(); 1024];
        let _ = rustix::io::read(fd, &mut buf);
        // Continue reading from where we were.
        let pos = reader.stream_position().map_err(io("read the event log"))?;
        reader
            .seek(SeekFrom::Start(pos))
            .map_err(io("read the event log"))?;
    }
}
