//! A lock file deleted or replaced while held (`LOCKING.md`, "When the lock
//! file is deleted").
//!
//! Kernel locks belong to an inode. If someone deletes `locks/L.lock` (or the
//! whole baton dir, or renames it) while L is held, the next acquirer creates
//! a new file and would get the lock at once, beside the holder that still
//! holds the old inode. To prevent that, every holder also takes a read lock on
//! a *marker* byte of its lock file whose offset is derived from the baton
//! dir's path and the lock's name. Markers of every open lock file appear in
//! `/proc/locks` with their inode, so an acquirer on a file that is new to the
//! lock (its document does not name its inode) looks for markers of the same
//! name on other inodes and waits until they are gone.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::cancel::CancelToken;

/// First marker byte; markers span 2^48 bytes above it.
const MARK_BASE: u64 = 1 << 48;

/// The marker byte of lock `name` in the baton dir at `dir`.
pub(crate) fn marker(dir: &Path, name: &str) -> u64 {
    let mut h = Sha256::new();
    h.update(dir.as_os_str().as_encoded_bytes());
    h.update([0]);
    h.update(name.as_bytes());
    let d = h.finalize();
    let mut b = [0u8; 8];
    b[2..].copy_from_slice(&d[..6]);
    MARK_BASE + u64::from_be_bytes(b)
}

/// Device and inode of an open file, as `/proc/locks` prints them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FileId {
    pub dev: u64,
    pub ino: u64,
}

impl FileId {
    pub(crate) fn of(meta: &std::fs::Metadata) -> FileId {
        FileId {
            dev: meta.dev(),
            ino: meta.ino(),
        }
    }

    fn proc_locks_form(self) -> String {
        format!(
            "{:02x}:{:02x}:{}",
            rustix::fs::major(self.dev),
            rustix::fs::minor(self.dev),
            self.ino
        )
    }
}

/// Whether `path` still names the open `file` (not deleted, renamed or replaced).
pub(crate) fn still_at_path(file_id: FileId, path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| FileId::of(&m) == file_id)
}

/// Files other than `ours` on which a holder of the same lock holds its
/// marker, as `dev:ino` strings. Empty when `/proc` cannot be read.
pub(crate) fn holders_elsewhere(mark: u64, ours: Option<FileId>) -> Vec<String> {
    let ours = ours.map(FileId::proc_locks_form);
    let mark = mark.to_string();
    let mut found: Vec<String> = Vec::new();
    let mut scan = |text: &str| {
        for line in text.lines() {
            if let Some(id) = marker_on(line, &mark) {
                if Some(id) != ours.as_deref() && !found.iter().any(|f| f == id) {
                    found.push(id.to_string());
                }
            }
        }
    };
    match read_proc_locks() {
        Some((text, true)) => scan(&text),
        Some((text, false)) => {
            // Read in several chunks: a held marker may have been skipped.
            scan(&text);
            for_each_fdinfo(&mut |info| scan(info));
        }
        None => for_each_fdinfo(&mut |info| scan(info)),
    }
    found
}

/// The `dev:ino` of a lock line (`/proc/locks`, or `lock:` in fdinfo) that
/// holds marker byte `mark`: "1: OFDLCK ADVISORY  READ -1 fe:00:123 START END".
fn marker_on<'a>(line: &'a str, mark: &str) -> Option<&'a str> {
    let line = line.strip_prefix("lock:").unwrap_or(line);
    let f: Vec<&str> = line.split_whitespace().collect();
    // Waiters are listed as "1: -> OFDLCK ..."; they hold nothing.
    (f.len() >= 8 && f[1] == "OFDLCK" && f[6] == mark && f[7] == mark).then(|| f[5])
}

/// All of `/proc/locks`, and whether it came in one piece. The kernel lists
/// the locks under the lock list's lock within one `read`, but a later
/// `read` resumes at an *index*: entries are skipped when earlier ones went
/// away in between (seen under load). One `read` fills at most one page
/// (the seq_file buffer); a first read that left room for another line,
/// followed by end of file, saw the whole list at one instant.
fn read_proc_locks() -> Option<(String, bool)> {
    use std::io::Read;
    let mut file = std::fs::File::open("/proc/locks").ok()?;
    let mut text = Vec::new();
    let mut chunk = vec![0u8; 1 << 16];
    let mut reads = 0;
    let mut first = 0;
    loop {
        match file.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                reads += 1;
                if reads == 1 {
                    first = n;
                }
                text.extend_from_slice(&chunk[..n]);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    let whole = reads <= 1 && first < 4096 - 256;
    Some((String::from_utf8(text).ok()?, whole))
}

/// Calls `f` with the fdinfo of every open regular file of every process
/// this one may inspect: exact (a live holder's entries cannot be skipped),
/// and slower, so used only when `/proc/locks` came in several pieces.
fn for_each_fdinfo(f: &mut dyn FnMut(&str)) {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return;
    };
    for p in procs.flatten() {
        let name = p.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            // Lock files are regular files: skip pipes, sockets, anon inodes.
            let is_file = std::fs::read_link(fd.path())
                .is_ok_and(|l| l.as_os_str().as_encoded_bytes().first() == Some(&b'/'));
            if !is_file {
                continue;
            }
            let info = format!("/proc/{pid}/fdinfo/{}", fd.file_name().to_string_lossy());
            if let Ok(text) = std::fs::read_to_string(info) {
                if text.contains("lock:") {
                    f(&text);
                }
            }
        }
    }
}

/// How [`wait_until_gone`] ended.
pub(crate) enum Gone {
    /// No holder through another file is left.
    Clear,
    /// Our own file is no longer at the lock's path: start again.
    OursReplaced,
    /// The request was cancelled.
    Cancelled,
    /// The deadline passed.
    TimedOut,
}

/// Waits until no file other than `ours` carries a marker of this lock.
/// `Ok(false)` when `deadline` passes first.
///
/// Nothing notifies a waiter when a process closes a file that it can no
/// longer open, so this is the one wait in baton that polls `/proc/locks`
/// (from 1 ms, doubling up to 50 ms): it happens only after someone deleted or
/// replaced a lock file while it was held.
pub(crate) fn wait_until_gone(
    mark: u64,
    ours: FileId,
    path: &Path,
    deadline: Option<Instant>,
    cancel: Option<&CancelToken>,
) -> Gone {
    let mut pause = Duration::from_millis(1);
    loop {
        if holders_elsewhere(mark, Some(ours)).is_empty() {
            return Gone::Clear;
        }
        // Deleted again while we wait: whoever holds the newest file must
        // not wait for us, nor we for them (LOCKING.md).
        if !still_at_path(ours, path) {
            return Gone::OursReplaced;
        }
        if cancel.is_some_and(CancelToken::is_cancelled) {
            return Gone::Cancelled;
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            return Gone::TimedOut;
        }
        let nap = deadline.map_or(pause, |d| pause.min(d - now));
        std::thread::sleep(nap);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_differ_by_dir_and_name_and_stay_in_their_range() {
        let a = marker(Path::new("/a"), "x");
        assert_ne!(a, marker(Path::new("/b"), "x"));
        assert_ne!(a, marker(Path::new("/a"), "y"));
        assert_eq!(a, marker(Path::new("/a"), "x"));
        assert!((MARK_BASE..MARK_BASE * 2).contains(&a));
        assert!(i64::try_from(a).is_ok());
    }
}
