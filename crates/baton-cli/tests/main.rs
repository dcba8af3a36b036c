#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! The integration tests of the `baton` binary, in one test binary (one link
//! instead of 45, on a 2-core CI): each file is a module, the shared
//! helpers (`common`, `serve_common`, `pg_common`, `serve_python`) are modules
//! the others `use`. A new test file must be declared here (the crate sets
//! `autotests = false`); the test below fails if one is not.

mod acquire_containment;
mod acquire_fork_exit;
mod bad_input;
mod cli_edge_inputs;
mod common;
mod containment;
mod contract;
mod design_citations;
mod diagnostics;
mod doc_links;
mod doctor;
mod events;
mod generated_docs;
mod git;
mod git_branch_names;
mod git_issue_branch;
mod git_landing;
mod git_push_edge_cases;
mod git_workflows;
mod go_example;
mod group_order;
mod groups;
mod lock_break_stubborn;
mod lock_cmds;
mod lock_faults;
mod mcp;
mod names;
mod namespace_cleanup;
mod namespaces;
mod pg_common;
mod pg_groups;
mod pg_guardian;
mod pg_locks;
mod pg_mcp;
mod pg_previous_holder;
mod pg_push_queue;
mod pg_reserve;
mod pg_tls;
mod previous_holder;
mod previous_outcome;
mod readme;
mod reserve;
mod reserve_guard;
mod run;
mod schemas;
mod serve;
mod serve_activation;
mod serve_branch_refs;
mod serve_branch_shared;
mod serve_cli;
mod serve_common;
mod serve_compat;
mod serve_dashboard;
mod serve_disk;
mod serve_escape;
mod serve_group_commit;
mod serve_group_order;
mod serve_input;
mod serve_job_isolation;
mod serve_lifecycle;
mod serve_lifecycle_jobs;
mod serve_openapi;
mod serve_pg_guardian;
mod serve_postgres;
mod serve_postgres_cluster;
mod serve_python;
mod serve_races_and_inputs;
mod serve_reset_branch;
mod serve_resources;
mod serve_schemathesis;
mod serve_session;
mod serve_shutdown;
mod serve_startup;
mod serve_store_faults;
mod serve_trust;
mod shared_dir;
mod skip_any_mode;
mod state;
mod state_faults;
// Windows only (its tests run baton.exe under wine); the files above are unix.
mod windows;

#[test]
fn every_test_file_is_declared_here() {
    baton_testkit::assert_test_files_declared(env!("CARGO_MANIFEST_DIR"));
}
