//! TLS to PostgreSQL, with libpq's `sslmode` and `sslrootcert` URL
//! parameters and their meaning.
//!
//! Every connection baton makes to PostgreSQL (locks, groups, the job
//! service's store) gets its driver configuration and its TLS connector
//! from [`client_config`] (which documents the modes), so a URL means the
//! same everywhere. A connection that fails a check is a [`PgError::Tls`]
//! naming the check ([`TlsFailure`]): never retried, since trying again
//! cannot help.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_postgres::config::{Host, SslMode as DriverSslMode};
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::error::{one_line, PgError};
use crate::ssl::{SslMode, TlsFailure};
use baton_lock::redact;

/// Where the certificates that may sign the server's come from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Roots {
    /// None: the certificate is not checked.
    Unchecked,
    /// The system's trusted roots.
    System,
    /// The PEM file named by `sslrootcert`.
    File(PathBuf),
}

impl std::fmt::Display for Roots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Roots::Unchecked => f.write_str("no CA"),
            Roots::System => f.write_str("the system's trusted roots"),
            Roots::File(path) => write!(f, "the CA in sslrootcert '{}'", path.display()),
        }
    }
}

/// The TLS connector of one backend URL: what `sslmode` and `sslrootcert`
/// asked for, ready to hand to the driver (`Config::connect`, a pool, a
/// cancel request). Cheap to clone.
#[derive(Clone)]
pub struct Tls {
    connector: MakeRustlsConnect,
    mode: SslMode,
    roots: Arc<Roots>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("sslmode", &self.mode)
            .field("roots", &self.roots)
            .finish()
    }
}

impl<S> MakeTlsConnect<S> for Tls
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = <MakeRustlsConnect as MakeTlsConnect<S>>::Stream;
    type TlsConnect = <MakeRustlsConnect as MakeTlsConnect<S>>::TlsConnect;
    type Error = <MakeRustlsConnect as MakeTlsConnect<S>>::Error;

    fn make_tls_connect(&mut self, domain: &str) -> Result<Self::TlsConnect, Self::Error> {
        MakeTlsConnect::<S>::make_tls_connect(&mut self.connector, domain)
    }
}

impl Tls {
    /// The mode the URL asked for (`prefer` if none).
    pub fn mode(&self) -> SslMode {
        self.mode
    }

    /// The TLS check a failed connection names, or `None` when `e` is not
    /// about TLS (refused, login, ...). For messages: a connection that
    /// failed a check is not worth trying again.
    pub fn failure(&self, e: &tokio_postgres::Error) -> Option<TlsFailure> {
        if let Some(rustls_error) = find_rustls_error(e) {
            return Some(self.classify(rustls_error));
        }
        let text = one_line(e);
        if text.contains("server does not support TLS") {
            return Some(TlsFailure::NotSupported { mode: self.mode });
        }
        if !text.starts_with("error performing TLS handshake") {
            return None;
        }
        // A broken connection during the handshake is the network's (or a
        // restarting server's) doing, not a check: let the caller treat it
        // as it treats any broken connection.
        if let Some(io) = find_io_error(e) {
            use std::io::ErrorKind as K;
            if matches!(
                io.kind(),
                K::ConnectionReset
                    | K::ConnectionAborted
                    | K::UnexpectedEof
                    | K::BrokenPipe
                    | K::TimedOut
            ) {
                return None;
            }
        }
        Some(TlsFailure::Handshake(text))
    }

