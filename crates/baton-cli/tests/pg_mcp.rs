#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
//! `baton mcp` with its reservations on PostgreSQL (`BATON_BACKEND`),
//! driven by the official Python SDK (the scripts of tests/mcp_python, as
//! in mcp.rs): the same behaviour as in the baton dir, and the rows are in
//! the database, not in the baton dir.

use crate::common::Env;
use crate::mcp::{repo, script_with};
use crate::pg_common::TestDb;

/// Runs `script` with every `baton mcp` on `db`; checks that reservations
/// were made there (the space's token moved) and not in the baton dir.
fn on_postgres(script: &str, args: &[&str]) -> serde_json::Value {
    let db = TestDb::new();
    let env = Env::new();
    let repo = repo(&env);
    let url = db.url();
    let seen = script_with(&env, &repo, script, args, &[("BATON_BACKEND", &url)]);
    let tokens = db.query("SELECT token FROM baton_reservation_spaces");
    assert_eq!(tokens.len(), 1, "one repository: {tokens:?}");
    let token: u64 = tokens[0][0].as_deref().unwrap().parse().unwrap();
    assert!(token >= 2, "grants were made on the database: {tokens:?}");
    assert!(
        !env.dir.join("reservations").exists(),
        "reservations were made in the baton dir"
    );
    seen
}

#[test]
fn mcp_sessions_on_postgres_exclude_overlap_not_disjoint_and_waiters_get_progress() {
    let seen = on_postgres("reserve.py", &[]);
    assert!(seen["max_gap_s"].as_f64().unwrap() < 1.0, "{seen}");
    assert_eq!(seen["conflict"]["holder"]["agent"], "alice", "{seen}");
}

#[test]
fn kill_9_of_an_mcp_server_on_postgres_frees_its_reservation_and_says_it_died() {
    let seen = on_postgres("kill.py", &["server"]);
    assert_eq!(seen["out"]["previous_holder_died"], true, "{seen}");
    println!("freed after {} s", seen["freed_after_s"]);
}

#[test]
fn eight_mcp_sessions_on_postgres_are_served_in_arrival_order_one_at_a_time() {
    let seen = on_postgres("fifo.py", &[]);
    assert_eq!(seen["order"], serde_json::json!([0, 1, 2, 3, 4, 5, 6, 7]));
    let spans = seen["intervals"].as_array().unwrap();
    for w in spans.windows(2) {
        assert!(w[0][1].as_f64() <= w[1][0].as_f64(), "overlap: {seen}");
    }
}
