#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
//! Python for the service's tests: the venv of `scripts/test-venv`, and
//! scripts run with it.

#![allow(dead_code)] // each test file uses a different subset

use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// The tests' Python (`scripts/test-venv`) with `packages` installed.
pub fn python(packages: &[&str]) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/test-venv");
    let out = Command::new(script)
        .args(packages)
        .output()
        .expect("run scripts/test-venv");
    assert!(
        out.status.success(),
        "scripts/test-venv {packages:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Runs `code` with the venv's python and `args`; returns its stdout as JSON.
pub fn run_python(python: &str, code: &str, args: &[&str]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.py");
    std::fs::write(&script, code).unwrap();
    let out = Command::new(python)
        .arg(&script)
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "python failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("python printed no JSON ({e}): {stdout}"))
}