    fn classify(&self, e: &rustls::Error) -> TlsFailure {
        let cert = match e {
            rustls::Error::InvalidCertificate(c) => c,
            other => return TlsFailure::Handshake(other.to_string()),
        };
        match cert {
            CertificateError::UnknownIssuer | CertificateError::BadSignature => {
                TlsFailure::UnknownCa {
                    mode: self.mode,
                    roots: self.roots.to_string(),
                }
            }
            CertificateError::NotValidForName => TlsFailure::HostMismatch {
                host: String::from("(the URL's host)"),
                presented: Vec::new(),
            },
            CertificateError::NotValidForNameContext {
                expected,
                presented,
            } => TlsFailure::HostMismatch {
                host: server_name_text(expected),
                presented: presented.iter().map(|n| bare_name(n)).collect(),
            },
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                TlsFailure::Validity("expired")
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                TlsFailure::Validity("not valid yet")
            }
            // webpki's own reasons come wrapped, named by their Debug text.
            CertificateError::Other(o) => match o.to_string().as_str() {
                "CaUsedAsEndEntity" => TlsFailure::CaAsServerCertificate { mode: self.mode },
                "EndEntityUsedAsCa" => TlsFailure::BadCertificate(
                    "a certificate that is not a CA's signed the server's".into(),
                ),
                other => TlsFailure::BadCertificate(other.to_string()),
            },
            other => TlsFailure::BadCertificate(other.to_string()),
        }
    }
}

/// `DnsName("db.example")` (how the verifier lists a certificate's names)
/// as `db.example`.
fn bare_name(presented: &str) -> String {
    presented
        .split_once('(')
        .and_then(|(_, rest)| rest.strip_suffix(')'))
        .map_or(presented, |inner| inner.trim_matches('"'))
        .to_string()
}

fn server_name_text(name: &ServerName<'_>) -> String {
    match name {
        ServerName::DnsName(d) => d.as_ref().to_string(),
        ServerName::IpAddress(ip) => std::net::IpAddr::from(*ip).to_string(),
        other => format!("{other:?}"),
    }
}

/// The rustls error somewhere in `e`'s chain (the driver boxes the
/// connector's `io::Error`, which wraps rustls' own).
fn find_rustls_error(e: &tokio_postgres::Error) -> Option<&rustls::Error> {
    let mut next: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(err) = next {
        if let Some(r) = err.downcast_ref::<rustls::Error>() {
            return Some(r);
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if let Some(r) = io.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
                return Some(r);
            }
        }
        next = err.source();
    }
    None
}

fn find_io_error(e: &tokio_postgres::Error) -> Option<&std::io::Error> {
    let mut next: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(err) = next {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return Some(io);
        }
        next = err.source();
    }
    None
}

/// The URL's TLS parameters, taken out of it.
#[derive(Debug, Default, PartialEq, Eq)]
struct TlsParams {
    mode: Option<SslMode>,
    rootcert: Option<String>,
}

