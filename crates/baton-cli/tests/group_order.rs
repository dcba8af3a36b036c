#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! Ordering keys of groups (`baton run --group G --order KEY`, issue 36
//! item 1): in modes supersede and coalesce the newest event wins whatever
//! order the runs arrive in, in a baton dir and on PostgreSQL (two
//! "machines": two baton dirs, one fresh database).

use crate::common;
use crate::pg_common;

use std::fs;
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use common::{code, stderr, wait_until, Env};
use pg_common::TestDb;

/// Where the group lives: one baton dir, or a database shared by two.
struct Place {
    a: Env,
    b: Env,
    url: Option<String>,
    _db: Option<TestDb>,
}

impl Place {
    fn local() -> Place {
        let a = Env::new();
        // One machine: both "machines" use the same baton dir.
        let b = Env {
            tmp: tempfile::tempdir().unwrap(),
            dir: a.dir.clone(),
        };
        Place {
            a,
            b,
            url: None,
            _db: None,
        }
    }

    fn postgres() -> Place {
        let db = TestDb::new();
        Place {
            a: Env::new(),
            b: Env::new(),
            url: Some(db.url()),
            _db: Some(db),
        }
    }

    /// `baton [--backend URL] run --group G --mode M [--order K] -- sh -c S`.
    fn args<'a>(
        &'a self,
        group: &'a str,
        mode: &'a str,
        order: Option<&'a str>,
        script: &'a str,
    ) -> Vec<&'a str> {
        let mut v = Vec::new();
        if let Some(url) = &self.url {
            v.extend(["--backend", url.as_str()]);
        }
        v.extend(["run", "--group", group, "--mode", mode, "--grace", "5s"]);
        if let Some(o) = order {
            v.extend(["--order", o]);
        }
        v.extend(["--", "sh", "-c", script]);
        v
    }

    /// Runs on machine A (`first`) or B.
    fn run(
        &self,
        first: bool,
        group: &str,
        mode: &str,
        order: Option<&str>,
        script: &str,
    ) -> Output {
        let env = if first { &self.a } else { &self.b };
        env.run(&self.args(group, mode, order, script))
    }

    fn spawn(
        &self,
        first: bool,
        group: &str,
        mode: &str,
        order: Option<&str>,
        script: &str,
    ) -> Child {
        let env = if first { &self.a } else { &self.b };
        env.spawn(&self.args(group, mode, order, script))
    }

    fn path(&self, rel: &str) -> String {
        self.a.path(rel).display().to_string()
    }
}

fn read(path: &str) -> String {
    fs::read_to_string(path).unwrap_or_default()
}

/// The minimal form: the newer event's run arrives first; the
/// older one, arriving second, ends 79 at once without running its
/// command, and the newer one completes.
fn newer_key_arriving_first_wins(p: &Place) {
    let out = p.path("out");
    let started = p.path("started");
    let release = p.path("release");
    let newer = format!(
        "echo 2 > {started}; while ! test -e {release}; do sleep 0.02; done; echo 'comment 2' >> {out}"
    );
    let first = p.spawn(true, "issue/9", "supersede", Some("2"), &newer);
    wait_until(Duration::from_secs(20), || !read(&started).is_empty());
    let t = Instant::now();
    let older = p.run(
        false,
        "issue/9",
        "supersede",
        Some("1"),
        &format!("echo 'comment 1' >> {out}"),
    );
    assert_eq!(code(&older), 79, "{}", stderr(&older));
    assert!(
        stderr(&older).contains("'1' is older than '2'"),
        "{}",
        stderr(&older)
    );
    // "At once": it did not wait for the newer run, which still runs.
    assert!(t.elapsed() < Duration::from_secs(15));
    fs::write(&release, "").unwrap();
    let first = first.wait_with_output().unwrap();
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    assert_eq!(read(&out), "comment 2\n", "the older command never ran");
}

/// The newest key outlives the runs: a late older event is refused after
/// the newer run ended; an equal key runs (the later arrival wins); a run
/// without a key runs and leaves the newest key as it is; a newer key runs.
fn a_late_older_event_is_refused_after_the_newer_ended(p: &Place) {
    let out = p.path("late");
    let echo = |s: &str| format!("echo {s} >> {out}");
    let done = p.run(true, "pr/3", "supersede", Some("5"), &echo("5"));
    assert_eq!(code(&done), 0, "{}", stderr(&done));
    let late = p.run(false, "pr/3", "supersede", Some("4"), &echo("4"));
    assert_eq!(code(&late), 79, "{}", stderr(&late));
    let same = p.run(false, "pr/3", "supersede", Some("5"), &echo("5again"));
    assert_eq!(code(&same), 0, "{}", stderr(&same));
    let keyless = p.run(true, "pr/3", "supersede", None, &echo("nokey"));
    assert_eq!(code(&keyless), 0, "{}", stderr(&keyless));
    let still = p.run(false, "pr/3", "supersede", Some("3"), &echo("3"));
    assert_eq!(code(&still), 79, "{}", stderr(&still));
    let newer = p.run(true, "pr/3", "supersede", Some("6"), &echo("6"));
    assert_eq!(code(&newer), 0, "{}", stderr(&newer));
    assert_eq!(read(&out), "5\n5again\nnokey\n6\n");

    // Times: the instant counts, whatever the offset it is written in.
    let t_out = p.path("times");
    let at = |s: &str| format!("echo {s} >> {t_out}");
    let a = p.run(
        true,
        "pr/4",
        "supersede",
        Some("2026-11-28T15:00:00+01:00"),
        &at("a"),
    );
    assert_eq!(code(&a), 0, "{}", stderr(&a));
    let b = p.run(
        false,
        "pr/4",
        "supersede",
        Some("2026-11-28T13:59:59.5Z"),
        &at("b"),
    );
    assert_eq!(code(&b), 79, "{}", stderr(&b));
    let c = p.run(
        false,
        "pr/4",
        "supersede",
        Some("2026-11-28T14:00:00.001Z"),
        &at("c"),
    );
    assert_eq!(code(&c), 0, "{}", stderr(&c));
    assert_eq!(read(&t_out), "a\nc\n");
    // A key of the other kind is refused, naming both.
    let mixed = p.run(false, "pr/4", "supersede", Some("7"), &at("d"));
    assert_eq!(code(&mixed), 125, "{}", stderr(&mixed));
    assert!(
        stderr(&mixed).contains("'7'") && stderr(&mixed).contains("ordered by times"),
        "{}",
        stderr(&mixed)
    );
    assert_eq!(read(&t_out), "a\nc\n");
}

