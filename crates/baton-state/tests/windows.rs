//! What differs on Windows, with real processes and real files: filters run
//! by `cmd.exe` and by this test binary (their process trees live in a Job
//! Object), the read-only attribute, a file a reader holds open, and the
//! one lock every spelling of a name gets (NTFS ignores case).
#![cfg(windows)]

use std::fs;
use std::path::Path;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use baton_proc::ProcessId;
use baton_state::{append, edit, edit_with_filter, Filter, Options, StateError, StateFile};

use crate::common::{counter, increment, setup, temps_of};

/// This test binary as a filter that runs the ignored test `entry`.
fn this_binary_as(entry: &str) -> Filter {
    let exe = std::env::current_exe().unwrap();
    let args = [
        "--exact",
        entry,
        "--include-ignored",
        "--nocapture",
        "--test-threads",
        "1",
    ];
    let mut argv = vec![exe.into_os_string()];
    argv.extend(args.iter().map(Into::into));
    Filter::new(argv).unwrap()
}

/// Run as a filter (`BATON_STATE_FILE` set, see `this_binary_as`): starts
/// this binary again as a grandchild that sleeps, writes the grandchild's
/// pid to `<state file>.pid`, then sleeps too (`BATON_TEST_FILTER=sleep`)
/// or exits at once (`leave`). The grandchild only sleeps.
fn filter_role(then_exit: bool) {
    let Some(file) = std::env::var_os("BATON_STATE_FILE") else {
        return;
    };
    if std::env::var_os("BATON_TEST_GRANDCHILD").is_some() {
        thread::sleep(Duration::from_secs(600));
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let grandchild = Command::new(exe)
        .args(std::env::args_os().skip(1))
        .env("BATON_TEST_GRANDCHILD", "1")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut pid_file = file;
    pid_file.push(".pid");
    fs::write(&pid_file, grandchild.id().to_string()).unwrap();
    if !then_exit {
        thread::sleep(Duration::from_secs(600));
    }
}

/// Entry point of a filter that sleeps (see `filter_role`).
#[test]
#[ignore = "entry point of filters started by the other tests"]
fn filter_that_sleeps() {
    filter_role(false);
}

/// Entry point of a filter that exits leaving a grandchild (see `filter_role`).
#[test]
#[ignore = "entry point of filters started by the other tests"]
fn filter_that_leaves_a_child() {
    filter_role(true);
}

/// Entry point of a filter that copies its input to its output (after
/// the test harness's own lines).
#[test]
#[ignore = "entry point of filters started by the other tests"]
fn filter_that_copies() {
    if std::env::var_os("BATON_STATE_FILE").is_some() {
        let mut out = std::io::stdout();
        std::io::copy(&mut std::io::stdin(), &mut out).unwrap();
        std::io::Write::flush(&mut out).unwrap();
    }
}

/// The pid a filter wrote next to `path`, if it got that far.
fn grandchild_of(path: &Path) -> Option<i32> {
    let mut pid_file = path.as_os_str().to_owned();
    pid_file.push(".pid");
    fs::read_to_string(pid_file).ok()?.trim().parse().ok()
}

#[test]
fn filters_run_by_cmd_get_content_and_pass_their_code() {
    let (t, dir) = setup();
    let path = t.path().join("f.txt");
    fs::write(&path, "hello from the file\r\n").unwrap();
    let cmd = |line: &str| Filter::new(["cmd", "/c", line]).unwrap();
    // stdin in, stdout out (a program of ours: wine's `more` waits for a
    // console, and its `find` and `findstr` do not copy lines).
    let copy = this_binary_as("windows::filter_that_copies");
    edit_with_filter(&dir, &path, &Options::new(), &copy).unwrap();
    let out = fs::read_to_string(&path).unwrap();
    assert!(out.contains("hello from the file\r\n"), "{out:?}");
    // The environment names the lock's fencing token and the file.
    edit_with_filter(
        &dir,
        &path,
        &Options::new(),
        &cmd("echo %BATON_FENCING_TOKEN% %BATON_STATE_FILE%"),
    )
    .unwrap();
    let out = fs::read_to_string(&path).unwrap();
    let (token, file) = out.trim().split_once(' ').unwrap();
    assert!(token.parse::<u64>().unwrap() >= 1, "{out:?}");
    assert!(file.ends_with("f.txt"), "{out:?}");
    // A .json file still has to be JSON: `42` is.
    let json = t.path().join("n.json");
    edit_with_filter(&dir, &json, &Options::new(), &cmd("echo 42")).unwrap();
    assert_eq!(fs::read_to_string(&json).unwrap().trim(), "42");

    let before = fs::read(&path).unwrap();
    let code = |f: &Filter| match edit_with_filter(&dir, &path, &Options::new(), f) {
        Err(StateError::FilterFailed { code, .. }) => code,
        Err(StateError::FilterNotFound { .. }) => 127,
        Err(StateError::FilterNotExecutable { .. }) => 126,
        other => panic!("{other:?}"),
    };
    assert_eq!(code(&cmd("exit 3")), 3);
    assert_eq!(
        code(&Filter::new([t.path().join("missing.exe")]).unwrap()),
        127
    );
    // Not a program Windows can run.
    let not_a_program = t.path().join("data.exe");
    fs::write(&not_a_program, "not a program").unwrap();
    assert_eq!(code(&Filter::new([&not_a_program]).unwrap()), 126);
    assert_eq!(fs::read(&path).unwrap(), before);
}

/// A filter that outlives its timeout is stopped with what it started (its
/// Job Object): nothing is written, and its grandchild is gone.
#[test]
fn a_filter_killed_by_its_timeout_leaves_no_process_behind() {
    let (t, dir) = setup();
    let path = t.path().join("f.json");
    fs::write(&path, "{\"n\":1}").unwrap();
    // A timeout that fires before the filter has started its grandchild
    // proves nothing: try again with a longer one (a process start under
    // wine takes a while).
    for timeout in [2000, 8000, 30000].map(Duration::from_millis) {
        let _ = fs::remove_file(t.path().join("f.json.pid"));
        let filter = this_binary_as("windows::filter_that_sleeps")
            .timeout(timeout)
            .grace(Duration::from_millis(300));
        let start = Instant::now();
        let err = edit_with_filter(&dir, &path, &Options::new(), &filter).unwrap_err();
        assert!(matches!(err, StateError::FilterTimedOut { .. }), "{err:?}");
        let took = start.elapsed();
        assert!(took < timeout + Duration::from_secs(10), "{took:?}");
        assert_eq!(fs::read_to_string(&path).unwrap(), "{\"n\":1}");
        let Some(pid) = grandchild_of(&path) else {
            eprintln!("no grandchild within {timeout:?}; again");
            continue;
        };
        eprintln!("timed out after {took:?} (timeout {timeout:?}); grandchild {pid}");
        assert!(
            ProcessId::of(pid).is_none(),
            "the filter's grandchild {pid} outlived it"
        );
        return;
    }
    panic!("the filter never started its grandchild");
}

/// A filter that exits leaving a process running succeeds, and that
/// process is terminated rather than left running.
#[test]
fn what_a_filter_leaves_running_is_terminated_when_it_exits() {
    let (t, dir) = setup();
    // Text: the filter's output is this binary's test report.
    let path = t.path().join("f.txt");
    fs::write(&path, "old").unwrap();
    let filter =
        this_binary_as("windows::filter_that_leaves_a_child").grace(Duration::from_millis(300));
    let done = edit_with_filter(&dir, &path, &Options::new(), &filter).unwrap();
    assert!(done.changed);
    let pid = grandchild_of(&path).unwrap();
    assert!(
        ProcessId::of(pid).is_none(),
        "the filter's grandchild {pid} outlived it"
    );
}

#[test]
fn a_read_only_file_is_refused_and_left_alone() {
    let (t, dir) = setup();
    let path = t.path().join("ro.json");
    fs::write(&path, "{\"n\":1}").unwrap();
    let mut perms = fs::metadata(&path).unwrap().permissions();
    perms.set_readonly(true);
    fs::set_permissions(&path, perms).unwrap();
    let err = edit(&dir, &path, &Options::new(), increment).unwrap_err();
    assert!(err.to_string().contains("ro.json"), "{err}");
    let lines = t.path().join("ro.jsonl");
    fs::write(&lines, "{}\n").unwrap();
    let mut perms = fs::metadata(&lines).unwrap().permissions();
    perms.set_readonly(true);
    fs::set_permissions(&lines, perms).unwrap();
    let err = append(&dir, &lines, &Options::new(), &["{}"]).unwrap_err();
    assert!(matches!(err, StateError::Io(_)), "{err}");
    assert_eq!(fs::read_to_string(&path).unwrap(), "{\"n\":1}");
    assert_eq!(fs::read_to_string(&lines).unwrap(), "{}\n");
    assert!(temps_of(t.path(), "ro.json").is_empty());
    // Writable again, or the temp dir could not be removed.
    for p in [&path, &lines] {
        let mut perms = fs::metadata(p).unwrap().permissions();
        #[allow(clippy::permissions_set_readonly_false)]
        perms.set_readonly(false);
        fs::set_permissions(p, perms).unwrap();
    }
}

/// Windows NTFS replaces a file that readers have open (if they share it
/// for deleting, as Rust's `File::open` does); where it cannot (wine, FAT,
/// network shares) the replacement is retried while the reader holds it
/// briefly. Either way the edit succeeds and the reader keeps the old bytes.
#[test]
fn a_file_a_reader_holds_open_is_replaced() {
    let (t, dir) = setup();
    let path = t.path().join("held.json");
    fs::write(&path, "{\"n\":1}").unwrap();
    let reader = fs::File::open(&path).unwrap();
    let release = thread::spawn(move || {
        thread::sleep(Duration::from_millis(300));
        drop(reader);
    });
    let start = Instant::now();
    edit(&dir, &path, &Options::new(), increment).unwrap();
    eprintln!(
        "replaced after {:?} with a reader holding it 300 ms",
        start.elapsed()
    );
    release.join().unwrap();
    assert_eq!(counter(&path), 2);
    assert!(temps_of(t.path(), "held.json").is_empty());
}

/// `Tasks.json` and `tasks.json` are one file on NTFS: they get one lock,
/// so writers using either spelling lose no update. Also a directory with
/// a space, named with backslashes.
#[test]
fn every_spelling_of_a_name_shares_one_lock() {
    let (t, dir) = setup();
    let sub = t.path().join("my state");
    fs::create_dir(&sub).unwrap();
    let spellings = [sub.join("Counter.json"), sub.join("COUNTER.JSON")];
    let lock = |p: &Path| StateFile::resolve(p).unwrap().default_lock_name().unwrap();
    assert_eq!(lock(&spellings[0]), lock(&spellings[1]));
    assert!(lock(&spellings[0])
        .as_str()
        .ends_with("/my state/counter.json"));
    thread::scope(|s| {
        for i in 0..4 {
            let (dir, path) = (&dir, &spellings[i % 2]);
            s.spawn(move || {
                for _ in 0..25 {
                    edit(dir, path, &Options::new(), increment).unwrap();
                }
            });
        }
    });
    assert_eq!(counter(&sub.join("counter.json")), 100);
    // A temp file a writer using another spelling left is found too.
    fs::write(sub.join(".COUNTER.json.baton-tmp-1-00000000000000ff"), "{").unwrap();
    let done = edit(&dir, &spellings[0], &Options::new(), increment).unwrap();
    assert_eq!(done.removed_temps, 1);
    assert!(temps_of(&sub, "counter.json").is_empty());
}