/// The driver's configuration and the TLS connector for a `postgres://`
/// URL: `sslmode` and `sslrootcert` are taken out of it and read here with
/// libpq's meaning; the rest of the URL goes to the driver as written.
///
/// | `sslmode`          | TLS                                   | certificate checked                          |
/// |--------------------|---------------------------------------|----------------------------------------------|
/// | `disable`          | never                                 | -                                            |
/// | `prefer` (default) | if the server offers it, else plain   | no (chain only if `sslrootcert` is given)    |
/// | `require`          | always (fails if the server has none) | no (chain only if `sslrootcert` is given)    |
/// | `verify-ca`        | always                                | chain to a trusted root, not the host name   |
/// | `verify-full`      | always                                | chain, and the host name in the URL          |
///
/// The trusted roots are the PEM certificates in `sslrootcert=FILE`, or the
/// system's (`sslrootcert=system`, or `verify-ca`/`verify-full` with no
/// `sslrootcert`). Where this differs from libpq, on purpose:
/// - libpq reads `~/.postgresql/root.crt` when no `sslrootcert` is given;
///   baton never reads files in the home directory, and uses the system's
///   roots instead for the verifying modes (a managed database's
///   certificate usually chains to a public root). So `prefer`/`require`
///   check the chain ("behave like `verify-ca`", as libpq says when a root
///   file exists) only when `sslrootcert=FILE` is given explicitly.
/// - With `prefer`, libpq retries in plain when the TLS handshake itself
///   fails; here only a server that declines TLS gets a plain connection,
///   and a failed handshake is an error.
/// - Client certificates (`sslcert`, `sslkey`) and the `PGSSLMODE` style
///   environment variables are not supported.
///
/// As in libpq 16, `sslrootcert=system` makes `verify-full` the default and
/// refuses a weaker `sslmode`. Over a Unix socket there is no TLS (the
/// server offers none there), whatever the mode, as in libpq; Windows has
/// no Unix sockets, and there a socket directory as the host is refused.
///
/// # Errors
///
/// [`PgError::Url`] for a URL the driver cannot parse, a bad `sslmode`, or
/// (on Windows) a socket directory as the host;
/// [`PgError::Tls`] when the roots cannot be loaded (an unreadable or empty
/// `sslrootcert`, no system roots). Messages show the URL with its
/// password hidden.
pub fn client_config(url: &str) -> Result<(tokio_postgres::Config, Tls), PgError> {
    let shown = redact(url);
    let bad = |reason: String| PgError::Url {
        url: shown.clone(),
        reason,
    };
    let (rest, params) = split_tls_params(url).map_err(bad)?;
    let mut config: tokio_postgres::Config = rest
        .parse()
        .map_err(|e: tokio_postgres::Error| bad(one_line(&e)))?;
    // The driver takes a path for a host name where there are no Unix
    // sockets: say so rather than fail on a name lookup.
    if cfg!(windows)
        && config
            .get_hosts()
            .iter()
            .any(|h| matches!(h, Host::Tcp(name) if name.starts_with('/')))
    {
        return Err(bad(
            "a socket directory as the host needs Unix sockets, which Windows lacks: give a host name"
                .into(),
        ));
    }
    let system = params.rootcert.as_deref() == Some("system");
    let mode = match params.mode {
        Some(m) => m,
        None if system => SslMode::VerifyFull,
        None => SslMode::Prefer,
    };
    if system && mode != SslMode::VerifyFull {
        return Err(bad(format!(
            "weak sslmode={mode} may not be used with sslrootcert=system (use sslmode=verify-full)"
        )));
    }
    let roots = match (&params.rootcert, mode) {
        (_, SslMode::Disable) => Roots::Unchecked,
        (Some(_), _) if system => Roots::System,
        (Some(file), _) => Roots::File(PathBuf::from(file)),
        (None, SslMode::VerifyCa | SslMode::VerifyFull) => Roots::System,
        (None, _) => Roots::Unchecked,
    };
    let only_sockets = config
        .get_hosts()
        .iter()
        .all(|h| !matches!(h, Host::Tcp(_)));
    config.ssl_mode(match mode {
        SslMode::Disable => DriverSslMode::Disable,
        // No TLS over a Unix socket, as in libpq.
        _ if only_sockets && !config.get_hosts().is_empty() => DriverSslMode::Disable,
        SslMode::Prefer => DriverSslMode::Prefer,
        SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => DriverSslMode::Require,
    });
    let tls_error = |failure: TlsFailure| PgError::Tls {
        url: shown.clone(),
        failure,
    };
    let store = match &roots {
        Roots::Unchecked => None,
        Roots::System => Some(system_roots().map_err(tls_error)?),
        Roots::File(path) => Some(file_roots(path).map_err(tls_error)?),
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = Verifier {
        roots: store.map(Arc::new),
        check_host: mode == SslMode::VerifyFull,
        algorithms: provider.signature_verification_algorithms,
    };
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_error(TlsFailure::Handshake(format!("cannot set up TLS: {e}"))))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    Ok((
        config,
        Tls {
            connector: MakeRustlsConnect::new(client),
            mode,
            roots: Arc::new(roots),
        },
    ))
}

