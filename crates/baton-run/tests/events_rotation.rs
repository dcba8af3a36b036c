//! The event log's rotation hammered from many threads: every append takes
//! the lock, and what the two files keep is exactly the newest appends.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use baton_run::events::{append_with, log_path, print_events, rotated_path, Event, LogConfig};

/// A fresh directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let p = std::env::temp_dir().join(format!("baton-{tag}-{}-{nanos}", std::process::id()));
        std::fs::create_dir(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn lines_of(path: &Path) -> Vec<String> {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            assert!(text.is_empty() || text.ends_with('\n'), "partial last line");
            text.lines().map(String::from).collect()
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => panic!("{}: {e}", path.display()),
    }
}

#[test]
fn concurrent_appends_rotate_once_per_crossing_and_keep_the_newest_lines() {
    const THREADS: usize = 8;
    const EACH: usize = 300;
    const MAX: u64 = 1024;
    let tmp = TempDir::new("events");
    let dir = baton_lock::BatonDir::open(tmp.0.join("baton")).unwrap();
    let log = log_path(&dir);
    let config = LogConfig {
        max_bytes: MAX,
        lock_wait: Duration::from_secs(30),
    };
    let rotations: usize = std::thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (log, config) = (&log, &config);
                s.spawn(move || {
                    let mut rotations = 0;
                    for i in 0..EACH {
                        let e = Event::new("g", &format!("t{t}"), "queued").detail(&i.to_string());
                        let done = append_with(log, &e, config).unwrap();
                        assert!(done.locked, "append {t}/{i} went without the lock");
                        rotations += usize::from(done.rotated);
                    }
                    rotations
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).sum()
    });

    let old = rotated_path(&log);
    let (old_lines, new_lines) = (lines_of(&old), lines_of(&log));
    for (path, lines) in [(&old, &old_lines), (&log, &new_lines)] {
        let longest = lines.iter().map(|l| l.len() as u64 + 1).max().unwrap_or(0);
        let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        assert!(size < MAX + longest, "{}: {size} bytes", path.display());
    }
    // Renamed only once it reached the bound (a late second rotation would
    // rename a young, small file).
    let old_size = std::fs::metadata(&old).unwrap().len();
    assert!(old_size >= MAX, "{}: {old_size} bytes", old.display());
    let all: Vec<String> = old_lines.into_iter().chain(new_lines).collect();
    assert!(
        rotations > 20,
        "only {rotations} rotations for {THREADS}x{EACH} lines of ~150 bytes"
    );

    // Unique and whole; per thread, the kept lines are its last ones, in order
    // (appends are serialised, so the kept lines are a suffix of them all).
    let mut seen = HashSet::new();
    let mut kept: Vec<Vec<usize>> = vec![Vec::new(); THREADS];
    for l in &all {
        assert!(seen.insert(l.clone()), "duplicated line {l}");
        let e: Event = serde_json::from_str(l).unwrap_or_else(|e| panic!("torn {l:?}: {e}"));
        let t: usize = e.run_id[1..].parse().unwrap();
        kept[t].push(e.detail.unwrap().parse().unwrap());
    }
    assert!(all.len() < THREADS * EACH, "nothing was dropped");
    for (t, seqs) in kept.iter().enumerate() {
        let want: Vec<usize> = (EACH - seqs.len()..EACH).collect();
        assert_eq!(seqs, &want, "thread {t}: kept lines are not its newest");
    }

    // Reading prints the rotated file, then the log.
    let mut out = Vec::new();
    print_events(&dir, None, false, &mut out).unwrap();
    let printed: Vec<String> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(printed, all);
}
