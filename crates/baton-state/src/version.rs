//! Versions: what a compare-and-swap compares.

use std::fmt;

use sha2::{Digest, Sha256};

/// The version of a state file: the first 16 hex digits of the SHA-256 of
/// its content, or `absent` for a file that does not exist.
///
/// A version names content, not history: a file changed from A to B and back
/// to A has A's version again, and a compare-and-swap against it succeeds.
/// 64 bits make an accidental collision between two contents of one file
/// practically impossible; they are not meant to resist someone crafting
/// collisions on purpose.
///
/// ```
/// use baton_state::Version;
/// let v = Version::of(Some(b"{\"n\":1}\n"));
/// assert_eq!(v.as_str().len(), 16);
/// assert_eq!(v.as_str().parse::<Version>().unwrap(), v);
/// assert_eq!(Version::of(None), Version::absent());
/// assert_eq!(Version::absent().as_str(), "absent");
/// assert!("12".parse::<Version>().is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Version(String);

/// The version of a file that does not exist.
const ABSENT: &str = "absent";

/// Number of hex digits in a version.
const HEX_LEN: usize = 16;

impl Version {
    /// The version of `content`; `None` means the file does not exist.
    pub fn of(content: Option<&[u8]>) -> Version {
        match content {
            None => Version::absent(),
            Some(bytes) => {
                let digest = Sha256::digest(bytes);
                let mut hex = String::with_capacity(HEX_LEN);
                for b in digest.iter().take(HEX_LEN / 2) {
                    hex.push_str(&format!("{b:02x}"));
                }
                Version(hex)
            }
        }
    }

    /// The version of a file that does not exist: `absent`.
    pub fn absent() -> Version {
        Version(ABSENT.to_string())
    }

    /// Whether this is the version of a missing file.
    pub fn is_absent(&self) -> bool {
        self.0 == ABSENT
    }

    /// The version as printed and parsed.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Version {
    /// `absent` or 16 hex digits (either case); `None` for anything else
    /// (`str::parse`, in `error.rs`, says why: `StateError::InvalidVersion`).
    pub(crate) fn parse(s: &str) -> Option<Version> {
        if s == ABSENT {
            return Some(Version::absent());
        }
        if s.len() == HEX_LEN && s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Some(Version(s.to_ascii_lowercase()));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_is_a_truncated_sha256() {
        // sha256("") = e3b0c44298fc1c149afbf4c8996fb924...
        assert_eq!(Version::of(Some(b"")).as_str(), "e3b0c44298fc1c14");
        // sha256("abc") = ba7816bf8f01cfea414140de5dae2223...
        assert_eq!(Version::of(Some(b"abc")).as_str(), "ba7816bf8f01cfea");
        assert_ne!(Version::of(Some(b"")), Version::absent());
    }

    #[test]
    fn parsing_normalises_case_and_rejects_junk() {
        assert_eq!(
            "BA7816BF8F01CFEA".parse::<Version>().unwrap(),
            Version::of(Some(b"abc"))
        );
        for bad in [
            "",
            "absent ",
            "ba7816bf8f01cfe",
            "ba7816bf8f01cfeaa",
            "zz7816bf8f01cfea",
        ] {
            assert!(bad.parse::<Version>().is_err(), "{bad:?}");
        }
    }
}
