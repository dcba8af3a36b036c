//! Library tests of state files with real threads, real processes and real
//! SIGKILLs. Child processes are this test binary re-executed with
//! `BATON_TEST_ROLE` set (see `child_process_entry`).

use std::collections::BTreeSet;
use std::fs;
use std::io::Write;
#[cfg(unix)]
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;
use std::process::{Child, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use baton_lock::{acquire, BatonDir, LockError, LockRequest};
use baton_state::{
    append, append_locked, edit, edit_locked, get, lock, read_locked, EditError, Options,
    StateError, StateFile, Version,
};
use baton_testkit::{expect_line, Rng};

use crate::common::{counter, increment, setup, temps_of, Never};

/// Spawns this test binary as a child process playing `role`.
fn child(dir: &BatonDir, role: &str, args: &[&str]) -> Child {
    baton_testkit::child("state::child_process_entry", role, dir.path(), args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Entry point of child processes (see `child`), not a test of its own.
#[test]
#[ignore = "entry point of child processes started by the other tests"]
fn child_process_entry() {
    let Some(role) = baton_testkit::child_role() else {
        return;
    };
    let dir = BatonDir::open(&role.dir).unwrap();
    let args = role.args;
    let role = role.name;
    match role.as_str() {
        // args: counter file, events file, id, iterations.
        "hammer" => {
            let n: usize = args[3].parse().unwrap();
            for i in 0..n {
                edit(&dir, &args[0], &Options::new(), increment).unwrap();
                let rec = format!("{{\"id\":\"{}\",\"i\":{i}}}", args[2]);
                append(&dir, &args[1], &Options::new(), &[rec]).unwrap();
            }
        }
        // args: file, bytes of padding. One edit: n += 1 with a big padding;
        // announces when the new content is computed (the write follows).
        "big-edit" => {
            let pad: usize = args[1].parse().unwrap();
            edit(&dir, &args[0], &Options::new(), |old| {
                let n = old.map_or(0, |b| {
                    serde_json::from_slice::<serde_json::Value>(b).unwrap()["n"]
                        .as_u64()
                        .unwrap()
                });
                let new = format!("{{\"n\":{},\"pad\":\"{}\"}}", n + 1, "x".repeat(pad));
                println!("computed");
                std::io::stdout().flush().unwrap();
                Ok::<_, Never>(Some(new.into_bytes()))
            })
            .unwrap();
            println!("done");
        }
        other => panic!("unknown role {other}"),
    }
}

#[test]
fn threads_editing_one_file_lose_no_update() {
    let (t, dir) = setup();
    let path = t.path().join("counter.json");
    thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                for _ in 0..50 {
                    edit(&dir, &path, &Options::new(), increment).unwrap();
                }
            });
        }
    });
    assert_eq!(counter(&path), 400);
    assert!(temps_of(t.path(), "counter.json").is_empty());
}

