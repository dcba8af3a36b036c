//! Reservation patterns: normalized repo-relative paths and globs, what a
//! pattern covers, and whether two patterns may cover one file.
//!
//! A pattern is a sequence of `/`-separated segments, each a literal name, a
//! one-segment glob (`*.ts`, `a?c`, `[ab]x`, `{a,b}`) or `**` (zero or more
//! segments). A pattern covers every path that one of its matches is a
//! prefix of (segment-wise): a path covers itself and everything below it,
//! and so does each path a glob matches. The empty pattern is the whole
//! repository.

use std::fmt;

use globset::{GlobBuilder, GlobMatcher};
use serde::{Deserialize, Serialize};

/// A normalized repo-relative path (covers itself and everything below it)
/// or glob (`src/**/*.ts`, `docs/*.md`, `?`, `[...]`). `""` is the whole
/// repository (given as `.` or the root itself).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Pattern(String);

/// Characters that make a segment a glob (and `\`, glob escapes).
const META: &[char] = &['*', '?', '[', ']', '{', '}', '\\'];

/// One segment of a pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seg<'a> {
    Literal(&'a str),
    Glob(&'a str),
    AnyDepth,
}

fn seg(s: &str) -> Seg<'_> {
    if s == "**" {
        Seg::AnyDepth
    } else if s.contains(META) {
        Seg::Glob(s)
    } else {
        Seg::Literal(s)
    }
}

/// Compiles a glob the way patterns use it: `*`, `?` and `[...]` never
/// match `/`, `**` spans segments.
fn compile(glob: &str) -> Result<GlobMatcher, globset::Error> {
    Ok(GlobBuilder::new(glob)
        .literal_separator(true)
        .backslash_escape(true)
        .empty_alternates(true)
        .build()?
        .compile_matcher())
}

impl Pattern {
    /// Builds a pattern from segments already checked by the caller (no
    /// `.`, `..` or empty segments); refuses a malformed glob.
    pub(crate) fn from_segments(segments: &[&str]) -> Result<Pattern, String> {
        let text = segments.join("/");
        for s in segments {
            if s.contains("**") && *s != "**" {
                return Err(format!(
                    "'**' must be a whole path segment (as in 'src/**/*.ts'), not part of '{s}'"
                ));
            }
        }
        if text.contains(META) {
            compile(&text).map_err(|e| format!("not a valid glob: {}", e.kind()))?;
        }
        Ok(Pattern(text))
    }

    /// The normalized text: `/`-separated, relative to the repository
    /// root, `""` for the whole repository.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether it contains glob syntax (else it is a plain path).
    pub fn is_glob(&self) -> bool {
        self.0.contains(META)
    }

    fn segments(&self) -> Vec<Seg<'_>> {
        if self.0.is_empty() {
            return Vec::new();
        }
        self.0.split('/').map(seg).collect()
    }

    /// Whether some file could be covered by both (conservative: may say
    /// yes when no file can, never no when one can).
    pub fn overlaps(&self, other: &Pattern) -> bool {
        overlap(&self.segments(), &other.segments())
    }

    /// Whether this pattern covers the repo-relative file path `rel`
    /// (`/`-separated): `rel`, or a directory above it, is the path or
    /// matches the glob.
    pub fn covers(&self, rel: &str) -> bool {
        let rel = normalize_rel(rel);
        if self.0.is_empty() {
            return true;
        }
        if !self.is_glob() {
            return rel == self.0
                || (rel.len() > self.0.len()
                    && rel.starts_with(self.0.as_str())
                    && rel.as_bytes()[self.0.len()] == b'/');
        }
        let Ok(matcher) = compile(&self.0) else {
            // Checked at construction; a record edited by hand covers
            // everything rather than nothing.
            return true;
        };
        if matcher.is_match(&rel) {
            return true;
        }
        rel.match_indices('/')
            .any(|(i, _)| matcher.is_match(&rel[..i]))
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            f.write_str(".")
        } else {
            f.write_str(&self.0)
        }
    }
}

/// `rel` without `./` segments, empty segments or a trailing `/`.
fn normalize_rel(rel: &str) -> String {
    let rel = rel.replace('\\', "/");
    rel.split('/')
        .filter(|s| !s.is_empty() && *s != ".")
        .collect::<Vec<_>>()
        .join("/")
}

/// Whether the languages of `a` and `b` hold two paths one of which is a
/// segment-wise prefix of the other (then a file below the longer is
/// covered by both). `table[i][j]`: the rests `a[i..]` and `b[j..]` can.
fn overlap(a: &[Seg<'_>], b: &[Seg<'_>]) -> bool {
    let (n, m) = (a.len(), b.len());
    // Filled from the ends: a rest that is exhausted is a prefix of anything.
    let mut table = vec![vec![false; m + 1]; n + 1];
    for i in (0..=n).rev() {
        for j in (0..=m).rev() {
            table[i][j] = if i == n || j == m {
                true
            } else {
                match (a[i], b[j]) {
                    // `**` matches nothing more, or absorbs what the other
                    // side's segment produces (`**` too) and stays.
                    (Seg::AnyDepth, _) => table[i + 1][j] || table[i][j + 1],
                    (_, Seg::AnyDepth) => table[i][j + 1] || table[i + 1][j],
                    (x, y) => segments_overlap(x, y) && table[i + 1][j + 1],
                }
            };
        }
    }
    table[0][0]
}

/// Whether one name could match both segments.
fn segments_overlap(a: Seg<'_>, b: Seg<'_>) -> bool {
    match (a, b) {
        (Seg::Literal(x), Seg::Literal(y)) => x == y,
        (Seg::Literal(x), Seg::Glob(g)) | (Seg::Glob(g), Seg::Literal(x)) => {
            compile(g).map_or(true, |m| m.is_match(x))
        }
        (Seg::Glob(x), Seg::Glob(y)) => {
            let (px, py) = (literal_prefix(x), literal_prefix(y));
            let (sx, sy) = (literal_suffix(x), literal_suffix(y));
            (px.starts_with(py) || py.starts_with(px)) && (sx.ends_with(sy) || sy.ends_with(sx))
        }
        // `**` is handled by `overlap`.
        _ => true,
    }
}

/// The characters before the first glob character.
fn literal_prefix(g: &str) -> &str {
    g.find(META).map_or(g, |i| &g[..i])
}

/// The characters after the last glob character.
fn literal_suffix(g: &str) -> &str {
    g.rfind(META).map_or(g, |i| &g[i + 1..])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Pattern {
        let segs: Vec<&str> = if s.is_empty() {
            Vec::new()
        } else {
            s.split('/').collect()
        };
        Pattern::from_segments(&segs).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn glob_prefix_and_suffix() {
        assert_eq!(literal_prefix("ab*cd"), "ab");
        assert_eq!(literal_suffix("ab*cd"), "cd");
        assert_eq!(literal_suffix("*.{md,txt}"), "");
        assert!(!segments_overlap(Seg::Glob("*.md"), Seg::Glob("*.txt")));
        assert!(segments_overlap(Seg::Glob("a*"), Seg::Glob("*b")));
    }

    #[test]
    fn a_partial_double_star_is_refused() {
        assert!(Pattern::from_segments(&["src", "a**"]).is_err());
        assert!(Pattern::from_segments(&["src", "[a"]).is_err());
        assert_eq!(p("").to_string(), ".");
    }
}
