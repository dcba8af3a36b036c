//! A job's files (`<baton dir>/serve/jobs/<id>/`: stdout, stderr) and the
//! capture of its output: the command writes into pipes, and for each
//! stream the service's runtime waits for the first byte; only then does a
//! blocking thread copy into the file up to the per-job cap and keep
//! draining after it (a command is never blocked or killed for its output).
//! Files (and the directory) are created with the first byte: a job that
//! prints nothing costs no inode and no thread (on Windows, where tokio has
//! no anonymous pipes, each stream takes a thread from the start). The
//! prompt reaches stdin through a memfd (Windows: a pipe; see `sys`).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;

use crate::sys::{self, Owned as OwnedFd};

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

    /// An in-memory file holding `prompt`, positioned at its start, for
    /// the command's stdin (nothing on disk).
    pub fn prompt(prompt: &str) -> io::Result<OwnedFd> {
        sys::prompt_input(prompt)
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
    done: Arc<Done>,
}

impl Capture {
    /// Starts copying a new pipe into `path` (created, with its directory,
    /// when the first byte arrives), at most `cap` bytes; `progress` gets
    /// the bytes written so far.
    pub fn start(path: &Path, cap: u64, progress: watch::Sender<u64>) -> io::Result<Capture> {
        let (read, write) = baton_proc::pipe().map_err(io::Error::other)?;
        let done = Arc::new(Done::default());
        let tx = DoneTx(Arc::clone(&done));
        let path = path.to_path_buf();
        let runtime = tokio::runtime::Handle::try_current().ok();
        match runtime.filter(|_| sys::PIPES_ON_RUNTIME) {
            // Most jobs print little or nothing: wait for the first byte on
            // the runtime, and take a thread only for a stream that has one.
            #[cfg(unix)]
            Some(runtime) => {
                runtime.spawn(async move {
                    let lost = copy_when_readable(read, path, cap, progress).await;
                    tx.send(lost);
                });
            }
            _ => {
                std::thread::Builder::new()
                    .name("baton-serve-capture".into())
                    .spawn(move || {
                        let lost = copy_capped(File::from(read), &path, cap, &progress);
                        tx.send(lost);
                    })?;
            }
        }
        Ok(Capture {
            writer: Arc::new(write),
            done,
        })
    }

    /// The pipe's write end, for the command.
    pub fn writer(&self) -> Arc<OwnedFd> {
        Arc::clone(&self.writer)
    }

    /// Adds `text` to the captured stream (after what the command wrote,
    /// within the same cap), best effort: a line of baton's own about the
    /// job, before [`Capture::finish`].
    pub fn note(&self, text: &str) {
        if let Ok(fd) = self.writer.try_clone() {
            let _ = File::from(fd).write_all(text.as_bytes());
        }
    }

    /// Closes our write end and waits (at most `wait`) for the copy to reach
    /// the end of the output: a process that escaped the command's group and
    /// still holds the pipe must not hold the job open. Returns why the
    /// captured output is incomplete, if it could not all be written (a
    /// full disk, an unwritable directory).
    pub fn finish(self, wait: Duration) -> Option<String> {
        drop(self.writer);
        let state = self
            .done
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let (state, _) = self
            .done
            .cond
            .wait_timeout_while(state, wait, |s| s.is_none())
            .unwrap_or_else(PoisonError::into_inner);
        state.clone().flatten()
    }
}

/// Where a capture says it has reached the end of its output: `Some(why
/// output was lost)` once it has.
#[derive(Debug, Default)]
struct Done {
    state: Mutex<Option<Option<String>>>,
    cond: Condvar,
}

/// The capture's side of [`Done`]; dropped without a word (a failed task),
/// it says "nothing lost", so nobody waits for it.
struct DoneTx(Arc<Done>);

impl DoneTx {
    fn send(self, lost: Option<String>) {
        self.set(lost);
    }

    fn set(&self, lost: Option<String>) {
        let mut state = self.0.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.is_none() {
            *state = Some(lost);
            self.0.cond.notify_all();
        }
    }
}

impl Drop for DoneTx {
    fn drop(&mut self) {
        self.set(None);
    }
}

/// Opens (creating it and its 0700 directory) a job's output file.
fn create_output(path: &Path) -> io::Result<File> {
    if let Some(dir) = path.parent() {
        sys::private_dir(fs::DirBuilder::new().recursive(true)).create(dir)?;
    }
    sys::private_file(OpenOptions::new().create(true).append(true)).open(path)
}

/// The most a stream's first read takes (on the runtime); the rest is
/// copied on a blocking thread.
#[cfg(unix)]
const FIRST_READ: usize = 8 * 1024;

