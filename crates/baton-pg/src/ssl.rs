//! What a URL asks of TLS (`sslmode`) and which check a connection failed:
//! the words [`crate::tls`] and [`crate::error::PgError`] share.

use std::path::PathBuf;

/// libpq's `sslmode`: whether a connection uses TLS and what it checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// No TLS.
    Disable,
    /// TLS if the server offers it, plain otherwise (libpq's default).
    Prefer,
    /// TLS or no connection; the certificate is not checked unless
    /// `sslrootcert=FILE` is given.
    Require,
    /// TLS, with a certificate signed by a trusted root (any host name).
    VerifyCa,
    /// TLS, with a certificate signed by a trusted root and naming the host.
    VerifyFull,
}

impl SslMode {
    /// The URL spelling (`verify-full`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    pub(crate) fn parse(value: &str) -> Option<SslMode> {
        Some(match value {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            // libpq's `allow` (plain first, TLS if the server insists) has
            // no equivalent in the driver.
            _ => return None,
        })
    }
}

impl std::fmt::Display for SslMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which TLS check a connection failed, in the words a user needs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TlsFailure {
    /// The server declined TLS, and the mode requires it.
    // Never advice to weaken the mode: a server that declines TLS may be
    // a proxy downgrading the connection, which the mode exists to refuse.
    #[error("the server does not support TLS (sslmode={mode} requires it): turn ssl on in the server, and check that nothing between here and the server (a proxy) declines TLS on its behalf")]
    NotSupported {
        /// The mode asked for.
        mode: SslMode,
    },
    /// The certificate's chain does not end at a trusted root.
    #[error("the server's certificate is not signed by {roots} (sslmode={mode})")]
    UnknownCa {
        /// The mode asked for.
        mode: SslMode,
        /// The roots it was checked against: "the CA in sslrootcert
        /// '...'" or "the system's trusted roots".
        roots: String,
    },
    /// The certificate does not name the host connected to.
    #[error("host name '{host}' does not match the server's certificate{} (sslmode=verify-full; connect by a name the certificate holds, or use sslmode=verify-ca)", names_text(.presented))]
    HostMismatch {
        /// The host from the URL.
        host: String,
        /// The names the certificate holds, where known.
        presented: Vec<String>,
    },
    /// The certificate is outside its validity period.
    #[error("the server's certificate is {0}")]
    Validity(&'static str),
    /// The server presents a CA certificate as its own (a self-signed
    /// certificate, say), where a certificate signed by a CA is expected.
    #[error("the server's certificate is a CA certificate, not one issued to the server (a self-signed certificate?) (sslmode={mode}): give the server a certificate signed by the CA in sslrootcert")]
    CaAsServerCertificate {
        /// The mode asked for.
        mode: SslMode,
    },
    /// The certificate is unusable for another reason.
    #[error("the server's certificate is not valid: {0}")]
    BadCertificate(String),
    /// The TLS handshake failed for a reason other than the certificate.
    #[error("the TLS handshake failed: {0}")]
    Handshake(String),
    /// The `sslrootcert` file cannot be used.
    #[error("cannot use sslrootcert '{path}': {reason}")]
    RootCert {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// No trusted root could be found on this system.
    #[error("no trusted root certificates found on this system ({0}): install them (e.g. the ca-certificates package) or give sslrootcert=FILE")]
    NoSystemRoots(String),
}

fn names_text(presented: &[String]) -> String {
    if presented.is_empty() {
        String::new()
    } else {
        format!(" (it names {})", presented.join(", "))
    }
}
