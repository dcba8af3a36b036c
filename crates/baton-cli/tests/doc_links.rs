#![cfg(unix)] // the documentation is checked once, on Linux
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! No dead relative link in the documentation (issue 38): every link of
//! README.md, CONTRIBUTING.md, CHANGELOG.md and the book (`docs/src/**/*.md`)
//! that is not a URL names a file or directory that exists, and its
//! `#anchor`, when it has one and leads to a Markdown page, names a heading
//! of that page (as GitHub and mdBook make them: lowercase, spaces to `-`,
//! punctuation dropped, a repeated heading numbered `-1`, `-2`, ...).
//! Links inside code (fenced blocks, inline code) are not links.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Component, Path, PathBuf};

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The text outside code: fenced blocks become empty lines (so line numbers
/// stay right) and inline code spans become spaces.
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fence: Option<String> = None;
    for line in text.lines() {
        let t = line.trim_start();
        match &fence {
            Some(f) => {
                if t.starts_with(f.as_str()) && t.trim_end().chars().all(|c| c == '`' || c == '~') {
                    fence = None;
                }
                out.push('\n');
                continue;
            }
            None => {
                if t.starts_with("```") || t.starts_with("~~~") {
                    let ch = t.chars().next().unwrap_or('`');
                    let n = t.chars().take_while(|&c| c == ch).count();
                    fence = Some(std::iter::repeat_n(ch, n).collect());
                    out.push('\n');
                    continue;
                }
            }
        }
        // Inline code: a run of backticks up to the same run.
        let chars: Vec<char> = line.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            if chars[i] == '`' {
                let n = chars[i..].iter().take_while(|&&c| c == '`').count();
                let close = (i + n..chars.len()).find(|&j| {
                    chars[j..].iter().take_while(|&&c| c == '`').count() == n
                        && (j == 0 || chars[j - 1] != '`')
                });
                if let Some(j) = close {
                    out.extend(std::iter::repeat_n(' ', j + n - i));
                    i = j + n;
                    continue;
                }
            }
            out.push(chars[i]);
            i += 1;
        }
        out.push('\n');
    }
    out
}

/// The links of a page's prose: (line, target) for `[text](target)` and
/// `![alt](target)` (the text may span lines) and `[label]: target`.
fn links(prose: &str) -> Vec<(usize, String)> {
    let chars: Vec<char> = prose.chars().collect();
    let mut out = Vec::new();
    let line_of = |pos: usize| chars[..pos].iter().filter(|&&c| c == '\n').count() + 1;
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == ']' && chars.get(i + 1) == Some(&'(') {
            let start = i + 2;
            let mut j = start;
            let mut depth = 0;
            while j < chars.len() && !(chars[j] == ')' && depth == 0) && chars[j] != '\n' {
                match chars[j] {
                    '(' => depth += 1,
                    ')' => depth -= 1,
                    _ => {}
                }
                j += 1;
            }
            if j < chars.len() && chars[j] == ')' {
                let target: String = chars[start..j].iter().collect();
                let target = target.split_whitespace().next().unwrap_or("").to_string();
                out.push((line_of(i), target.trim_matches(['<', '>']).to_string()));
            }
            i = j;
            continue;
        }
        i += 1;
    }
    for (n, line) in prose.lines().enumerate() {
        let t = line.trim_start();
        if let Some(rest) = t.strip_prefix('[') {
            if let Some(k) = rest.find("]: ") {
                out.push((n + 1, rest[k + 3..].trim().to_string()));
            }
        }
    }
    out
}

/// The anchor GitHub and mdBook give a heading's text.
fn slug(heading: &str) -> String {
    // Links in a heading count by their text.
    let mut text = String::new();
    let mut rest = heading;
    while let Some(open) = rest.find('[') {
        text.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match (after.find("]("), after.find(')')) {
            (Some(close), Some(end)) if close < end => {
                text.push_str(&after[..close]);
                rest = &after[end + 1..];
            }
            _ => {
                text.push('[');
                rest = after;
            }
        }
    }
    text.push_str(rest);
    text.chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '-' || c == '_' {
                Some(c.to_lowercase().collect::<String>())
            } else if c == ' ' {
                Some("-".to_string())
            } else {
                None
            }
        })
        .collect()
}

/// The anchors of a page: its ATX headings' slugs, repeated ones numbered.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut out = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with("```") || t.starts_with("~~~") {
            fenced = !fenced;
            continue;
        }
        if fenced || !t.starts_with('#') {
            continue;
        }
        let level = t.chars().take_while(|&c| c == '#').count();
        let rest = &t[level..];
        if level > 6 || !(rest.is_empty() || rest.starts_with(' ')) {
            continue;
        }
        let base = slug(rest.trim().trim_end_matches('#').trim());
        let mut s = base.clone();
        let mut n = 0;
        while seen.contains(&s) {
            n += 1;
            s = format!("{base}-{n}");
        }
        seen.insert(s.clone());
        out.insert(s);
    }
    out
}

