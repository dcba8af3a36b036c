//! Filters written as `sh` scripts, and what they leave running, seen
//! through `/proc`: unix only (Windows has its own in `windows.rs`).
#![cfg(unix)]

use std::fs;
use std::time::{Duration, Instant};

use baton_state::{edit_with_filter, Filter, Options, StateError};

use crate::common::{counter, setup};

#[test]
fn filters_get_content_on_stdin_and_failures_pass_their_code() {
    let (t, dir) = setup();
    let path = t.path().join("f.json");
    fs::write(&path, "{\"n\":1}").unwrap();
    let sh = |script: &str| Filter::new(["sh", "-c", script]).unwrap();
    // stdin in, stdout out; the environment names the file and the lock.
    edit_with_filter(
        &dir,
        &path,
        &Options::new(),
        &sh("cat >/dev/null; printf '{\"file\":\"%s\",\"token\":%s}' \"$BATON_STATE_FILE\" \"$BATON_FENCING_TOKEN\""),
    )
    .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
    assert_eq!(
        v["file"],
        fs::canonicalize(&path).unwrap().to_str().unwrap()
    );
    assert!(v["token"].as_u64().unwrap() >= 1);
    let before = fs::read(&path).unwrap();
    let code = |f: &Filter| match edit_with_filter(&dir, &path, &Options::new(), f) {
        Err(StateError::FilterFailed { code, .. }) => code,
        Err(StateError::FilterNotFound { .. }) => 127,
        Err(StateError::FilterNotExecutable { .. }) => 126,
        other => panic!("{other:?}"),
    };
    assert_eq!(code(&sh("exit 3")), 3);
    assert_eq!(code(&sh("kill -TERM $$")), 128 + 15);
    assert_eq!(code(&Filter::new(["/nonexistent/filter"]).unwrap()), 127);
    let script = t.path().join("noexec.sh");
    fs::write(&script, "#!/bin/sh\necho '{}'\n").unwrap();
    assert_eq!(code(&Filter::new([&script]).unwrap()), 126);
    assert_eq!(fs::read(&path).unwrap(), before);
    // A filter that ignores a large input must not make us fail or hang.
    fs::write(&path, format!("{{\"pad\":\"{}\"}}", "x".repeat(1 << 20))).unwrap();
    edit_with_filter(&dir, &path, &Options::new(), &sh("echo '{\"small\":1}'")).unwrap();
    // A missing file gives the filter empty input.
    let fresh = t.path().join("fresh.txt");
    edit_with_filter(&dir, &fresh, &Options::new(), &sh("wc -c")).unwrap();
    assert_eq!(fs::read_to_string(&fresh).unwrap().trim(), "0");
    assert!(Filter::new(Vec::<String>::new()).is_err());
}

/// Whether `pid` runs (exists and is not a zombie).
fn running(pid: i32) -> bool {
    baton_proc::procfs::stat(pid).is_some_and(|st| !st.exited)
}

/// Issue 23: the filter is supervised. One that starts a background child
/// and outlives its timeout is stopped with its whole group: nothing is
/// written and no process is left behind (the background child held the
/// filter's output pipe, which would otherwise keep baton waiting).
#[test]
fn a_filter_killed_by_its_timeout_leaves_no_process_behind() {
    let (t, dir) = setup();
    let path = t.path().join("f.json");
    fs::write(&path, "{\"n\":1}").unwrap();
    let pid_file = t.path().join("bg.pid");
    let script = format!(
        "sleep 600 & echo $! > {}; exec sleep 600",
        pid_file.display()
    );
    // A timeout that fires before the filter has started its child proves
    // nothing: try again with a longer one.
    for timeout in [200, 1000, 5000, 20000].map(Duration::from_millis) {
        let _ = fs::remove_file(&pid_file);
        let filter = Filter::new(["sh", "-c", &script])
            .unwrap()
            .timeout(timeout)
            .grace(Duration::from_millis(300));
        let start = Instant::now();
        let err = edit_with_filter(&dir, &path, &Options::new(), &filter).unwrap_err();
        assert!(matches!(err, StateError::FilterTimedOut { .. }), "{err:?}");
        assert!(start.elapsed() < timeout + Duration::from_secs(10));
        assert_eq!(fs::read_to_string(&path).unwrap(), "{\"n\":1}");
        let Ok(pid) = fs::read_to_string(&pid_file) else {
            eprintln!("no background child within {timeout:?}; again");
            continue;
        };
        let Ok(pid) = pid.trim().parse::<i32>() else {
            continue;
        };
        assert!(
            !running(pid),
            "the filter's background child {pid} outlived it"
        );
        return;
    }
    panic!("the filter never started its background child");
}

/// A filter that exits leaving a child in its group (holding its output)
/// succeeds, and the child is terminated rather than left running.
#[test]
fn what_a_filter_leaves_running_is_terminated_when_it_exits() {
    let (t, dir) = setup();
    let path = t.path().join("f.json");
    fs::write(&path, "{\"n\":1}").unwrap();
    let pid_file = t.path().join("bg.pid");
    let script = format!(
        "cat >/dev/null; sleep 600 & echo $! > {}; echo '{{\"n\":2}}'",
        pid_file.display()
    );
    let filter = Filter::new(["sh", "-c", &script])
        .unwrap()
        .grace(Duration::from_millis(300));
    edit_with_filter(&dir, &path, &Options::new(), &filter).unwrap();
    assert_eq!(counter(&path), 2);
    let pid: i32 = fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        !running(pid),
        "the filter's background child {pid} outlived it"
    );
}
