#![cfg(unix)] // reads the checkout with git; Windows runs windows.rs only
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! Every citation of a project document names one that exists in this
//! repository. The code explains a mechanism once, in a design note under
//! `docs/src/design/`, and cites it by its repository path
//! (`docs/src/design/locking.md`, "Fencing tokens"); a note that is moved,
//! renamed or never committed leaves its citations pointing at nothing.
//!
//! What counts as a citation: a path ending in `.md` whose file name is in
//! upper case (the project's documents: a README, CONTRIBUTING, a design
//! note written the old way) or that lies under `docs/src/` (the book and
//! its design notes), in any tracked text file. It must name a file
//! relative to the repository's root or to the citing file's directory.
//! Lower-case names elsewhere (`docs/a.md` in a reservation test) are data,
//! not citations.
//!
//! Also held to the manifests: the crate table of
//! `docs/src/design/architecture.md` (every package, the workspace crates it
//! may depend on, whether it is published), and each publishable crate's
//! README and license files, which `cargo package` ships.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Tokens that look like citations and are not, each with the reason.
const NOT_CITATIONS: &[(&str, &str, &str)] = &[(
    "crates/baton-cli/src/commands/git.rs",
    "CHANGES.md",
    "a file pattern in the example of `baton git init-attributes`",
)];

/// This file: its citations of missing documents are test data.
const THIS_FILE: &str = "crates/baton-cli/tests/design_citations.rs";

/// Dead citations that another change under way removes, per file: the
/// root README is being rewritten into the book (issue 38). An entry that
/// no longer matches a dead citation fails the test, so each goes as soon
/// as it is not needed; any other dead citation in these files still fails.
const PENDING: &[(&str, &[&str])] = &[];

/// Whether `c` is one of the [`PENDING`] dead citations.
fn is_pending(c: &Citation) -> bool {
    PENDING
        .iter()
        .any(|(file, paths)| c.file == *file && paths.contains(&c.path.as_str()))
}

/// One citation: where it is, and the path it names.
#[derive(Debug, PartialEq)]
struct Citation {
    file: String,
    line: usize,
    path: String,
}

/// The `.md` paths cited on one line, in order.
fn cited_paths(line: &str) -> Vec<String> {
    let bytes = line.as_bytes();
    let in_path = |b: u8| b.is_ascii_alphanumeric() || b"_./-".contains(&b);
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = line[from..].find(".md") {
        let end = from + at + 3;
        from = end;
        if bytes
            .get(end)
            .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_')
        {
            continue; // `.mdx`, `.md_file`: not a Markdown file name
        }
        let mut start = end - 3;
        while start > 0 && in_path(bytes[start - 1]) {
            start -= 1;
        }
        let token = &line[start..end];
        if token.starts_with("//") && line[..start].ends_with(':') {
            continue; // a URL: not a file of this repository
        }
        let name = token.rsplit('/').next().unwrap_or(token);
        let stem = &name[..name.len() - 3];
        let upper = stem.starts_with(|c: char| c.is_ascii_uppercase())
            && stem
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_' || c == '-');
        if upper || token.contains("docs/src/") {
            out.push(token.trim_start_matches("./").to_string());
        }
    }
    out
}

/// Every citation in the tracked text files of the repository at `root`
/// (binary and non-UTF-8 files are skipped), and how many files were read.
fn citations(root: &Path) -> (Vec<Citation>, usize) {
    let out = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["ls-files", "-z"])
        .output()
        .expect("run git ls-files");
    assert!(
        out.status.success(),
        "git ls-files in {}: {}",
        root.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut found = Vec::new();
    let mut read = 0;
    for file in String::from_utf8(out.stdout).unwrap().split('\0') {
        if file.is_empty() || file == THIS_FILE {
            continue;
        }
        // A tracked file deleted in the work tree (a change not yet
        // committed) cites nothing.
        let Ok(text) = std::fs::read_to_string(root.join(file)) else {
            continue;
        };
        read += 1;
        for (i, line) in text.lines().enumerate() {
            for path in cited_paths(line) {
                found.push(Citation {
                    file: file.to_string(),
                    line: i + 1,
                    path,
                });
            }
        }
    }
    (found, read)
}

