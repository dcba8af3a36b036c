//! What the test files share: a baton dir in a temp dir, an edit function
//! that counts, and the temp files an edit leaves.

use std::fs;
use std::path::{Path, PathBuf};

use baton_lock::BatonDir;

pub fn setup() -> (tempfile::TempDir, BatonDir) {
    let t = tempfile::tempdir().unwrap();
    let d = BatonDir::open(t.path().join("baton")).unwrap();
    (t, d)
}

pub type Never = std::convert::Infallible;

/// Adds 1 to `{"n": N}` (a missing file counts as 0).
pub fn increment(old: Option<&[u8]>) -> Result<Option<Vec<u8>>, Never> {
    let n = old.map_or(0, |b| {
        serde_json::from_slice::<serde_json::Value>(b).unwrap()["n"]
            .as_u64()
            .unwrap()
    });
    Ok(Some(format!("{{\"n\":{}}}\n", n + 1).into_bytes()))
}

pub fn counter(path: &Path) -> u64 {
    let v: serde_json::Value = serde_json::from_slice(&fs::read(path).unwrap()).unwrap();
    v["n"].as_u64().unwrap()
}

pub fn temps_of(dir: &Path, name: &str) -> Vec<PathBuf> {
    let prefix = format!(".{name}.baton-tmp-");
    fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect()
}
