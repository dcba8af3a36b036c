//! Lock names and how they map to files.
//!
//! A name is 1–200 bytes of printable UTF-8: control characters (Cc),
//! format characters (Cf: bidi overrides and isolates, zero-width spaces
//! and joiners, the soft hyphen, the BOM, tags) and the line and paragraph
//! separators are refused, so a name cannot be shown as another one
//! (`lock status`, logs). Letters of any script are fine. `/` separates levels of a
//! hierarchy (`repo/main`, `issue/42`), but the file a name maps to is always
//! one flat file directly inside `<baton dir>/locks/`: every byte outside
//! `[A-Za-z0-9._-]` is written as `%XX`, so no name can name a path outside
//! the baton dir, whatever it contains. Names whose escaped form would not fit
//! a file name are shortened and given a hash suffix; the full name is kept in
//! the lock file's metadata.

use std::fmt;
use std::str::FromStr;

use crate::error::LockError;

/// Longest accepted lock name, in bytes.
pub const MAX_NAME_LEN: usize = 200;

/// Longest escaped file stem before the name is shortened with a hash suffix.
const MAX_STEM_LEN: usize = 200;

/// A validated lock name.
///
/// ```
/// use baton_lock::LockName;
/// let name: LockName = "repo/main".parse().unwrap();
/// assert_eq!(name.as_str(), "repo/main");
/// assert!("../etc/passwd".parse::<LockName>().is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LockName(String);

impl LockName {
    /// Validates `name`, returning a typed error that says what is wrong with it.
    pub fn new(name: impl Into<String>) -> Result<Self, LockError> {
        let name = name.into();
        match problem(&name) {
            None => Ok(LockName(name)),
            Some(reason) => Err(LockError::InvalidName { name, reason }),
        }
    }

    /// The name as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The file stem (without `.lock`) this name maps to inside `locks/`.
    pub fn file_stem(&self) -> String {
        let mut out = String::with_capacity(self.0.len());
        for b in self.0.bytes() {
            if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.' {
                out.push(char::from(b));
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
        // A stem starting with '.' would make a hidden file; escape the dot.
        if out.starts_with('.') {
            out.replace_range(0..1, "%2E");
        }
        if out.len() > MAX_STEM_LEN {
            let mut cut = MAX_STEM_LEN - 17;
            while !out.is_char_boundary(cut) {
                cut -= 1;
            }
            out.truncate(cut);
            out.push_str(&format!("~{:016x}", fnv1a(self.0.as_bytes())));
        }
        out
    }

    /// Reverses [`LockName::file_stem`] for stems that were not shortened.
    pub fn from_file_stem(stem: &str) -> Option<LockName> {
        if stem.contains('~') {
            return None;
        }
        let bytes = stem.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'%' {
                let hex = stem.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            } else {
                out.push(bytes[i]);
                i += 1;
            }
        }
        LockName::new(String::from_utf8(out).ok()?).ok()
    }
}

impl fmt::Display for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for LockName {
    type Err = LockError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        LockName::new(s)
    }
}

/// Why `name` is not a valid lock name, or `None` if it is.
fn problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("a lock name must not be empty".into());
    }
    if name.len() > MAX_NAME_LEN {
        return Some(format!(
            "a lock name is at most {MAX_NAME_LEN} bytes, this one has {}",
            name.len()
        ));
    }
    if let Some(c) = name.chars().find(|c| c.is_control()) {
        return Some(format!(
            "control character U+{:04X} is not allowed",
            u32::from(c)
        ));
    }
    if let Some(c) = name.chars().find(|&c| invisible(c)) {
        return Some(format!(
            "invisible or bidi formatting character U+{:04X} is not allowed (it would make the name read as another)",
            u32::from(c)
        ));
    }
    if name.starts_with('/') {
        return Some("a lock name must not be an absolute path".into());
    }
    for part in name.split('/') {
        match part {
            "" => return Some("empty path component (leading, trailing or double '/')".into()),
            "." | ".." => return Some(format!("path component '{part}' is not allowed")),
            _ => {}
        }
    }
    None
}

/// Format characters (general category Cf, Unicode 15.1) and the line and
/// paragraph separators (Zl, Zp): invisible, or reordering what follows.
fn invisible(c: char) -> bool {
    matches!(
        u32::from(c),
        0x00AD
            | 0x0600..=0x0605
            | 0x061C
            | 0x06DD
            | 0x070F
            | 0x0890..=0x0891
            | 0x08E2
            | 0x180E
            | 0x200B..=0x200F
            | 0x2028..=0x202E
            | 0x2060..=0x2064
            | 0x2066..=0x206F
            | 0xFEFF
            | 0xFFF9..=0xFFFB
            | 0x110BD
            | 0x110CD
            | 0x13430..=0x1343F
            | 0x1BCA0..=0x1BCA3
            | 0x1D173..=0x1D17A
            | 0xE0001
            | 0xE0020..=0xE007F
    )
}

/// 64-bit FNV-1a: a stable hash for shortened file names (not for security).
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_names_that_could_escape_or_confuse() {
        for bad in [
            "",
            "/abs",
            "a/../b",
            "..",
            ".",
            "a//b",
            "a/",
            "nul\0x",
            "tab\tx",
            "\u{85}",
            "a\u{202E}b",
            "a\u{200B}b",
            "a\u{200D}b",
            "\u{FEFF}a",
            "a\u{AD}b",
            "a\u{2066}b",
            "a\u{2028}b",
            "a\u{E0041}",
            "a\u{061C}b",
        ] {
            assert!(LockName::new(bad).is_err(), "{bad:?} should be rejected");
        }
        assert!(LockName::new("x".repeat(201)).is_err());
        assert!(LockName::new("x".repeat(200)).is_ok());
    }

    #[test]
    fn stems_are_flat_and_round_trip() {
        for good in [
            "a",
            "repo/main",
            "issue #42",
            "ünï/cödé",
            "日本語/ブランチ",
            "Ελληνικά",
            ".hidden",
            "a.b-c_d",
        ] {
            let n = LockName::new(good).unwrap();
            let stem = n.file_stem();
            assert!(!stem.contains('/') && !stem.starts_with('.'), "{stem}");
            assert_eq!(LockName::from_file_stem(&stem).as_ref(), Some(&n));
        }
    }

    #[test]
    fn long_names_get_bounded_distinct_stems() {
        let a = LockName::new("é".repeat(100)).unwrap();
        let b = LockName::new(format!("{}x", "é".repeat(99))).unwrap();
        assert!(a.file_stem().len() <= MAX_STEM_LEN);
        assert_ne!(a.file_stem(), b.file_stem());
        assert_eq!(LockName::from_file_stem(&a.file_stem()), None);
    }
}