/// The citations of `root` that name no file, except those listed in
/// [`NOT_CITATIONS`].
fn dead(root: &Path, all: Vec<Citation>) -> Vec<Citation> {
    all.into_iter()
        .filter(|c| {
            !NOT_CITATIONS
                .iter()
                .any(|(file, path, _)| c.file == *file && c.path == *path)
        })
        .filter(|c| {
            let dir = Path::new(&c.file).parent().unwrap_or(Path::new(""));
            !root.join(&c.path).is_file() && !root.join(dir).join(&c.path).is_file()
        })
        .collect()
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn every_cited_design_document_exists_in_the_repository() {
    let root = repo_root();
    let (all, read) = citations(&root);
    // The scan itself worked: it read the sources and found the citations
    // that are known to be there (a scan that found nothing cannot pass).
    assert!(
        read > 200,
        "only {read} tracked files read in {}",
        root.display()
    );
    let cites_locking = all
        .iter()
        .any(|c| c.path == "docs/src/design/locking.md" && c.file.starts_with("crates/"));
    let dead = dead(&root, all);
    let (pending, dead): (Vec<_>, Vec<_>) = dead.into_iter().partition(is_pending);
    let report: Vec<String> = dead
        .iter()
        .map(|c| {
            format!(
                "{}:{}: cites {}, which is not in the repository",
                c.file, c.line, c.path
            )
        })
        .collect();
    assert!(report.is_empty(), "dead citations:\n{}", report.join("\n"));
    assert!(
        cites_locking,
        "no citation of docs/src/design/locking.md found in crates/"
    );
    let stale: Vec<String> = PENDING
        .iter()
        .flat_map(|(file, paths)| paths.iter().map(move |p| (*file, *p)))
        .filter(|(file, path)| !pending.iter().any(|c| c.file == *file && c.path == *path))
        .map(|(file, path)| format!("{file}: {path}"))
        .collect();
    assert!(
        stale.is_empty(),
        "no longer dead, remove from PENDING:\n{}",
        stale.join("\n")
    );
}

#[test]
fn a_citation_of_a_missing_document_is_reported_with_its_file_and_line() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    std::fs::create_dir_all(root.join("docs/src/design")).unwrap();
    std::fs::create_dir_all(root.join("crates/x/src")).unwrap();
    std::fs::write(root.join("docs/src/design/kept.md"), "# kept\n").unwrap();
    std::fs::write(root.join("crates/x/NOTES.md"), "# notes\n").unwrap();
    // The missing names are built at run time, so this file cites nothing
    // missing itself.
    let gone = format!("{}.md", "GONE");
    let moved = format!("docs/src/design/{}.md", "moved");
    std::fs::write(
        root.join("crates/x/src/lib.rs"),
        format!(
            "//! See `docs/src/design/kept.md`, \"Why\".\n\
             //! Old: see {gone}, decision 3.\n\
             //! Next to the crate: `crates/x/NOTES.md`; from here: ../NOTES.md.\n\
             //! Test data, not a citation: docs/a.md, src/*.md.\n\
             //! The book: [the note]({moved}#why); https://example.com/{gone}\n"
        ),
    )
    .unwrap();
    git(root, &["init", "-q"]);
    git(root, &["add", "."]);
    let (all, read) = citations(root);
    assert_eq!(read, 3);
    let dead = dead(root, all);
    assert_eq!(
        dead,
        vec![
            Citation {
                file: "crates/x/src/lib.rs".into(),
                line: 2,
                path: gone.clone(),
            },
            Citation {
                file: "crates/x/src/lib.rs".into(),
                line: 5,
                path: moved,
            },
        ]
    );
}

/// A workspace package as its `Cargo.toml` says: its name, the workspace
/// crates it depends on (`[dependencies]`, also per target; not
/// dev-dependencies), and whether it may be published.
#[derive(Debug)]
struct Package {
    dir: PathBuf,
    name: String,
    deps: std::collections::BTreeSet<String>,
    published: bool,
}

