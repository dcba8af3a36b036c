#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! The next holder learns how the previous one ended (issue 36, item 4):
//! `BATON_PREVIOUS_OUTCOME` (`released`, `failed:<code>`,
//! `killed:<signal>`, `died`) for `baton run --lock` and `--group`, in a
//! baton dir and on PostgreSQL (`--backend`), and `previous_outcome` in
//! `lock status`, `group status` and `lock acquire --json`. A command
//! killed inside a living supervisor is told as plainly as a dead
//! supervisor. Real binary, real signals, real server (127.0.0.1:5432).

use crate::common;
use crate::pg_common;

use std::fs;
use std::time::Duration;

use common::{code, first_json_of, stderr, stdout, wait_until, Env};
use pg_common::TestDb;

/// Where the locks live: the baton dir, or a database.
struct Place {
    env: Env,
    db: Option<TestDb>,
}

impl Place {
    fn local() -> Place {
        Place {
            env: Env::new(),
            db: None,
        }
    }

    fn pg() -> Place {
        Place {
            env: Env::new(),
            db: Some(TestDb::new()),
        }
    }

    fn args(&self, args: &[&str]) -> Vec<String> {
        let mut all: Vec<String> = Vec::new();
        if let Some(db) = &self.db {
            all.extend(["--backend".to_string(), db.url()]);
        }
        all.extend(args.iter().map(ToString::to_string));
        all
    }

    /// `baton ARGS -- sh -c SCRIPT`: its exit code.
    fn run(&self, args: &[&str], script: &str) -> i32 {
        let mut all = self.args(args);
        all.extend(["--", "sh", "-c", script].map(String::from));
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        code(&self.env.run(&all))
    }

    /// What the next run is told: `BATON_PREVIOUS_OUTCOME`, or `unset`.
    fn told(&self, args: &[&str]) -> String {
        let mut all = self.args(args);
        all.extend(["--", "sh", "-c", "echo ${BATON_PREVIOUS_OUTCOME:-unset}"].map(String::from));
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        let out = self.env.run(&all);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        stdout(&out).trim().to_string()
    }

    /// `baton ARGS --json`, parsed.
    fn json(&self, args: &[&str]) -> serde_json::Value {
        let all = self.args(args);
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        let out = self.env.run(&all);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// Starts a holder whose command writes its pid and sleeps, then
    /// SIGKILLs the `baton` process (the supervisor dies, not the command).
    fn kill_supervisor(&self, args: &[&str]) {
        let pidfile = self.env.path(&format!("cmd-{}.pid", args.join("-")));
        let _ = fs::remove_file(&pidfile);
        let script = format!("echo $$ > '{}'; exec sleep 600", pidfile.display());
        let mut all = self.args(args);
        all.extend(["--", "sh", "-c", &script].map(String::from));
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        let mut holder = self.env.spawn(&all);
        wait_until(Duration::from_secs(30), || {
            fs::read_to_string(&pidfile).is_ok_and(|s| s.ends_with('\n'))
        });
        holder.kill().unwrap(); // SIGKILL
        holder.wait().unwrap();
    }
}

/// Every outcome in turn, each told to the run after it (which itself
/// ends well, so the one after that is told `released`).
/// `status` (when given) prints the JSON whose `previous_outcome` says what
/// the next run would be told.
fn each_outcome_is_told(
    place: &Place,
    args: &[&str],
    status: Option<&dyn Fn() -> serde_json::Value>,
) {
    let status = || status.map_or_else(|| serde_json::json!({}), |f| f());
    let expect = |v: &str| {
        let st = status();
        if st.get("previous_outcome").is_some() {
            assert_eq!(st["previous_outcome"], v, "{st}");
        }
    };
    assert_eq!(place.told(args), "unset", "the first run has no previous");
    assert_eq!(place.run(args, "echo half >> tasks.md; exit 3"), 3);
    expect("failed:3");
    assert_eq!(place.told(args), "failed:3");
    expect("released");
    assert_eq!(place.told(args), "released");
    // The case: the command is killed, its supervisor lives.
    assert_eq!(place.run(args, "echo half >> tasks.md; kill -9 $$"), 137);
    assert_eq!(place.told(args), "killed:SIGKILL");
    assert_eq!(
        place.run(&[args, &["--timeout", "100ms"]].concat(), "exec sleep 30"),
        124
    );
    assert_eq!(place.told(args), "failed:124");
    place.kill_supervisor(args);
    expect("died");
    assert_eq!(place.told(args), "died");
    assert_eq!(place.told(args), "released");
}

#[test]
fn a_run_under_a_lock_learns_how_the_previous_one_ended() {
    let place = Place::local();
    each_outcome_is_told(
        &place,
        &["run", "--lock", "michi"],
        Some(&|| place.json(&["lock", "status", "michi", "--json"])),
    );
}

#[test]
fn a_group_run_learns_how_the_previous_one_ended() {
    let place = Place::local();
    each_outcome_is_told(
        &place,
        &["run", "--group", "g"],
        Some(&|| place.json(&["group", "status", "g", "--json"])),
    );
}

#[test]
fn a_run_under_a_lock_on_postgresql_learns_how_the_previous_one_ended() {
    let place = Place::pg();
    each_outcome_is_told(
        &place,
        &["run", "--lock", "michi"],
        Some(&|| place.json(&["lock", "status", "michi", "--json"])),
    );
}

/// Groups on PostgreSQL: the runs are told (their status keeps only live
/// runs, and says nothing of the previous one).
#[test]
fn a_group_run_on_postgresql_learns_how_the_previous_one_ended() {
    let place = Place::pg();
    each_outcome_is_told(&place, &["run", "--group", "g"], None);
}

/// A script's hold (`lock acquire`/`release`): the JSON of the next
/// `acquire` says how the hold before it ended: `released` after `lock
/// release`, `died` when the script exited without it.
fn a_script_hold_tells_its_outcome(place: &Place) {
    let bin = env!("CARGO_BIN_EXE_baton");
    let flags = place
        .args(&["--dir", &place.env.dir.display().to_string()])
        .join("' '");
    let acquire = |then: &str| {
        first_json_of(
            place.env.tmp.path(),
            &format!("'{bin}' '{flags}' lock acquire memory --json{then}"),
        )
    };
    let release = format!(" && '{bin}' '{flags}' lock release memory");
    assert_eq!(
        acquire(&release)["previous_outcome"],
        serde_json::Value::Null
    );
    assert_eq!(acquire("")["previous_outcome"], "released");
    // That script exited without releasing: its holder abandons the lock.
    wait_until(Duration::from_secs(30), || {
        place.json(&["lock", "status", "memory", "--json"])["held"] == false
    });
    let next = acquire(&release);
    assert_eq!(next["previous_outcome"], "died", "{next}");
    assert_eq!(acquire(&release)["previous_outcome"], "released");
}

#[test]
fn a_script_hold_tells_its_outcome_in_a_baton_dir() {
    a_script_hold_tells_its_outcome(&Place::local());
}

#[test]
fn a_script_hold_tells_its_outcome_on_postgresql() {
    a_script_hold_tells_its_outcome(&Place::pg());
}