#[test]
fn processes_editing_and_appending_lose_nothing() {
    let (t, dir) = setup();
    let counter_path = t.path().join("counter.json");
    let events = t.path().join("events.jsonl");
    let (c, e) = (counter_path.to_str().unwrap(), events.to_str().unwrap());
    let children: Vec<Child> = (0..4)
        .map(|id| child(&dir, "hammer", &[c, e, &id.to_string(), "50"]))
        .collect();
    for mut ch in children {
        assert!(ch.wait().unwrap().success());
    }
    assert_eq!(counter(&counter_path), 200);
    let text = fs::read_to_string(&events).unwrap();
    let seen: BTreeSet<(String, u64)> = text
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                v["id"].as_str().unwrap().to_string(),
                v["i"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(text.lines().count(), 200);
    assert_eq!(seen.len(), 200, "every record exactly once");
}

#[test]
fn compare_and_swap_appends_from_threads_form_one_unbroken_chain() {
    // What the lock adds to O_APPEND: the version check and the write are one
    // step. Each record names the number of records its writer saw; with the
    // check and the write serialised, record k saw exactly k records, so the
    // numbers run 0, 1, 2, ... without a repeat. Two writers that both passed
    // the check on one version would write the same number.
    let (t, dir) = setup();
    let path = t.path().join("chain.jsonl");
    let (writers, per_writer) = (8, 25);
    let refused = std::sync::atomic::AtomicUsize::new(0);
    thread::scope(|s| {
        for w in 0..writers {
            let (path, dir, refused) = (&path, &dir, &refused);
            s.spawn(move || {
                let mut written = 0;
                while written < per_writer {
                    let snap = get(dir, path, &Options::new()).unwrap();
                    let seen = snap
                        .content
                        .as_deref()
                        .map_or(0, |c| c.iter().filter(|&&b| b == b'\n').count());
                    let rec = format!("{{\"seen\":{seen},\"w\":{w}}}");
                    let opts = Options::new().if_version(snap.version);
                    match append(dir, path, &opts, &[rec.as_str()]) {
                        Ok(_) => written += 1,
                        Err(StateError::VersionMismatch { .. }) => {
                            refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
            });
        }
    });
    let text = fs::read_to_string(&path).unwrap();
    let seen: Vec<usize> = text
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["seen"].as_u64().unwrap() as usize
        })
        .collect();
    let expected: Vec<usize> = (0..writers * per_writer).collect();
    assert_eq!(
        seen, expected,
        "two appends passed the check on one version"
    );
    // The writers did race: some checks failed and were retried.
    assert!(
        refused.into_inner() > 0,
        "no append ever met a stale version"
    );
}

#[test]
fn one_directory_lock_covers_several_files() {
    let (t, dir) = setup();
    let tasks = StateFile::resolve(t.path().join("tasks.json")).unwrap();
    let events = StateFile::resolve(t.path().join("events.jsonl")).unwrap();
    thread::scope(|s| {
        for w in 0..4 {
            let (dir, tasks, events) = (&dir, &tasks, &events);
            s.spawn(move || {
                for i in 0..25 {
                    let g = acquire(dir, &LockRequest::new("memory".parse().unwrap())).unwrap();
                    let done = edit_locked(tasks, &g, None, increment).unwrap();
                    assert!(done.changed);
                    let rec = format!("{{\"w\":{w},\"i\":{i},\"version\":\"{}\"}}", done.version);
                    append_locked(events, &g, None, &[rec]).unwrap();
                    // Both files agree while the lock is held.
                    let n = counter(tasks.path());
                    let lines = fs::read_to_string(events.path()).unwrap().lines().count();
                    assert_eq!(n as usize, lines);
                    g.release().unwrap();
                }
            });
        }
    });
    assert_eq!(counter(tasks.path()), 100);
    // The same lock through the high-level API, by name.
    let opts = Options::new().lock("memory".parse().unwrap());
    append(&dir, events.path(), &opts, &["{}"]).unwrap();
    assert_eq!(
        fs::read_to_string(events.path()).unwrap().lines().count(),
        101
    );
}

#[test]
fn editing_a_file_under_a_lock_this_thread_holds_is_refused_not_deadlocked() {
    let (t, dir) = setup();
    let path = t.path().join("x.json");
    let file = StateFile::resolve(&path).unwrap();
    let g = lock(&dir, &file, &Options::new()).unwrap();
    let err = edit(&dir, &path, &Options::new(), increment).unwrap_err();
    assert!(
        matches!(
            err,
            EditError::State(StateError::Lock(LockError::Reentrant { .. }))
        ),
        "{err}"
    );
    // The lower-level call is the way to edit while holding it.
    edit_locked(&file, &g, None, increment).unwrap();
    assert_eq!(counter(&path), 1);
}

/// Reads `child`'s stdout line by line, keeping what it has read (unlike
/// `expect_line`, which drops what follows the marker).
struct Lines(std::io::BufReader<std::process::ChildStdout>);

impl Lines {
    fn of(child: &mut Child) -> Lines {
        Lines(std::io::BufReader::new(child.stdout.take().unwrap()))
    }

    /// Reads until a line contains `marker`; false if the output ends first.
    fn until(&mut self, marker: &str) -> bool {
        use std::io::BufRead;
        let mut line = String::new();
        loop {
            line.clear();
            if self.0.read_line(&mut line).unwrap() == 0 {
                return false;
            }
            if line.contains(marker) {
                return true;
            }
        }
    }
}

/// How long creating, writing and flushing a file of `len` bytes in `dir`
/// takes: the part of an edit before its rename.
fn write_phase(dir: &Path, len: usize) -> Duration {
    let probe = dir.join("write-phase-probe");
    let start = Instant::now();
    let mut f = fs::File::create(&probe).unwrap();
    f.write_all(&vec![b'x'; len]).unwrap();
    f.sync_all().unwrap();
    let took = start.elapsed();
    fs::remove_file(&probe).unwrap();
    took
}

#[test]
fn sigkill_at_random_points_leaves_old_or_new_content() {
    let (t, dir) = setup();
    // Not .json: validating a big document would delay the write.
    let path = t.path().join("state.txt");
    let p = path.to_str().unwrap();
    let pad = 1 << 20;
    let pad_arg = pad.to_string();
    // Calibrate: how long from "computed" (the write starts) to the exit
    // (which includes flushing the directory, often the longest part), and
    // how long the write itself, up to the rename, takes.
    let mut ch = child(&dir, "big-edit", &[p, &pad_arg]);
    let mut out = Lines::of(&mut ch);
    assert!(out.until("computed"));
    let start = Instant::now();
    assert!(ch.wait().unwrap().success());
    let window = start.elapsed();
    let write = write_phase(t.path(), pad);
    let mut rng = Rng::seeded();
    eprintln!(
        "seed {}, write {write:?}, write to exit {window:?}",
        rng.seed
    );
    let rounds = 60;
    let (mut in_flight, mut temp_left, mut old_kept, mut new_seen) = (0, 0, 0, 0);
    for round in 0..rounds {
        let old = fs::read(&path).unwrap();
        let old_n = counter(&path);
        let mut ch = child(&dir, "big-edit", &[p, &pad_arg]);
        let mut out = Lines::of(&mut ch);
        assert!(out.until("computed"), "round {round}: the child failed");
        // The random kill point is the subject of this test, not a wait:
        // every other round somewhere in the write, else anywhere from the
        // start of the write to a little after the exit.
        let span = if round % 2 == 0 { write } else { window };
        thread::sleep(span.mul_f64(rng.unit() * 1.2));
        ch.kill().unwrap();
        ch.wait().unwrap();
        if !out.until("done") {
            in_flight += 1; // killed between computing the content and edit() returning
        }
        let now = fs::read(&path).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&now)
            .unwrap_or_else(|e| panic!("round {round}: not JSON after kill: {e}"));
        let n = v["n"].as_u64().unwrap();
        assert_eq!(v["pad"].as_str().unwrap().len(), pad, "round {round}");
        if now == old {
            old_kept += 1;
        } else {
            assert_eq!(n, old_n + 1, "round {round}: neither old nor new");
            new_seen += 1;
        }
        if !temps_of(t.path(), "state.txt").is_empty() {
            temp_left += 1; // killed after creating the temp file, before the rename
        }
    }
    eprintln!(
        "killed in flight {in_flight}, with a temp file {temp_left}; old kept {old_kept}, new seen {new_seen}"
    );
    // The kills must have hit the write, or this test proves nothing.
    assert!(
        temp_left >= 1,
        "no kill landed between creating the temp file and the rename"
    );
    assert!(
        in_flight >= rounds / 10,
        "only {in_flight} of {rounds} kills landed while the edit was in progress"
    );
    let before = counter(&path);
    edit(&dir, &path, &Options::new(), increment).unwrap();
    assert_eq!(counter(&path), before + 1);
    assert!(temps_of(t.path(), "state.txt").is_empty());
}

#[test]
fn temp_file_of_a_killed_writer_is_removed_by_the_next_edit() {
    let (t, dir) = setup();
    let path = t.path().join("big.json");
    fs::write(&path, "{\"n\":7}").unwrap();
    let p = path.to_str().unwrap();
    // A 32 MiB document takes long enough to write and flush that the
    // writer can be caught with its temp file open.
    let mut caught = false;
    for _ in 0..5 {
        let mut ch = child(&dir, "big-edit", &[p, &(32 << 20).to_string()]);
        expect_line(&mut ch, "computed");
        let start = Instant::now();
        while temps_of(t.path(), "big.json").is_empty() && start.elapsed() < Duration::from_secs(10)
        {
            thread::sleep(Duration::from_micros(200));
        }
        ch.kill().unwrap();
        ch.wait().unwrap();
        if counter(&path) == 7 && !temps_of(t.path(), "big.json").is_empty() {
            caught = true;
            break;
        }
        fs::write(&path, "{\"n\":7}").unwrap(); // it finished first; try again
    }
    assert!(caught, "never caught a writer mid-write");
    let done = edit(&dir, &path, &Options::new(), increment).unwrap();
    assert_eq!(done.removed_temps, 1);
    assert!(temps_of(t.path(), "big.json").is_empty());
    assert_eq!(counter(&path), 8);
}

#[test]
fn a_torn_last_line_is_moved_to_the_torn_file_and_kept() {
    let (t, dir) = setup();
    let path = t.path().join("events.jsonl");
    let torn = t.path().join("events.jsonl.torn");
    fs::write(&path, "{\"a\":1}\n{\"b\":2}\n{\"c\":").unwrap();
    // get leaves the torn line out; its version is that of the complete lines.
    let snap = get(&dir, &path, &Options::new()).unwrap();
    assert_eq!(
        snap.content.as_deref(),
        Some(&b"{\"a\":1}\n{\"b\":2}\n"[..])
    );
    assert_eq!(snap.version, Version::of(Some(b"{\"a\":1}\n{\"b\":2}\n")));

    let done = append(&dir, &path, &Options::new(), &["{\"d\":4}"]).unwrap();
    assert_eq!(done.torn.as_ref().unwrap().bytes, 5);
    assert_eq!(
        done.torn.as_ref().unwrap().saved_to,
        fs::canonicalize(&torn).unwrap()
    );
    assert_eq!(
        fs::read_to_string(&path).unwrap(),
        "{\"a\":1}\n{\"b\":2}\n{\"d\":4}\n"
    );
    assert_eq!(fs::read_to_string(&torn).unwrap(), "{\"c\":\n");

    // A file that is nothing but a torn line; the torn file accumulates.
    fs::write(&path, "garbage-without-newline").unwrap();
    append(&dir, &path, &Options::new(), &["{}"]).unwrap();
    assert_eq!(fs::read_to_string(&path).unwrap(), "{}\n");
    assert_eq!(
        fs::read_to_string(&torn).unwrap(),
        "{\"c\":\ngarbage-without-newline\n"
    );

    // An edit that replaces a torn .jsonl file keeps the torn bytes too.
    fs::write(&path, "{\"x\":1}\n{\"y\"").unwrap();
    let done = edit(&dir, &path, &Options::new(), |old| {
        assert_eq!(old, Some(&b"{\"x\":1}\n"[..]), "edits see complete lines");
        Ok::<_, Never>(Some(b"{\"x\":2}".to_vec()))
    })
    .unwrap();
    assert!(done.torn.is_some());
    assert_eq!(fs::read_to_string(&path).unwrap(), "{\"x\":2}\n");
    assert!(fs::read_to_string(&torn).unwrap().ends_with("{\"y\"\n"));
}

#[test]
fn a_complete_last_record_without_its_newline_is_kept_not_torn() {
    let (t, dir) = setup();
    let path = t.path().join("events.jsonl");
    let torn = t.path().join("events.jsonl.torn");
    let whole = &b"{\"a\":1}\n{\"b\":2}\n"[..];
    fs::write(&path, "{\"a\":1}\n{\"b\":2}").unwrap();
    // get, and so the version, count the record, with its newline.
    let snap = get(&dir, &path, &Options::new()).unwrap();
    assert_eq!(snap.content.as_deref(), Some(whole));
    assert_eq!(snap.version, Version::of(Some(whole)));
    // append keeps it, ends it, then appends; a compare-and-swap agrees.
    let opts = Options::new().if_version(snap.version);
    let done = append(&dir, &path, &opts, &["{\"c\":3}"]).unwrap();
    assert_eq!(done.torn, None);
    assert_eq!(
        fs::read_to_string(&path).unwrap(),
        "{\"a\":1}\n{\"b\":2}\n{\"c\":3}\n"
    );
    // An edit sees it too (and so does not drop it from the new content).
    fs::write(&path, "{\"a\":1}\n[\"b\"]").unwrap();
    let done = edit(&dir, &path, &Options::new(), |old| {
        let mut new = old.unwrap().to_vec();
        new.extend_from_slice(b"{\"c\":3}\n");
        Ok::<_, Never>(Some(new))
    })
    .unwrap();
    assert_eq!(done.torn, None);
    assert_eq!(
        fs::read_to_string(&path).unwrap(),
        "{\"a\":1}\n[\"b\"]\n{\"c\":3}\n"
    );
    assert!(!torn.exists());
    // A number may be cut between digits, so a bare number stays torn.
    fs::write(&path, "{\"a\":1}\n12").unwrap();
    let done = append(&dir, &path, &Options::new(), &["3"]).unwrap();
    assert_eq!(done.torn.unwrap().bytes, 2);
    assert_eq!(fs::read_to_string(&path).unwrap(), "{\"a\":1}\n3\n");
}

#[test]
fn a_json_document_is_never_appended_to() {
    let (t, dir) = setup();
    let path = t.path().join("doc.json");
    let doc = "{\n  \"a\": 1\n}";
    fs::write(&path, doc).unwrap();
    for records in [vec!["{\"b\":2}"], vec![]] {
        let err = append(&dir, &path, &Options::new(), &records).unwrap_err();
        assert!(matches!(err, StateError::AppendToJson { .. }), "{err}");
        assert!(!err.changed());
    }
    assert_eq!(fs::read_to_string(&path).unwrap(), doc);
    assert!(!t.path().join("doc.json.torn").exists());
}

#[test]
fn records_are_all_checked_before_anything_is_appended() {
    let (t, dir) = setup();
    let path = t.path().join("e.jsonl");
    append(&dir, &path, &Options::new(), &["{\"ok\":1}"]).unwrap();
    for bad in [
        vec!["{\"ok\":2}", "not json"],
        vec!["{\"ok\":2}", "{}\n{}"],
        vec!["{\"a\":1} {\"b\":2}"],
        vec![""],
    ] {
        let err = append(&dir, &path, &Options::new(), &bad).unwrap_err();
        assert!(matches!(err, StateError::InvalidRecord { .. }), "{err}");
    }
    assert_eq!(fs::read_to_string(&path).unwrap(), "{\"ok\":1}\n");
    // Plain text files take any line, but still one line per record.
    let log = t.path().join("session.log");
    append(&dir, &log, &Options::new(), &["step 1", "", "step 2"]).unwrap();
    assert_eq!(fs::read_to_string(&log).unwrap(), "step 1\n\nstep 2\n");
    assert!(append(&dir, &log, &Options::new(), &["a\nb"]).is_err());
}

#[test]
fn compare_and_swap_with_a_stale_version_changes_nothing() {
    let (t, dir) = setup();
    let path = t.path().join("cas.json");
    // "absent" creates only if missing.
    let create = Options::new().if_version(Version::absent());
    edit(&dir, &path, &create, increment).unwrap();
    let err = edit(&dir, &path, &create, increment).unwrap_err();
    assert!(matches!(
        err,
        EditError::State(StateError::VersionMismatch { .. })
    ));

    let v1 = get(&dir, &path, &Options::new()).unwrap().version;
    let done = edit(
        &dir,
        &path,
        &Options::new().if_version(v1.clone()),
        increment,
    )
    .unwrap();
    assert_eq!(done.previous, v1);
    assert_eq!(
        done.version,
        get(&dir, &path, &Options::new()).unwrap().version
    );
    let before = fs::read(&path).unwrap();
    let mut called = false;
    let err = edit(&dir, &path, &Options::new().if_version(v1.clone()), |o| {
        called = true;
        increment(o)
    })
    .unwrap_err();
    match err {
        EditError::State(StateError::VersionMismatch {
            expected, actual, ..
        }) => {
            assert_eq!(expected, v1);
            assert_eq!(actual, done.version);
        }
        other => panic!("{other}"),
    }
    assert!(
        !called,
        "the edit function is not called on a stale version"
    );
    assert_eq!(fs::read(&path).unwrap(), before);

    // Appends can be conditional too.
    let log = t.path().join("l.jsonl");
    append(
        &dir,
        &log,
        &Options::new().if_version(Version::absent()),
        &["1"],
    )
    .unwrap();
    let stale = Options::new().if_version(Version::absent());
    assert!(matches!(
        append(&dir, &log, &stale, &["2"]),
        Err(StateError::VersionMismatch { .. })
    ));
    let v = get(&dir, &log, &Options::new()).unwrap().version;
    append(&dir, &log, &Options::new().if_version(v), &["2"]).unwrap();
    assert_eq!(fs::read_to_string(&log).unwrap(), "1\n2\n");
}

#[test]
fn invalid_new_content_and_failed_edit_functions_write_nothing() {
    let (t, dir) = setup();
    let path = t.path().join("doc.json");
    fs::write(&path, "{\"keep\":true}").unwrap();
    for bad in [&b"not json"[..], b"", b"{} {}", b"{\"a\":"] {
        let err = edit(&dir, &path, &Options::new(), |_| {
            Ok::<_, Never>(Some(bad.to_vec()))
        })
        .unwrap_err();
        assert!(
            matches!(err, EditError::State(StateError::InvalidJson { .. })),
            "{err}"
        );
    }
    let err = edit(&dir, &path, &Options::new(), |_| Err("no thanks")).unwrap_err();
    assert!(matches!(err, EditError::Aborted("no thanks")));
    let done = edit(&dir, &path, &Options::new(), |_| Ok::<_, Never>(None)).unwrap();
    assert!(!done.changed);
    assert_eq!(done.previous, done.version);
    assert_eq!(fs::read_to_string(&path).unwrap(), "{\"keep\":true}");

    // Nothing is created for a missing file either.
    let missing = t.path().join("missing.json");
    assert!(
        edit(&dir, &missing, &Options::new(), |_| Ok::<_, Never>(Some(
            vec![]
        )))
        .is_err()
    );
    assert!(!missing.exists());

    // .jsonl edits: every line one JSON value; a missing final newline is added.
    let lines = t.path().join("l.jsonl");
    let err = edit(&dir, &lines, &Options::new(), |_| {
        Ok::<_, Never>(Some(b"{}\nnope\n".to_vec()))
    })
    .unwrap_err();
    assert!(
        matches!(
            err,
            EditError::State(StateError::InvalidJsonLine { line: 2, .. })
        ),
        "{err}"
    );
    edit(&dir, &lines, &Options::new(), |_| {
        Ok::<_, Never>(Some(b"{}\n[1]".to_vec()))
    })
    .unwrap();
    assert_eq!(fs::read_to_string(&lines).unwrap(), "{}\n[1]\n");
}

/// Permission bits: unix only (a Windows file has an ACL, and the new file
/// inherits its directory's).
#[cfg(unix)]
#[test]
fn permissions_are_kept() {
    let (t, dir) = setup();
    let path = t.path().join("p.json");
    fs::write(&path, "{\"n\":1}").unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).unwrap();
    edit(&dir, &path, &Options::new(), increment).unwrap();
    assert_eq!(
        fs::metadata(&path).unwrap().permissions().mode() & 0o7777,
        0o640
    );
}

