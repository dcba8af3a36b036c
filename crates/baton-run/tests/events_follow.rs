//! `baton events --follow` as a library call: lines appended after it
//! started are printed, in order, across rotations (inotify on Linux, a
//! look every 100 ms on macOS and Windows).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test

use std::io::{self, Write};
use std::sync::mpsc;
use std::time::Duration;

use baton_lock::BatonDir;
use baton_run::events::{append_with, log_path, print_events, Event, LogConfig};

/// Collects what is printed; once `want` lines have come, hands them over
/// and fails the next write, which ends the follow.
struct Collect {
    text: Vec<u8>,
    want: usize,
    done: Option<mpsc::Sender<String>>,
}

impl Write for Collect {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.done.is_none() {
            return Err(io::Error::other("enough"));
        }
        self.text.extend_from_slice(buf);
        if self.text.iter().filter(|b| **b == b'\n').count() >= self.want {
            if let Some(tx) = self.done.take() {
                let _ = tx.send(String::from_utf8_lossy(&self.text).into_owned());
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn follow_prints_lines_appended_later_in_order_across_rotations() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = BatonDir::open(tmp.path().join("baton")).unwrap();
    let log = log_path(&dir);
    // About three lines a file: the log rotates every third append.
    let config = LogConfig {
        max_bytes: 400,
        lock_wait: Duration::from_secs(1),
    };
    append_with(&log, &Event::new("g", "run-0", "queued"), &config).unwrap();
    let count = 12;
    let (tx, rx) = mpsc::channel();
    let follower_dir = dir.clone();
    std::thread::spawn(move || {
        let mut out = Collect {
            text: Vec::new(),
            want: count,
            done: Some(tx),
        };
        let _ = print_events(&follower_dir, Some("g"), true, &mut out);
    });
    let mut rotations = 0;
    for i in 1..count {
        // Slower than the follower's look every 100 ms where it polls: no
        // more than one rotation between two looks (one old file is kept).
        std::thread::sleep(Duration::from_millis(150));
        let event = Event::new("g", &format!("run-{i}"), "queued");
        rotations += usize::from(append_with(&log, &event, &config).unwrap().rotated);
        append_with(
            &log,
            &Event::new("other", "x", "queued"),
            &LogConfig::default(),
        )
        .ok();
    }
    assert!(
        rotations >= 2,
        "the log rotated {rotations} times: the test did not test"
    );
    let text = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the follower fell silent");
    let runs: Vec<String> = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["run_id"].to_string())
        .collect();
    let expected: Vec<String> = (0..count).map(|i| format!("\"run-{i}\"")).collect();
    assert_eq!(runs, expected);
}