/// Coalesce: the running run finishes; of the waiting ones, the newest key
/// waits, and an older key arriving later is refused at once (it does not
/// replace the newer waiting one).
fn coalesce_keeps_the_newest_key_waiting(p: &Place) {
    let out = p.path("co");
    let started = p.path("co-started");
    let release = p.path("co-release");
    let first_cmd = format!(
        "echo 1 > {started}; while ! test -e {release}; do sleep 0.02; done; echo 10 >> {out}"
    );
    let first = p.spawn(true, "c", "coalesce", Some("10"), &first_cmd);
    wait_until(Duration::from_secs(20), || !read(&started).is_empty());
    let waiting = p.spawn(
        false,
        "c",
        "coalesce",
        Some("12"),
        &format!("echo 12 >> {out}"),
    );
    // Wait until it is registered as waiting: then the older one arrives.
    let status = |env: &Env| {
        let mut args = Vec::new();
        if let Some(url) = &p.url {
            args.extend(["--backend", url.as_str()]);
        }
        args.extend(["group", "status", "c", "--json"]);
        let out = env.run(&args);
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap_or_default()
    };
    wait_until(Duration::from_secs(20), || {
        status(&p.a)["waiting"].as_array().map_or(0, Vec::len) == 1
    });
    let older = p.run(
        true,
        "c",
        "coalesce",
        Some("11"),
        &format!("echo 11 >> {out}"),
    );
    assert_eq!(code(&older), 79, "{}", stderr(&older));
    assert_eq!(
        status(&p.a)["waiting"].as_array().map_or(0, Vec::len),
        1,
        "the newer key still waits"
    );
    fs::write(&release, "").unwrap();
    assert_eq!(code(&first.wait_with_output().unwrap()), 0);
    let waiting = waiting.wait_with_output().unwrap();
    assert_eq!(code(&waiting), 0, "{}", stderr(&waiting));
    assert_eq!(read(&out), "10\n12\n");
}

/// Bad keys: 125 naming the value, from the flag and from `BATON_ORDER`;
/// a key in a mode that takes none; nothing ran.
fn bad_keys_are_refused(p: &Place) {
    let out = p.path("bad");
    let script = format!("echo ran >> {out}");
    let bad = p.run(true, "b", "supersede", Some("tomorrow"), &script);
    assert_eq!(code(&bad), 125, "{}", stderr(&bad));
    assert!(stderr(&bad).contains("'tomorrow'"), "{}", stderr(&bad));
    let env =
        p.a.baton(&p.args("b", "supersede", None, &script))
            .env("BATON_ORDER", "2026-13-01T00:00:00Z")
            .stdin(Stdio::null())
            .output()
            .unwrap();
    assert_eq!(code(&env), 125, "{}", stderr(&env));
    assert!(
        stderr(&env).contains("'2026-13-01T00:00:00Z'"),
        "{}",
        stderr(&env)
    );
    let queue = p.run(true, "b", "queue", Some("3"), &script);
    assert_eq!(code(&queue), 125, "{}", stderr(&queue));
    assert!(stderr(&queue).contains("--order '3'"), "{}", stderr(&queue));
    assert_eq!(read(&out), "");
    // BATON_ORDER is read like --order.
    let ok =
        p.a.baton(&p.args("b", "supersede", None, &script))
            .env("BATON_ORDER", "9")
            .stdin(Stdio::null())
            .output()
            .unwrap();
    assert_eq!(code(&ok), 0, "{}", stderr(&ok));
    let older = p.run(false, "b", "supersede", Some("8"), &script);
    assert_eq!(code(&older), 79, "{}", stderr(&older));
    assert_eq!(read(&out), "ran\n");
}

#[test]
fn order_the_newer_key_arriving_first_wins() {
    newer_key_arriving_first_wins(&Place::local());
}

#[test]
fn order_a_late_older_event_is_refused_after_the_newer_ended() {
    a_late_older_event_is_refused_after_the_newer_ended(&Place::local());
}

#[test]
fn order_coalesce_keeps_the_newest_key_waiting() {
    coalesce_keeps_the_newest_key_waiting(&Place::local());
}

#[test]
fn order_bad_keys_are_refused() {
    bad_keys_are_refused(&Place::local());
}

#[test]
fn pg_order_the_newer_key_arriving_first_wins() {
    newer_key_arriving_first_wins(&Place::postgres());
}

#[test]
fn pg_order_a_late_older_event_is_refused_after_the_newer_ended() {
    a_late_older_event_is_refused_after_the_newer_ended(&Place::postgres());
}

#[test]
fn pg_order_coalesce_keeps_the_newest_key_waiting() {
    coalesce_keeps_the_newest_key_waiting(&Place::postgres());
}

#[test]
fn pg_order_bad_keys_are_refused() {
    bad_keys_are_refused(&Place::postgres());
}