/// Unix only: Windows needs a privilege to make a symbolic link, and
/// wine's read back as something else.
#[cfg(unix)]
#[test]
fn symlinks_in_the_same_directory_are_followed() {
    let (t, dir) = setup();
    let path = t.path().join("p.json");
    fs::write(&path, "{\"n\":2}").unwrap();
    let link = t.path().join("current.json");
    symlink("p.json", &link).unwrap();
    edit(&dir, &link, &Options::new(), increment).unwrap();
    assert!(fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(counter(&path), 3);
    // The link and the target share one lock.
    let a = StateFile::resolve(&link)
        .unwrap()
        .default_lock_name()
        .unwrap();
    let b = StateFile::resolve(&path)
        .unwrap()
        .default_lock_name()
        .unwrap();
    assert_eq!(a, b);
}

#[test]
fn bad_inputs_are_refused_with_their_path_and_leave_files_alone() {
    let (t, dir) = setup();
    let never = |_: Option<&[u8]>| -> Result<Option<Vec<u8>>, Never> {
        panic!("the edit function must not run")
    };
    let refused = |path: &Path| {
        let err = edit(&dir, path, &Options::new(), never).unwrap_err();
        let text = err.to_string();
        let tmp_name = t.path().file_name().unwrap().to_string_lossy();
        assert!(
            text.contains(&*tmp_name),
            "the message names the path: {text}"
        );
        err
    };
    // A directory.
    fs::create_dir(t.path().join("adir")).unwrap();
    assert!(matches!(
        refused(&t.path().join("adir")),
        EditError::State(StateError::NotAFile { .. })
    ));
    // A symlink out of its directory (unix: see the test above).
    #[cfg(unix)]
    {
        fs::create_dir(t.path().join("other")).unwrap();
        fs::write(t.path().join("other/secret.json"), "{}").unwrap();
        symlink("other/secret.json", t.path().join("out.json")).unwrap();
        assert!(matches!(
            refused(&t.path().join("out.json")),
            EditError::State(StateError::SymlinkOutside { .. })
        ));
        assert_eq!(
            fs::read_to_string(t.path().join("other/secret.json")).unwrap(),
            "{}"
        );
    }
    // A path whose parent is a regular file.
    fs::write(t.path().join("plain"), "x").unwrap();
    assert!(matches!(
        refused(&t.path().join("plain/x.json")),
        EditError::State(StateError::Io(_))
    ));
    // Read-only directories and files: permission bits and chattr (unix);
    // Windows has its read-only attribute (tests/windows.rs).
    #[cfg(unix)]
    {
        // A directory nobody may write to: chmod for normal users; root ignores
        // modes, so it gets an immutable directory (chattr +i) where available.
        let ro = t.path().join("ro");
        fs::create_dir(&ro).unwrap();
        fs::write(ro.join("s.json"), "{\"n\":1}").unwrap();
        let root = rustix::process::geteuid().is_root();
        let locked_down = if root {
            baton_testkit::Immutable::set(&ro)
        } else {
            fs::set_permissions(&ro, fs::Permissions::from_mode(0o555)).unwrap();
            None
        };
        if locked_down.is_some() || !root {
            let err = refused(&ro.join("s.json"));
            assert!(matches!(err, EditError::State(StateError::Io(_))), "{err}");
            let err = append(&dir, ro.join("new.jsonl"), &Options::new(), &["{}"]).unwrap_err();
            assert!(matches!(err, StateError::Io(_)), "{err}");
            drop(locked_down);
            fs::set_permissions(&ro, fs::Permissions::from_mode(0o755)).unwrap();
            assert_eq!(fs::read_to_string(ro.join("s.json")).unwrap(), "{\"n\":1}");
            assert!(temps_of(&ro, "s.json").is_empty());
            assert!(!ro.join("new.jsonl").exists());
        } else {
            eprintln!("skipped the read-only directory case: chattr unavailable");
        }
        // Unreadable and read-only files: only meaningful for non-root users.
        if !root {
            let f = t.path().join("secret.json");
            fs::write(&f, "{}").unwrap();
            fs::set_permissions(&f, fs::Permissions::from_mode(0o000)).unwrap();
            assert!(matches!(refused(&f), EditError::State(StateError::Io(_))));
            fs::set_permissions(&f, fs::Permissions::from_mode(0o444)).unwrap();
            assert!(matches!(refused(&f), EditError::State(StateError::Io(_))));
            assert_eq!(fs::read_to_string(&f).unwrap(), "{}");
        }
    }
}

#[test]
fn get_reports_versions_and_json_content() {
    let (t, dir) = setup();
    let path = t.path().join("g.json");
    let snap = get(&dir, &path, &Options::new()).unwrap();
    assert!(snap.version.is_absent());
    assert_eq!(snap.content, None);
    assert_eq!(snap.content_json().unwrap(), serde_json::Value::Null);
    fs::write(&path, "{\"a\":[1,2]}").unwrap();
    let snap = get(&dir, &path, &Options::new()).unwrap();
    assert_eq!(snap.content_json().unwrap(), serde_json::json!({"a":[1,2]}));
    assert_eq!(snap.version, Version::of(Some(b"{\"a\":[1,2]}")));
    let text = t.path().join("notes.md");
    fs::write(&text, "hello\n").unwrap();
    let snap = get(&dir, &text, &Options::new()).unwrap();
    assert_eq!(snap.content_json().unwrap(), serde_json::json!("hello\n"));
    fs::write(&path, "{broken").unwrap();
    let snap = get(&dir, &path, &Options::new()).unwrap();
    assert!(matches!(
        snap.content_json(),
        Err(StateError::CorruptJson { .. })
    ));
    // read_locked works under any lock the caller holds.
    let file = StateFile::resolve(&text).unwrap();
    let g = lock(&dir, &file, &Options::new()).unwrap();
    assert_eq!(read_locked(&file, &g).unwrap().content.unwrap(), b"hello\n");
}

/// Lines ended by CRLF (written by a Windows tool) are records: `\r` is
/// JSON whitespace. Appends end theirs with `\n` alone; a last CRLF record
/// lacking its `\n` is whole, not torn.
#[test]
fn crlf_lines_are_records_and_crlf_json_is_edited() {
    let (t, dir) = setup();
    let lines = t.path().join("events.jsonl");
    fs::write(&lines, "{\"a\":1}\r\n{\"b\":2}\r").unwrap();
    let snap = get(&dir, &lines, &Options::new()).unwrap();
    assert_eq!(
        snap.content.as_deref(),
        Some(&b"{\"a\":1}\r\n{\"b\":2}\r\n"[..])
    );
    let done = append(&dir, &lines, &Options::new(), &["{\"c\":3}"]).unwrap();
    assert_eq!(done.torn, None);
    assert_eq!(
        fs::read_to_string(&lines).unwrap(),
        "{\"a\":1}\r\n{\"b\":2}\r\n{\"c\":3}\n"
    );
    let doc = t.path().join("doc.json");
    fs::write(&doc, "{\r\n  \"n\": 4\r\n}\r\n").unwrap();
    edit(&dir, &doc, &Options::new(), increment).unwrap();
    assert_eq!(counter(&doc), 5);
}