/// Splits `sslmode` and `sslrootcert` off a URL's query; the rest is the
/// URL for the driver, its other parameters untouched.
fn split_tls_params(url: &str) -> Result<(String, TlsParams), String> {
    let mut params = TlsParams::default();
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_string(), params));
    };
    let mut kept = Vec::new();
    for pair in query.split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match percent_decode(key)?.as_str() {
            "sslmode" => {
                let value = percent_decode(value)?;
                params.mode = Some(SslMode::parse(&value).ok_or_else(|| {
                    format!(
                        "sslmode '{value}' is not one of disable, prefer, require, verify-ca, verify-full"
                    )
                })?);
            }
            "sslrootcert" => {
                let value = percent_decode(value)?;
                if value.is_empty() {
                    return Err("sslrootcert is empty (give a PEM file, or 'system')".into());
                }
                params.rootcert = Some(value);
            }
            "sslcert" | "sslkey" | "sslpassword" | "sslcrl" | "sslcrldir" => {
                return Err(format!(
                    "{} is not supported (no client certificates or revocation lists)",
                    percent_decode(key)?
                ));
            }
            _ => kept.push(pair),
        }
    }
    let rest = if kept.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((rest, params))
}

/// `%XX` escapes decoded (a URL parameter's key or value).
fn percent_decode(s: &str) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("bad %-escape in '{s}'"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("'{s}' is not UTF-8 once decoded"))
}

/// The PEM certificates in `path`.
fn file_roots(path: &Path) -> Result<RootCertStore, TlsFailure> {
    let failed = |reason: String| TlsFailure::RootCert {
        path: path.to_path_buf(),
        reason,
    };
    let mut store = RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(path).map_err(|e| failed(pem_error(&e)))?;
    for cert in certs {
        let cert = cert.map_err(|e| failed(pem_error(&e)))?;
        store
            .add(cert)
            .map_err(|e| failed(format!("a certificate in it is not usable: {e}")))?;
    }
    if store.is_empty() {
        return Err(failed("it holds no PEM certificate".into()));
    }
    Ok(store)
}

fn pem_error(e: &rustls::pki_types::pem::Error) -> String {
    match e {
        rustls::pki_types::pem::Error::Io(io) => io.to_string(),
        other => format!("not a PEM file ({other:?})"),
    }
}

/// The system's trusted roots (the platform's store; on Linux the
/// OpenSSL locations, `SSL_CERT_FILE`/`SSL_CERT_DIR` respected).
fn system_roots() -> Result<RootCertStore, TlsFailure> {
    let found = rustls_native_certs::load_native_certs();
    let mut store = RootCertStore::empty();
    let (added, _ignored) = store.add_parsable_certificates(found.certs);
    if added == 0 {
        let why = found.errors.first().map_or_else(
            || "none in the system's store".to_string(),
            |e| e.to_string(),
        );
        return Err(TlsFailure::NoSystemRoots(why));
    }
    Ok(store)
}

