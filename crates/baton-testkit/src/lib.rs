//! Test support shared by baton's test suites (a dev-dependency only).
//!
//! - [`child`] / [`child_role`]: run this very test binary as a child process
//!   playing a role, for tests that need real separate processes (SIGKILL,
//!   kernel locks held by another process).
//! - [`expect_line`]: read a child's output until a marker appears.
//! - [`Immutable`]: a directory made immutable with `chattr +i`.
//! - [`Rng`]: a small seeded generator whose seed is printed for replay.
//! - [`pg`]: fresh PostgreSQL databases on the machine's server.
//! - [`assert_test_files_declared`]: a crate whose integration tests are one
//!   binary declares every test file.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, clippy::expect_used)] // test support: a failed unwrap is a failed test

pub mod pg;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The role a child process was started with by [`child`].
pub struct Role {
    /// The role's name.
    pub name: String,
    /// The directory passed to [`child`].
    pub dir: PathBuf,
    /// The arguments passed to [`child`].
    pub args: Vec<String>,
}

/// A command that runs this test binary's `entry` test (which calls
/// [`child_role`]) as a child process playing `role`. The caller sets stdio
/// and spawns it.
pub fn child(entry: &str, role: &str, dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(std::env::current_exe().expect("test binary path"));
    // The entry is marked #[ignore] so a normal run does not count it as a test.
    c.args([
        "--exact",
        entry,
        "--include-ignored",
        "--nocapture",
        "--test-threads",
        "1",
    ])
    .env("BATON_TEST_ROLE", role)
    .env("BATON_TEST_DIR", dir)
    .env("BATON_TEST_ARGS", args.join("\u{1f}"))
    .stderr(Stdio::inherit());
    c
}

/// The role this process was started with, or `None` in a normal test run.
pub fn child_role() -> Option<Role> {
    let name = std::env::var("BATON_TEST_ROLE").ok()?;
    Some(Role {
        name,
        dir: std::env::var_os("BATON_TEST_DIR")
            .expect("BATON_TEST_DIR")
            .into(),
        args: std::env::var("BATON_TEST_ARGS")
            .expect("BATON_TEST_ARGS")
            .split('\u{1f}')
            .map(String::from)
            .collect(),
    })
}

/// Reads the child's stdout until a line contains `marker`; returns what
/// follows the marker on that line, trimmed. (libtest prints
/// "test NAME ... " before a child's first line, so the marker may not start
/// the line.)
pub fn expect_line(child: &mut Child, marker: &str) -> String {
    let mut reader = BufReader::new(child.stdout.as_mut().expect("child stdout piped"));
    loop {
        let mut line = String::new();
        let n = reader.read_line(&mut line).unwrap();
        assert!(n > 0, "child ended before printing {marker:?}");
        if let Some(at) = line.find(marker) {
            return line[at + marker.len()..].trim().to_string();
        }
    }
}

/// A directory made immutable with `chattr +i` (which stops even root from
/// creating files in it), made mutable again when dropped.
pub struct Immutable(PathBuf);

impl Immutable {
    /// `None` where `chattr +i` does not work (not root, or a filesystem
    /// without the attribute).
    pub fn set(dir: &Path) -> Option<Immutable> {
        let ok = Command::new("chattr")
            .arg("+i")
            .arg(dir)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Immutable(dir.to_path_buf()))
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        let _ = Command::new("chattr").arg("-i").arg(&self.0).status();
    }
}

/// xorshift64*, seeded from the clock or `BATON_TEST_SEED` (print `seed` for replay).
pub struct Rng {
    /// The seed, to print so a failure can be replayed.
    pub seed: u64,
    state: u64,
}

impl Rng {
    /// A generator seeded from `BATON_TEST_SEED`, else the clock.
    pub fn seeded() -> Rng {
        let seed = std::env::var("BATON_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
                    | 1
            });
        Rng { seed, state: seed }
    }

    /// A number in [0, 1).
    pub fn unit(&mut self) -> f64 {
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        let x = self.state.wrapping_mul(0x2545_f491_4f6c_dd1d);
        (x >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Panics unless every file `tests/NAME.rs` and directory `tests/NAME/` of
/// the crate at `manifest_dir` is declared as `mod NAME;` in
/// `tests/main.rs`. For the crates whose integration tests are one binary
/// (`autotests = false`, `[[test]] path = "tests/main.rs"`): a new test file
/// not declared there would never be built or run.
pub fn assert_test_files_declared(manifest_dir: &str) {
    let tests = Path::new(manifest_dir).join("tests");
    let main = std::fs::read_to_string(tests.join("main.rs")).unwrap();
    let declared: Vec<&str> = main
        .lines()
        .filter_map(|l| l.trim().strip_prefix("mod ")?.strip_suffix(';'))
        .collect();
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(&tests).unwrap() {
        let path = entry.unwrap().path();
        let name = match path.extension() {
            Some(ext) if ext == "rs" => path.file_stem(),
            None if path.is_dir() && path.join("mod.rs").exists() => path.file_name(),
            _ => None,
        };
        let Some(name) = name.and_then(|n| n.to_str()) else {
            continue;
        };
        if name != "main" && !declared.contains(&name) {
            missing.push(name.to_string());
        }
    }
    assert!(
        missing.is_empty(),
        "{}: declare {missing:?} with `mod NAME;` (autotests is off)",
        tests.join("main.rs").display()
    );
}

/// Makes sure the program `bin` is on PATH, installing Debian's `package`
/// with apt-get when it is missing (as root, as on CI: a test's tools are
/// installed by the test, not by hand). Concurrent callers wait for each
/// other on a lock file. Panics with the reason when it cannot.
pub fn ensure_debian_package(bin: &str, package: &str) {
    if let Err(why) = try_debian_package(bin, package) {
        panic!("{why}");
    }
}

/// [`ensure_debian_package`] for a test that can do without `bin`: the
/// reason it cannot be had (no apt-get, not root, no network), for the test
/// to print before it returns.
pub fn try_debian_package(bin: &str, package: &str) -> Result<(), String> {
    let lock = std::env::temp_dir().join("baton-tests-apt.lock");
    let script = format!(
        "command -v {bin} >/dev/null 2>&1 && exit 0; \
         apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q {package}"
    );
    let out = std::process::Command::new("flock")
        .arg(&lock)
        .args(["sh", "-c", &script])
        .output()
        .map_err(|e| format!("cannot install {package} (flock): {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "cannot install {package} with apt-get (the test needs {bin}):\n{}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}
