//! The store setting (`store =` in the config file, `--store`), parsed once
//! when the configuration is read: every later decision matches on the
//! engine instead of looking at the URL again.

use std::path::PathBuf;

use crate::StoreError;

/// Where jobs live, as the configuration names it.
#[derive(Clone, PartialEq, Eq)]
pub enum StoreUrl {
    /// `sqlite://PATH`: one node's file (a relative PATH is taken from the
    /// baton dir when the store is opened).
    Sqlite(PathBuf),
    /// `postgres://...` or `postgresql://...` (a libpq-style URL; TLS as its
    /// `sslmode` and `sslrootcert` say):
    /// a database several nodes share.
    Postgres(String),
}

impl StoreUrl {
    /// Parses a store URL.
    ///
    /// # Errors
    ///
    /// [`StoreError::UnsupportedUrl`] (its password hidden) for any other
    /// scheme.
    pub fn parse(url: &str) -> Result<StoreUrl, StoreError> {
        if let Some(path) = url.strip_prefix("sqlite://") {
            return Ok(StoreUrl::Sqlite(PathBuf::from(path)));
        }
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return Ok(StoreUrl::Postgres(url.to_string()));
        }
        Err(StoreError::UnsupportedUrl(baton_lock::redact(url)))
    }

    /// Whether several nodes may share this store (PostgreSQL).
    pub fn is_shared(&self) -> bool {
        matches!(self, StoreUrl::Postgres(_))
    }
}

impl std::str::FromStr for StoreUrl {
    type Err = StoreError;

    fn from_str(url: &str) -> Result<StoreUrl, StoreError> {
        StoreUrl::parse(url)
    }
}

/// The URL as given, its password (if any) replaced by `***`.
impl std::fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreUrl::Sqlite(path) => write!(f, "sqlite://{}", path.display()),
            StoreUrl::Postgres(url) => f.write_str(&baton_lock::redact(url)),
        }
    }
}

/// As [`Display`](std::fmt::Display): a password never reaches a log.
impl std::fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StoreUrl({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::StoreUrl;

    #[test]
    fn each_engine_is_told_by_its_scheme_once() {
        assert_eq!(
            StoreUrl::parse("sqlite://serve.db").ok(),
            Some(StoreUrl::Sqlite("serve.db".into()))
        );
        assert!(StoreUrl::parse("postgres://u@h/db").is_ok_and(|s| s.is_shared()));
        assert!(StoreUrl::parse("postgresql://u@h/db").is_ok_and(|s| s.is_shared()));
        let err = StoreUrl::parse("mysql://u:secret@h/db")
            .unwrap_err()
            .to_string();
        assert!(err.contains("unsupported store URL"), "{err}");
        assert!(!err.contains("secret"), "{err}");
    }

    #[test]
    fn a_password_is_hidden_when_shown() {
        let url = StoreUrl::parse("postgres://u:secret@h/db").unwrap();
        assert!(!url.to_string().contains("secret"));
        assert!(!format!("{url:?}").contains("secret"));
    }
}