/// Waits on the runtime for the pipe `read` to have a first byte or its
/// end; at its end (nothing printed) that is all, else [`copy_capped`] goes
/// on with it on a blocking thread.
#[cfg(unix)]
async fn copy_when_readable(
    read: OwnedFd,
    path: PathBuf,
    cap: u64,
    progress: watch::Sender<u64>,
) -> Option<String> {
    use tokio::io::AsyncReadExt;
    let mut pipe = match tokio::net::unix::pipe::Receiver::from_owned_fd(read) {
        Ok(p) => p,
        Err(e) => return Some(format!("output lost: cannot watch the job's pipe: {e}")),
    };
    // Small and not zeroed: most jobs print nothing, and freeing a chunk of
    // 64 KiB or more makes glibc's malloc consolidate its free lists (a
    // cost per job that showed in the profile, bench/README.md).
    let mut first = Vec::with_capacity(FIRST_READ);
    let n = loop {
        match pipe.read_buf(&mut first).await {
            Ok(n) => break n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return None,
        }
    };
    if n == 0 {
        return None;
    }
    let rest = match pipe.into_blocking_fd() {
        Ok(fd) => File::from(fd),
        Err(e) => return Some(format!("output lost: cannot read the job's pipe: {e}")),
    };
    let copied = tokio::task::spawn_blocking(move || {
        copy_capped(
            Read::chain(io::Cursor::new(first), rest),
            &path,
            cap,
            &progress,
        )
    })
    .await;
    copied.unwrap_or_else(|e| Some(format!("output lost: its copy failed: {e}")))
}

/// Copies `from` into `path` (at most `cap` bytes, then a note); returns
/// why output was lost, if writing failed.
fn copy_capped(
    mut from: impl Read,
    path: &Path,
    cap: u64,
    progress: &watch::Sender<u64>,
) -> Option<String> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut to: Option<File> = None;
    let mut written: u64 = 0;
    let mut dropped: u64 = 0;
    // The first write error, and the bytes lost from then on.
    let mut failed: Option<io::Error> = None;
    let mut lost: u64 = 0;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        if failed.is_some() {
            lost += n as u64;
            continue;
        }
        if to.is_none() {
            match create_output(path) {
                Ok(f) => to = Some(f),
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "cannot create a job's output file; its output is dropped");
                    failed = Some(e);
                    lost += n as u64;
                    continue;
                }
            }
        }
        let room = usize::try_from(cap.saturating_sub(written)).unwrap_or(usize::MAX);
        let keep = n.min(room);
        if let Some(f) = to.as_mut() {
            if keep > 0 {
                match write_counted(f, &buf[..keep]) {
                    (w, None) => written += w,
                    (w, Some(e)) => {
                        tracing::warn!(path = %path.display(), error = %e, "cannot write a job's output; the rest is dropped");
                        written += w;
                        lost += keep as u64 - w;
                        failed = Some(e);
                    }
                }
                progress.send_replace(written);
            }
        }
        dropped += (n - keep) as u64;
    }
    if let Some(e) = failed {
        return Some(format!(
            "output incomplete: cannot write '{}': {e}; {lost} bytes were lost",
            path.display()
        ));
    }
    if dropped > 0 {
        let note = format!(
            "\n[baton: output truncated: {dropped} bytes beyond the {cap}-byte cap were dropped]\n"
        );
        if let Some(f) = to.as_mut() {
            if f.write_all(note.as_bytes()).is_ok() {
                progress.send_replace(written + note.len() as u64);
            }
        }
    }
    None
}

/// Writes all of `data` unless an error stops it; returns the bytes
/// written and the error.
fn write_counted(f: &mut File, mut data: &[u8]) -> (u64, Option<io::Error>) {
    let mut written = 0u64;
    while !data.is_empty() {
        match f.write(data) {
            Ok(0) => return (written, Some(io::ErrorKind::WriteZero.into())),
            Ok(n) => {
                written += n as u64;
                data = &data[n..];
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return (written, Some(e)),
        }
    }
    (written, None)
}

/// Why jobs' output cannot be kept under `root` now, if so: its file
/// system has less than 64 KiB free (or cannot be asked).
pub fn disk_problem(root: &Path) -> Option<String> {
    // The jobs' root may not exist yet: ask about its nearest ancestor.
    let mut at = root;
    while !at.exists() {
        at = at.parent()?;
    }
    match baton_lock::free_space(at).map(|s| s.available_bytes) {
        Ok(free) => (free < 64 * 1024).then(|| {
            format!(
                "no space left for jobs' output under '{}' ({free} bytes free)",
                root.display()
            )
        }),
        Err(e) => Some(format!(
            "cannot check the disk of '{}': {}",
            root.display(),
            baton_lock::one_line(&e)
        )),
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

/// The contents of `path` as a stream of chunks (64 KiB at most) read from
/// disk as the reader takes them: a log is never held in memory whole,
/// however many read it. A missing file is an empty stream.
///
/// # Errors
///
/// The file exists but cannot be opened.
pub async fn chunks(
    path: &Path,
) -> io::Result<impl futures_util::Stream<Item = io::Result<axum::body::Bytes>> + Send + 'static> {
    use tokio::io::AsyncReadExt;
    let file = match tokio::fs::File::open(path).await {
        Ok(f) => Some(f),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    Ok(futures_util::stream::unfold(file, |file| async move {
        let mut file = file?;
        let mut buf = vec![0u8; 64 * 1024];
        match file.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok(axum::body::Bytes::from(buf)), Some(file)))
            }
            Err(e) => Some((Err(e), None)),
        }
    }))
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