/// The workspace's packages (`crates/*` and `bench`), read from their
/// manifests: a line-level reading that is enough for these files, and
/// checked (every package has a name, the graph is not empty).
fn packages(root: &Path) -> Vec<Package> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("Cargo.toml").is_file())
        .collect();
    dirs.push(root.join("bench"));
    dirs.sort();
    let mut out = Vec::new();
    for dir in dirs {
        let text = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        let (mut section, mut name, mut published) = (String::new(), None, true);
        let mut deps = std::collections::BTreeSet::new();
        for line in text.lines().map(str::trim) {
            if line.starts_with('[') {
                section = line.to_string();
                continue;
            }
            let key = line.split(['=', ' ', '.']).next().unwrap_or("");
            if section == "[package]" && key == "name" {
                name = line.split('"').nth(1).map(str::to_string);
            }
            if section == "[package]" && key == "publish" && line.ends_with("false") {
                published = false;
            }
            let runtime = section == "[dependencies]"
                || (section.starts_with("[target.") && section.ends_with(".dependencies]"));
            if runtime && (key == "baton" || key.starts_with("baton-")) {
                deps.insert(key.to_string());
            }
        }
        let name = name.unwrap_or_else(|| panic!("no package name in {}", dir.display()));
        out.push(Package {
            dir,
            name,
            deps,
            published,
        });
    }
    assert!(out.len() > 10, "{out:?}");
    out
}

/// The rows of the crate table of `docs/src/design/architecture.md`:
/// (crate, the crates it may depend on, published).
fn architecture_rows(root: &Path) -> Vec<(String, std::collections::BTreeSet<String>, bool)> {
    let path = root.join("docs/src/design/architecture.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let section = text
        .split("\n## ")
        .find(|s| s.starts_with("The crates"))
        .unwrap_or_else(|| panic!("{}: no section \"The crates\"", path.display()));
    let ticked = |cell: &str| -> Vec<String> {
        cell.split('`')
            .skip(1)
            .step_by(2)
            .filter(|t| *t == "baton" || t.starts_with("baton-"))
            .map(str::to_string)
            .collect()
    };
    let mut rows = Vec::new();
    for line in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // "", crate, holds, may depend on, published, ""
        assert_eq!(cells.len(), 6, "{}: malformed row: {line}", path.display());
        let name = ticked(cells[1]).into_iter().next().unwrap_or_default();
        rows.push((
            name,
            ticked(cells[3]).into_iter().collect(),
            cells[4].starts_with("yes"),
        ));
    }
    rows
}

#[test]
fn the_architecture_lists_every_crate_with_its_real_dependencies() {
    let root = repo_root();
    let packages = packages(&root);
    let rows = architecture_rows(&root);
    let mut problems = Vec::new();
    for p in &packages {
        match rows.iter().find(|(name, _, _)| *name == p.name) {
            None => problems.push(format!("{} is not in the table", p.name)),
            Some((_, deps, published)) => {
                if *deps != p.deps {
                    problems.push(format!(
                        "{}: the table says it may depend on {deps:?}, its Cargo.toml on {:?}",
                        p.name, p.deps
                    ));
                }
                if *published != p.published {
                    problems.push(format!(
                        "{}: the table says published {published}, its Cargo.toml {}",
                        p.name, p.published
                    ));
                }
            }
        }
    }
    for (name, _, _) in &rows {
        if !packages.iter().any(|p| p.name == *name) {
            problems.push(format!("{name} is in the table but is no package"));
        }
    }
    assert!(
        problems.is_empty(),
        "docs/src/design/architecture.md, \"The crates\", does not match the manifests:\n{}",
        problems.join("\n")
    );
}

#[test]
fn every_publishable_crate_ships_its_readme_and_both_licenses() {
    let root = repo_root();
    let mut problems = Vec::new();
    let mut checked = 0;
    for p in packages(&root).iter().filter(|p| p.published) {
        checked += 1;
        let manifest = std::fs::read_to_string(p.dir.join("Cargo.toml")).unwrap();
        if !manifest
            .lines()
            .any(|l| l.trim() == "readme = \"README.md\"")
        {
            problems.push(format!(
                "{}: Cargo.toml lacks readme = \"README.md\"",
                p.name
            ));
        }
        let readme = std::fs::read_to_string(p.dir.join("README.md")).unwrap_or_default();
        if !readme.starts_with(&format!("# {}\n", p.name)) {
            problems.push(format!(
                "{}: README.md missing or not titled with the crate",
                p.name
            ));
        }
        for license in ["LICENSE-MIT", "LICENSE-APACHE"] {
            let ours = std::fs::read(root.join(license)).unwrap();
            if std::fs::read(p.dir.join(license)).ok() != Some(ours) {
                problems.push(format!(
                    "{}: {license} missing or not the same as the repository's",
                    p.name
                ));
            }
        }
    }
    assert!(checked >= 10, "only {checked} publishable crates found");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
