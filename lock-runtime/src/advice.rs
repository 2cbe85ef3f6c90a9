//! What to do about a Redis error: the words that connect errors and the
//! errors of calls add to causes that the user can fix (a missing password,
//! a CA or a client certificate, a TLS port reached without TLS), and a
//! redis error written once, without its kind again.

use std::error::Error;
use std::fmt;
use std::io;
use std::sync::Arc;

use redis::{ErrorKind, RedisError};

/// For `NOAUTH`: where the password goes (never the URL itself, which may
/// hold one).
const PASSWORD_IN_URL: &str = "put the user and password in the URL: \
     redis://user:password@host:port/ (redis://:password@host:port/ for requirepass)";

/// For rustls's `UnknownIssuer`.
#[cfg(feature = "tls-rustls")]
const UNKNOWN_ISSUER: &str = "the server's certificate is signed by a CA this client does not \
     trust: give that CA with LockClient::builder().tls_ca_file(path) or .tls_ca_pem(pem)";

/// For the server's `CertificateRequired` alert.
#[cfg(feature = "tls-rustls")]
const CERTIFICATE_REQUIRED: &str = "the server asks for a client certificate: give it with \
     LockClient::builder().tls_client_cert_files(cert, key) or .tls_client_cert_pem(cert, key)";

/// For a client certificate that rustls refuses.
const CLIENT_CERTIFICATE: &str = "the certificate refused is this client's own, given with \
     tls_client_cert_files or tls_client_cert_pem";

/// For a client certificate of a version other than 3.
const NOT_V3: &str = "rustls takes only X.509 v3 certificates (`openssl x509 -req` makes a v1 \
     certificate unless given extensions, with -extfile)";

/// What redis-rs says when rustls refuses the client certificate and key
/// (the only TLS material checked before a handshake).
const CLIENT_CONFIG_REFUSED: &str = "Unable to build client with TLS parameters provided.";

/// `NOAUTH` at connect, for [`missing_password`] and [`at_connect`].
fn noauth() -> String {
    format!("NOAUTH, no password was given: {PASSWORD_IN_URL}")
}

/// The error for a server at `node` that answered `NOAUTH` to a connection
/// that had sent no password: the URL lacks it, a mistake in the options.
pub(crate) fn missing_password(node: &str) -> RedisError {
    RedisError::from((
        ErrorKind::InvalidClientConfig,
        "authentication required",
        format!("{node}: {}", noauth()),
    ))
}

/// `error`, met connecting to `node` (named without credentials): what
/// failed, the node, the cause once, and what to do when the cause says.
/// `plain_tcp`: the URL was `redis://`, so a connection reset may be a TLS
/// port. The error's kind is kept (it is shown, after `what`), but for
/// `WRONGPASS`: redis-rs has no kind for that code and shows it as
/// `Extension`, so it gets the kind of redis-rs's own refused `AUTH`.
pub(crate) fn at_connect(node: &str, plain_tcp: bool, error: &RedisError) -> RedisError {
    let (what, cause) = connect_cause(plain_tcp, error);
    let kind = match error.code() {
        Some("WRONGPASS") => ErrorKind::AuthenticationFailed,
        _ => error.kind(),
    };
    RedisError::from((kind, what, format!("{node}: {cause}")))
}

/// What failed and why, for [`at_connect`].
fn connect_cause(plain_tcp: bool, error: &RedisError) -> (&'static str, String) {
    if error.code() == Some("NOAUTH") {
        // The server's words are about `HELLO AUTH`, which is redis-rs's
        // business: say where the password goes instead.
        return ("authentication required", noauth());
    }
    if error.code() == Some("WRONGPASS") {
        return ("authentication failed", Plain(error).to_string());
    }
    if error.kind() == ErrorKind::AuthenticationFailed {
        // redis-rs keeps no words of the server's for a refused `AUTH`.
        let cause = "WRONGPASS wrong user name or password, or user disabled";
        return ("authentication failed", cause.to_owned());
    }
    if let Some(reason) = refused_client_certificate(error) {
        let mut cause = format!(
            "the client certificate given with tls_client_cert_files or tls_client_cert_pem is \
             refused: {reason}"
        );
        if reason.contains("UnsupportedCertVersion") {
            cause = format!("{cause}; {NOT_V3}");
        }
        return ("invalid options", cause);
    }
    if let Some(hint) = tls_hint(error) {
        return ("TLS handshake failed", format!("{}; {hint}", Plain(error)));
    }
    match error.kind() {
        ErrorKind::Io if plain_tcp && closed_at_once(error) => {
            let cause = format!(
                "{}; the server may expect TLS: if this port takes TLS, use a rediss:// URL",
                Plain(error)
            );
            ("connection failed", cause)
        }
        ErrorKind::Io => ("connection failed", Plain(error).to_string()),
        ErrorKind::InvalidClientConfig => ("invalid options", Plain(error).to_string()),
        _ => ("refused", Plain(error).to_string()),
    }
}

