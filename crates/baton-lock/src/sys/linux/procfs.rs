//! `/proc`: holders through deleted or replaced lock files (their markers in
//! `/proc/locks`, or in the `lock:` lines of fdinfo), and the processes that
//! hold a lock's slots (`docs/src/design/locking.md`, "When the lock file is deleted or
//! replaced", "PID namespaces").

use std::os::unix::fs::MetadataExt;

use crate::kernel_holders::KernelHolder;
use crate::layout::SLOT_BASE;
use crate::sys::FileId;

fn proc_locks_form(id: FileId) -> String {
    format!(
        "{:02x}:{:02x}:{}",
        rustix::fs::major(id.dev),
        rustix::fs::minor(id.dev),
        id.ino
    )
}

/// Files other than `ours` on which a holder of the same lock holds its
/// marker, as `dev:ino` strings; `None` when `/proc` cannot be read.
pub(crate) fn holders_elsewhere(mark: u64, ours: Option<FileId>) -> Option<Vec<String>> {
    let ours = ours.map(proc_locks_form);
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
        None => {
            if !for_each_fdinfo(&mut |info| scan(info)) {
                return None;
            }
        }
    }
    Some(found)
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
/// False when `/proc` cannot be read.
fn for_each_fdinfo(f: &mut dyn FnMut(&str)) -> bool {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return false;
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
    true
}

/// Processes whose open files hold slots `0..max` of the lock file `file`.
pub(crate) fn kernel_holders(file: FileId, max: u32) -> Vec<KernelHolder> {
    let me = std::process::id() as i32;
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found: Vec<KernelHolder> = Vec::new();
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        let mut slots: Vec<u32> = Vec::new();
        for fd in fds.flatten() {
            // Following the link stats the open file itself.
            let same = std::fs::metadata(fd.path())
                .is_ok_and(|m| m.dev() == file.dev && m.ino() == file.ino);
            if !same {
                continue;
            }
            let info = format!("/proc/{pid}/fdinfo/{}", fd.file_name().to_string_lossy());
            if let Ok(text) = std::fs::read_to_string(info) {
                for s in held_slots_in(&text, max) {
                    if !slots.contains(&s) {
                        slots.push(s);
                    }
                }
            }
        }
        if slots.is_empty() {
            continue;
        }
        let Some(st) = baton_proc::procfs::stat(pid).filter(|st| !st.exited) else {
            continue;
        };
        slots.sort_unstable();
        found.push(KernelHolder {
            pid,
            command: st.comm,
            start_time: st.start_time,
            slots,
        });
    }
    found.sort_by_key(|h| h.pid);
    found
}

/// Slots below `max` covered by the OFD locks of one fdinfo text.
fn held_slots_in(text: &str, max: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("lock:") else {
            continue;
        };
        // `1: OFDLCK ADVISORY WRITE -1 08:02:1234 <start> <end|EOF>`
        let f: Vec<&str> = rest.split_whitespace().collect();
        if f.len() < 8 || f[1] != "OFDLCK" {
            continue;
        }
        let Ok(start) = f[6].parse::<u64>() else {
            continue;
        };
        let end = if f[7] == "EOF" {
            u64::MAX
        } else {
            match f[7].parse::<u64>() {
                Ok(e) => e,
                Err(_) => continue,
            }
        };
        for slot in 0..max {
            let byte = SLOT_BASE + u64::from(slot);
            if (start..=end).contains(&byte) && !out.contains(&slot) {
                out.push(slot);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_slot_locks_from_fdinfo_lines() {
        let slot0 = SLOT_BASE;
        let text = format!(
            "pos:\t0\nflags:\t02100002\nlock:\t1: OFDLCK  ADVISORY  READ -1 08:02:77 {m} {m}\nlock:\t2: OFDLCK  ADVISORY  WRITE -1 08:02:77 {s} {e}\n",
            m = 1u64 << 48,
            s = slot0 + 1,
            e = slot0 + 1
        );
        assert_eq!(held_slots_in(&text, 4), vec![1]);
        assert_eq!(held_slots_in(&text, 1), Vec::<u32>::new());
        let posix = format!("lock:\t1: POSIX  ADVISORY  WRITE 42 08:02:77 {slot0} {slot0}\n");
        assert!(held_slots_in(&posix, 1).is_empty());
    }
}
