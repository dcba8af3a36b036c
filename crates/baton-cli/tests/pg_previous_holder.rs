#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! The next holder learns that the previous one died, on PostgreSQL
//! (`--backend`): a `baton run` SIGKILLed while holding a lock or a group's
//! slot; the run after it gets `BATON_PREVIOUS_HOLDER_DIED=1`, and `lock
//! status --json` shows the dead holder while the new one holds the lock.
//! Real binary, real server (127.0.0.1:5432), a fresh database per test.

use crate::common;
use crate::pg_common;

use std::fs;
use std::process::Child;
use std::time::Duration;

use common::{code, first_json_of, shell, stderr, stdout, wait_until, Env};
use pg_common::TestDb;

/// A fresh database (dropped at the end) and a temp dir with the baton dir.
struct Pg {
    db: TestDb,
    env: Env,
}

impl Pg {
    fn args<'a>(&'a self, url: &'a str, args: &[&'a str]) -> Vec<&'a str> {
        let mut all = vec!["--backend", url];
        all.extend_from_slice(args);
        all
    }

    /// `baton --backend URL ARGS -- sh -c SCRIPT`, started.
    fn spawn(&self, args: &[&str], script: &str) -> Child {
        let url = self.db.url();
        let mut all = self.args(&url, args);
        all.extend(["--", "sh", "-c", script]);
        self.env.spawn(&all)
    }

    /// `baton --backend URL ARGS -- sh -c 'echo died=$BATON_PREVIOUS_HOLDER_DIED'`.
    fn told(&self, args: &[&str]) -> String {
        let url = self.db.url();
        let mut all = self.args(&url, args);
        all.extend(["--", "sh", "-c", "echo died=$BATON_PREVIOUS_HOLDER_DIED"]);
        let out = self.env.run(&all);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        stdout(&out).trim().to_string()
    }

    fn status(&self, name: &str) -> serde_json::Value {
        let url = self.db.url();
        let out = self
            .env
            .run(&self.args(&url, &["lock", "status", name, "--json"]));
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

/// Starts a holder whose command writes its pid and sleeps; SIGKILLs the
/// `baton` process once the command runs (the command is left for the
/// next holder to stop).
fn kill_a_holder(pg: &Pg, args: &[&str]) {
    let pidfile = pg.env.path(&format!("cmd-{}.pid", args.join("-")));
    let script = format!("echo $$ > '{}'; exec sleep 600", pidfile.display());
    let mut holder = pg.spawn(args, &script);
    wait_until(Duration::from_secs(30), || {
        fs::read_to_string(&pidfile).is_ok_and(|s| s.ends_with('\n'))
    });
    holder.kill().unwrap(); // SIGKILL
    holder.wait().unwrap();
}

#[test]
fn a_run_on_postgresql_after_a_killed_holder_is_told() {
    let pg = Pg {
        db: TestDb::new(),
        env: Env::new(),
    };
    let held = pg.spawn(
        &["run", "--lock", "k"],
        &format!("touch '{}'; exec sleep 600", pg.env.path("r0").display()),
    );
    wait_until(Duration::from_secs(30), || pg.env.path("r0").exists());
    let dead_run = pg.status("k")["holder"]["run_id"].clone();
    let mut held = held;
    held.kill().unwrap();
    held.wait().unwrap();

    // The next holder: told, and `status` says so while it holds the lock.
    let release = pg.env.path("release");
    let out_file = pg.env.path("second");
    let script = format!(
        "echo died=$BATON_PREVIOUS_HOLDER_DIED > '{}'; while [ ! -e '{}' ]; do sleep 0.01; done",
        out_file.display(),
        release.display()
    );
    let second = pg.spawn(&["run", "--lock", "k"], &script);
    wait_until(Duration::from_secs(30), || {
        fs::read_to_string(&out_file).is_ok_and(|s| s.ends_with('\n'))
    });
    assert_eq!(fs::read_to_string(&out_file).unwrap().trim(), "died=1");
    let st = pg.status("k");
    assert_eq!(st["held"], true, "{st}");
    assert_eq!(st["previous_holder_died"], true, "{st}");
    assert_eq!(st["previous_holder"]["run_id"], dead_run, "{st}");
    fs::write(&release, "").unwrap();
    let out = second.wait_with_output().unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));

    // Released cleanly: the run after is told nothing.
    assert_eq!(pg.told(&["run", "--lock", "k"]), "died=");
}

#[test]
fn a_group_run_on_postgresql_after_a_killed_run_is_told() {
    let pg = Pg {
        db: TestDb::new(),
        env: Env::new(),
    };
    kill_a_holder(&pg, &["run", "--group", "g"]);
    assert_eq!(pg.told(&["run", "--group", "g"]), "died=1");
    assert_eq!(pg.told(&["run", "--group", "g"]), "died=");
}

/// A script that took the lock with `lock acquire` on PostgreSQL and was
/// killed before `release`: the next `lock acquire --json` names it.
#[test]
fn lock_acquire_on_postgresql_after_a_killed_script_reports_the_dead_holder() {
    let pg = Pg {
        db: TestDb::new(),
        env: Env::new(),
    };
    let (bin, dir, url) = (
        env!("CARGO_BIN_EXE_baton"),
        pg.env.dir.display().to_string(),
        pg.db.url(),
    );
    let first_json = pg.env.path("first.json");
    let mut script = shell(
        pg.env.tmp.path(),
        &format!(
            "'{bin}' --dir '{dir}' --backend '{url}' lock acquire memory --json > '{}' || exit 1; while :; do sleep 0.05; done",
            first_json.display()
        ),
    )
    .spawn()
    .unwrap();
    wait_until(Duration::from_secs(30), || {
        fs::read_to_string(&first_json).is_ok_and(|s| s.trim_end().ends_with('}'))
    });
    let first: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(&first_json).unwrap()).unwrap();
    script.kill().unwrap(); // SIGKILL
    script.wait().unwrap();
    let acquire = || {
        first_json_of(
            pg.env.tmp.path(),
            &format!(
                "'{bin}' --dir '{dir}' --backend '{url}' lock acquire memory --json && '{bin}' --dir '{dir}' --backend '{url}' lock release memory"
            ),
        )
    };
    let second = acquire();
    assert_eq!(second["previous_holder_died"], true, "{second}");
    assert_eq!(
        second["previous_holder"]["run_id"], first["run_id"],
        "{second}"
    );
    assert_eq!(
        second["previous_holder"]["token"], first["token"],
        "{second}"
    );
    let third = acquire();
    assert_eq!(third["previous_holder_died"], false, "{third}");
}