/// What to do about `error`, met at a call or at connect, when its cause
/// says: `NOAUTH`, a server certificate from a CA the client does not
/// trust, a client certificate the server asks for or rustls refuses.
pub(crate) fn hint(error: &RedisError) -> Option<&'static str> {
    if error.code() == Some("NOAUTH") {
        return Some(PASSWORD_IN_URL);
    }
    if let Some(reason) = refused_client_certificate(error) {
        return Some(if reason.contains("UnsupportedCertVersion") {
            NOT_V3
        } else {
            CLIENT_CERTIFICATE
        });
    }
    tls_hint(error)
}

/// rustls's reason, when it refused the client certificate while redis-rs
/// built the TLS configuration.
fn refused_client_certificate(error: &RedisError) -> Option<&str> {
    if error.kind() != ErrorKind::InvalidClientConfig
        || !error.to_string().starts_with(CLIENT_CONFIG_REFUSED)
    {
        return None;
    }
    let detail = error.detail()?;
    // rustls calls any certificate it checks the peer's, its own too.
    Some(
        detail
            .strip_prefix("invalid peer certificate: ")
            .unwrap_or(detail),
    )
}

/// What to do about a TLS handshake that rustls ended, when its error
/// says.
#[cfg(feature = "tls-rustls")]
fn tls_hint(error: &RedisError) -> Option<&'static str> {
    use rustls::{AlertDescription, CertificateError};

    let rustls_error = io_error(error)?
        .get_ref()?
        .downcast_ref::<rustls::Error>()?;
    match rustls_error {
        rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer) => Some(UNKNOWN_ISSUER),
        rustls::Error::AlertReceived(AlertDescription::CertificateRequired) => {
            Some(CERTIFICATE_REQUIRED)
        }
        _ => None,
    }
}

/// Without rustls, no handshake error is read.
#[cfg(not(feature = "tls-rustls"))]
fn tls_hint(_error: &RedisError) -> Option<&'static str> {
    None
}

/// Whether the server closed the connection as soon as it was made: reset,
/// aborted, or ended before an answer. (A TLS port does so with a client
/// that does not speak TLS.)
fn closed_at_once(error: &RedisError) -> bool {
    io_error(error).is_some_and(|e| {
        matches!(
            e.kind(),
            io::ErrorKind::ConnectionReset
                | io::ErrorKind::ConnectionAborted
                | io::ErrorKind::UnexpectedEof
                | io::ErrorKind::BrokenPipe
        )
    })
}

/// The IO error inside `error`, if it is one.
fn io_error(error: &RedisError) -> Option<&io::Error> {
    let source = error.source()?;
    // redis-rs keeps it behind an `Arc`.
    source
        .downcast_ref::<Arc<dyn Error + Send + Sync>>()
        .and_then(|inner| inner.downcast_ref::<io::Error>())
        .or_else(|| source.downcast_ref::<io::Error>())
}

/// A redis error as its own words: a server error as its code and message
/// (`NOPERM this user has no permissions ...`), anything else as redis-rs
/// shows it but without its kind (which the error that carries this one
/// shows already).
struct Plain<'a>(pub &'a RedisError);

impl fmt::Display for Plain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let (Some(code), Some(detail)) = (self.0.code(), self.0.detail()) {
            return write!(f, "{code} {detail}");
        }
        let shown = self.0.to_string();
        let kind = format!(" - {:?}", self.0.kind());
        f.write_str(&shown.replacen(&kind, "", 1))
    }
}