/// The pages checked, relative to the root.
fn pages() -> Vec<String> {
    fn walk(dir: &Path, rel: &str, out: &mut Vec<String>) {
        for e in fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_str().unwrap().to_string();
            let rel = format!("{rel}/{name}");
            if p.is_dir() {
                walk(&p, &rel, out);
            } else if name.ends_with(".md") {
                out.push(rel);
            }
        }
    }
    let mut out: Vec<String> = ["README.md", "CONTRIBUTING.md", "CHANGELOG.md"]
        .iter()
        .filter(|p| root().join(p).exists())
        .map(|p| p.to_string())
        .collect();
    walk(&root().join("docs/src"), "docs/src", &mut out);
    out.sort();
    out
}

/// `base/rel` with `.` and `..` resolved lexically.
fn join(base: &Path, rel: &str) -> PathBuf {
    let mut out = PathBuf::new();
    for c in base.join(rel).components() {
        match c {
            // Above the root stays visible, so it can be refused.
            Component::ParentDir if out.file_name().is_some() => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// Every dead relative link of the pages whose text is given, as
/// `page:line: target (reason)`. `read` gives a page's text by its path
/// relative to the root, `exists` whether a path (relative to the root)
/// exists.
fn dead_links(
    pages: &[(String, String)],
    read: &dyn Fn(&Path) -> Option<String>,
    exists: &dyn Fn(&Path) -> bool,
) -> (Vec<String>, usize) {
    let mut dead = Vec::new();
    let mut checked = 0;
    for (page, text) in pages {
        let dir = Path::new(page).parent().unwrap_or(Path::new(""));
        for (line, target) in links(&prose(text)) {
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target.as_str(), None),
            };
            let file = if path.is_empty() {
                PathBuf::from(page)
            } else {
                join(dir, path)
            };
            if file.starts_with("..") || file.is_absolute() {
                dead.push(format!("{page}:{line}: {target} (outside the repository)"));
                continue;
            }
            if !exists(&file) {
                dead.push(format!("{page}:{line}: {target} (no such file)"));
                continue;
            }
            if let Some(anchor) = anchor {
                if file.extension().is_some_and(|e| e == "md") {
                    let Some(body) = read(&file) else {
                        dead.push(format!("{page}:{line}: {target} (unreadable)"));
                        continue;
                    };
                    if !anchors(&body).contains(anchor) {
                        dead.push(format!("{page}:{line}: {target} (no heading #{anchor})"));
                    }
                }
            }
        }
    }
    (dead, checked)
}

#[test]
fn no_dead_relative_link_or_anchor_in_the_documentation() {
    let root = root();
    let texts: Vec<(String, String)> = pages()
        .into_iter()
        .map(|p| {
            let t = fs::read_to_string(root.join(&p)).unwrap();
            (p, t)
        })
        .collect();
    assert!(texts.len() > 20, "found only {} pages", texts.len());
    let (dead, checked) = dead_links(&texts, &|p| fs::read_to_string(root.join(p)).ok(), &|p| {
        root.join(p).exists()
    });
    assert!(checked > 150, "checked only {checked} links");
    assert!(
        dead.is_empty(),
        "{} dead links:\n{}",
        dead.len(),
        dead.join("\n")
    );
}

/// The checker finds what it must, on pages made up here: a missing file, a
/// missing anchor (in another page and in the same page), a link that leaves
/// the repository; and not a link shown in code, a URL, or a good anchor of
/// a repeated heading.
#[test]
fn the_link_checker_finds_dead_links_and_anchors() {
    let a = "# A\n\n## Same\n\n## Same\n\nSee [b](b.md#the-part), [gone](gone.md), [here](#nope),\n[twice](#same-1), [out](../../x.md), [web](https://example.com/x.md),\n`[code](gone.md)` and\n\n```md\n[fenced](gone.md)\n```\n\n[ref]: b.md#missing\n";
    let b = "# B\n\n## The `part`\n";
    let pages = vec![
        ("docs/a.md".to_string(), a.to_string()),
        ("docs/b.md".to_string(), b.to_string()),
    ];
    let read = |p: &Path| match p.to_str() {
        Some("docs/a.md") => Some(a.to_string()),
        Some("docs/b.md") => Some(b.to_string()),
        _ => None,
    };
    let exists = |p: &Path| matches!(p.to_str(), Some("docs/a.md" | "docs/b.md"));
    let (dead, checked) = dead_links(&pages, &read, &exists);
    assert_eq!(checked, 6, "{dead:?}");
    assert_eq!(
        dead,
        [
            "docs/a.md:7: gone.md (no such file)",
            "docs/a.md:7: #nope (no heading #nope)",
            "docs/a.md:8: ../../x.md (outside the repository)",
            "docs/a.md:15: b.md#missing (no heading #missing)",
        ]
    );
}

/// Every page of the book is in its table of contents (mdBook builds only
/// what `SUMMARY.md` lists, and says nothing of the rest).
#[test]
fn every_page_of_the_book_is_in_its_summary() {
    let summary = fs::read_to_string(root().join("docs/src/SUMMARY.md")).unwrap();
    let listed: BTreeSet<String> = links(&prose(&summary))
        .into_iter()
        .map(|(_, target)| format!("docs/src/{target}"))
        .collect();
    assert!(listed.len() > 30, "{listed:?}");
    let missing: Vec<String> = pages()
        .into_iter()
        .filter(|p| p.starts_with("docs/src/") && p != "docs/src/SUMMARY.md")
        .filter(|p| !listed.contains(p))
        .collect();
    assert!(
        missing.is_empty(),
        "not in docs/src/SUMMARY.md: {missing:?}"
    );
}