/// Checks the server's certificate as the mode asks: not at all, its
/// chain, or its chain and its name. The handshake's signatures are always
/// checked (the server holds the certificate's key).
#[derive(Debug)]
struct Verifier {
    roots: Option<Arc<RootCertStore>>,
    check_host: bool,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(roots) = &self.roots else {
            return Ok(ServerCertVerified::assertion());
        };
        let cert = rustls::server::ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_cert_signed_by_trust_anchor(
            &cert,
            roots,
            intermediates,
            now,
            self.algorithms.all,
        )?;
        if self.check_host {
            rustls::client::verify_server_name(&cert, server_name)?;
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(url: &str) -> (String, TlsParams) {
        split_tls_params(url).unwrap_or_else(|e| panic!("{url}: {e}"))
    }

    #[test]
    fn tls_parameters_are_taken_out_and_the_rest_kept() {
        let (rest, p) = params(
            "postgres://u:pw@h:5433/db?application_name=x&sslmode=verify-full&sslrootcert=%2Ftmp%2Fca.pem&connect_timeout=3",
        );
        assert_eq!(
            rest,
            "postgres://u:pw@h:5433/db?application_name=x&connect_timeout=3"
        );
        assert_eq!(p.mode, Some(SslMode::VerifyFull));
        assert_eq!(p.rootcert.as_deref(), Some("/tmp/ca.pem"));
        let (rest, p) = params("postgres://u@h/db?sslmode=require");
        assert_eq!(rest, "postgres://u@h/db");
        assert_eq!(p.mode, Some(SslMode::Require));
        assert_eq!(params("postgres://u@h/db").1, TlsParams::default());
    }

    #[test]
    fn certificate_names_are_shown_bare() {
        assert_eq!(bare_name("DnsName(\"localhost\")"), "localhost");
        assert_eq!(bare_name("IpAddress(10.0.0.1)"), "10.0.0.1");
        assert_eq!(bare_name("db.example"), "db.example");
    }

    #[test]
    fn bad_values_are_refused_by_name() {
        let e = split_tls_params("postgres://u@h/db?sslmode=allow").unwrap_err();
        assert!(e.contains("sslmode 'allow'"), "{e}");
        let e = split_tls_params("postgres://u@h/db?sslcert=/x").unwrap_err();
        assert!(e.contains("sslcert is not supported"), "{e}");
    }

    fn mode_of(url: &str) -> Result<(SslMode, DriverSslMode), String> {
        client_config(url)
            .map(|(c, t)| (t.mode(), c.get_ssl_mode()))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn libpq_defaults_and_the_driver_mode() {
        assert_eq!(
            mode_of("postgres://u@h/db"),
            Ok((SslMode::Prefer, DriverSslMode::Prefer))
        );
        assert_eq!(
            mode_of("postgres://u@h/db?sslmode=disable"),
            Ok((SslMode::Disable, DriverSslMode::Disable))
        );
        assert_eq!(
            mode_of("postgres://u@h/db?sslmode=require"),
            Ok((SslMode::Require, DriverSslMode::Require))
        );
        // Over a Unix socket: no TLS, as in libpq.
        #[cfg(unix)]
        assert_eq!(
            mode_of("postgres://u@%2Frun%2Fpostgresql/db?sslmode=require"),
            Ok((SslMode::Require, DriverSslMode::Disable))
        );
    }

    /// Windows has no Unix sockets: a socket directory as the host is
    /// refused by name, not looked up as a host name (nor taken as a
    /// reason to turn TLS off).
    #[test]
    #[cfg(windows)]
    fn a_socket_directory_is_refused_on_windows() {
        let e = mode_of("postgres://u:secret@%2Frun%2Fpostgresql/db?sslmode=require").unwrap_err();
        assert!(e.contains("needs Unix sockets, which Windows lacks"), "{e}");
        assert!(!e.contains("secret"), "{e}");
    }

    #[test]
    fn sslrootcert_system_means_verify_full_and_refuses_weaker_modes() {
        let e = mode_of("postgres://u:secret@h/db?sslmode=require&sslrootcert=system").unwrap_err();
        assert!(e.contains("weak sslmode=require"), "{e}");
        assert!(!e.contains("secret"), "{e}");
    }

    #[test]
    fn a_missing_or_empty_root_file_is_named() {
        let e = mode_of("postgres://u@h/db?sslmode=verify-ca&sslrootcert=/nonexistent/ca.pem")
            .unwrap_err();
        assert!(
            e.contains("cannot use sslrootcert '/nonexistent/ca.pem'"),
            "{e}"
        );
        let dir = std::env::temp_dir().join(format!("baton-pg-tls-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let empty = dir.join("empty.pem");
        let _ = std::fs::write(&empty, "not a certificate\n");
        let e = mode_of(&format!(
            "postgres://u@h/db?sslmode=verify-ca&sslrootcert={}",
            empty.display()
        ))
        .unwrap_err();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(e.contains("holds no PEM certificate"), "{e}");
    }
}
