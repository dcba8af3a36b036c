#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! Regression tests from a hostile review of `baton serve`: races and
//! inputs a careless or malicious client can produce, each against a real
//! service running real commands.

mod serve_common;

use serde_json::json;
use serve_common::Server;

/// A cancel that lands between the store's claim of a job and the job
/// becoming live on this node used to answer 409 `not_on_this_node` and
/// leave the job running. Every cancel of a job just submitted must
/// cancel it.
#[test]
fn a_cancel_racing_with_the_claim_always_cancels() {
    let s = Server::start(
        r#"
max_concurrency = 4
max_queue_depth = 50
grace = "1s"
[templates.sleep]
command = ["sleep", "30"]
"#,
        &[],
    );
    for _ in 0..300 {
        let id = s.submit(json!({"template": "sleep"}));
        let (code, v) = s.delete(&format!("/v1/jobs/{id}"));
        assert_eq!(code, 200, "cancel of {id}: {v}");
        assert_eq!(v["status"], "cancelled", "cancel of {id}: {v}");
    }
}
