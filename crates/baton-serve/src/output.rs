//! A job's files (`<baton dir>/serve/jobs/<id>/`: prompt, stdout, stderr)
//! and the capture of its output: the command writes into pipes, a thread
//! per stream copies into the file up to the per-job cap and keeps draining
//! after it (a command is never blocked or killed for its output).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::watch;

/// Where one job's files are.
#[derive(Clone, Debug)]
pub struct JobFiles {
    dir: PathBuf,
}

/// One of a job's captured streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

impl Stream {
    fn file_name(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

impl JobFiles {
    /// The files of job `id` under `root` (`<baton dir>/serve/jobs`).
    pub fn new(root: &Path, id: &str) -> JobFiles {
        JobFiles { dir: root.join(id) }
    }

    /// The job's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The path of a captured stream.
    pub fn stream(&self, s: Stream) -> PathBuf {
        self.dir.join(s.file_name())
    }

    /// Creates the directory (mode 0700: prompts and output may be secret).
    pub fn create(&self) -> io::Result<()> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
    }

    /// Writes the prompt and opens it for the command's stdin.
    pub fn prompt(&self, prompt: &str) -> io::Result<File> {
        let path = self.dir.join("prompt");
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&path)?;
        f.write_all(prompt.as_bytes())?;
        File::open(&path)
    }

    /// Records the process group of the job's command (one small write;
    /// read back by [`JobFiles::recorded_process_group`] after a crash).
    pub fn record_process_group(&self, group: &crate::model::RecordedGroup) -> io::Result<()> {
        let json = serde_json::to_vec(group).map_err(io::Error::other)?;
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(self.dir.join("process_group"))?;
        f.write_all(&json)
    }

    /// The process group recorded by [`JobFiles::record_process_group`].
    pub fn recorded_process_group(&self) -> Option<crate::model::RecordedGroup> {
        let bytes = fs::read(self.dir.join("process_group")).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Removes the job's files (eviction).
    pub fn remove(&self) -> io::Result<()> {
        match fs::remove_dir_all(&self.dir) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }
}

/// A stream being captured: give [`Capture::writer`] to the command, then
/// [`Capture::finish`] once it has ended.
#[derive(Debug)]
pub struct Capture {
    writer: Arc<OwnedFd>,
    thread: JoinHandle<()>,
    done: std::sync::mpsc::Receiver<()>,
}

impl Capture {
    /// Starts copying a new pipe into `path` (created), at most `cap`
    /// bytes; `progress` gets the bytes written so far.
    pub fn start(path: &Path, cap: u64, progress: watch::Sender<u64>) -> io::Result<Capture> {
        let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(path)?;
        let (tx, done) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("baton-serve-capture".into())
            .spawn(move || {
                copy_capped(File::from(read), &mut file, cap, &progress);
                let _ = tx.send(());
            })?;
        Ok(Capture {
            writer: Arc::new(write),
            thread,
            done,
        })
    }

    /// The pipe's write end, for the command.
    pub fn writer(&self) -> Arc<OwnedFd> {
        Arc::clone(&self.writer)
    }

    /// Closes our write end and waits (at most `wait`) for the copy to reach
    /// the end of the output: a process that escaped the command's group and
    /// still holds the pipe must not hold the job open.
    pub fn finish(self, wait: Duration) {
        drop(self.writer);
        if self.done.recv_timeout(wait).is_ok() {
            let _ = self.thread.join();
        }
    }
}

fn copy_capped(mut from: File, to: &mut File, cap: u64, progress: &watch::Sender<u64>) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut written: u64 = 0;
    let mut dropped: u64 = 0;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let room = usize::try_from(cap.saturating_sub(written)).unwrap_or(usize::MAX);
        let keep = n.min(room);
        if keep > 0 && to.write_all(&buf[..keep]).is_ok() {
            written += keep as u64;
            progress.send_replace(written);
        }
        dropped += (n - keep) as u64;
    }
    if dropped > 0 {
        let note = format!(
            "\n[baton: output truncated: {dropped} bytes beyond the {cap}-byte cap were dropped]\n"
        );
        if to.write_all(note.as_bytes()).is_ok() {
            progress.send_replace(written + note.len() as u64);
        }
    }
}

/// The last `max` bytes of `path` as text (lossy), empty if it is missing.
pub fn tail(path: &Path, max: u64) -> String {
    let Ok(mut f) = File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let start = len.saturating_sub(max);
    if f.seek(SeekFrom::Start(start)).is_err() {
        return String::new();
    }
    let mut buf = Vec::new();
    let _ = f.take(max).read_to_end(&mut buf);
    String::from_utf8_lossy(&buf).into_owned()
}

/// Bytes of `path` from `offset` on (at most `max`).
pub fn read_from(path: &Path, offset: u64, max: u64) -> io::Result<Vec<u8>> {
    let mut f = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    f.seek(SeekFrom::Start(offset))?;
    let mut buf = Vec::new();
    f.take(max).read_to_end(&mut buf)?;
    Ok(buf)
}
