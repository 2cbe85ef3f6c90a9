//! TLS for every connection a client makes: the builder's options (a CA
//! bundle, a client certificate for mTLS) and how a `redis::Client` is
//! opened with them.
//!
//! The builder keeps [`TlsOptions`] (PEM bytes or file paths, nothing read
//! yet). At connect, [`TlsOptions::load`] reads the files once and gives a
//! [`TlsConfig`], which every backend uses to open its clients:
//!
//! - one node and each Redlock node: [`TlsConfig::client`] per URL;
//! - Sentinel: [`TlsConfig::client`] for each sentinel URL and for the
//!   master it names (or [`TlsConfig::certificates`] for redis-rs's
//!   `SentinelClient`, which takes `TlsCertificates` in its node settings);
//! - Cluster: [`TlsConfig::certificates`] for
//!   `redis::cluster::ClusterClientBuilder::certs`.
//!
//! With the feature `tls-rustls`, [`TlsConfig::client`] also installs
//! rustls's `ring` crypto provider as the process default when a `rediss://`
//! URL is opened and no provider is installed yet (redis-rs needs one, and
//! panics on the connection's thread without it). An application that
//! installs its own provider before connecting keeps it.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use redis::{Client, ErrorKind, IntoConnectionInfo, RedisError};

/// PEM text, given as bytes or read from a file at connect.
#[derive(Clone)]
enum Pem {
    Bytes(Arc<[u8]>),
    File(PathBuf),
}

impl Pem {
    fn read(&self) -> Result<Arc<[u8]>, RedisError> {
        match self {
            Pem::Bytes(bytes) => Ok(bytes.clone()),
            Pem::File(path) => std::fs::read(path).map(Into::into).map_err(|e| {
                RedisError::from((
                    ErrorKind::InvalidClientConfig,
                    "cannot read a TLS file",
                    format!("{}: {e}", path.display()),
                ))
            }),
        }
    }
}

impl fmt::Debug for Pem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // Never the contents: a client key is a secret.
            Pem::Bytes(bytes) => write!(f, "<{} bytes of PEM>", bytes.len()),
            Pem::File(path) => fmt::Debug::fmt(path, f),
        }
    }
}

/// The builder's TLS options, not read yet.
#[derive(Clone, Default, Debug)]
pub(crate) struct TlsOptions {
    ca: Option<Pem>,
    /// The client certificate (chain) and its private key.
    client_cert: Option<(Pem, Pem)>,
}

impl TlsOptions {
    /// Trust the CA certificates in `pem`.
    pub(crate) fn set_ca_pem(&mut self, pem: Vec<u8>) {
        self.ca = Some(Pem::Bytes(pem.into()));
    }

    /// Trust the CA certificates in the file at `path`, read at connect.
    pub(crate) fn set_ca_file(&mut self, path: PathBuf) {
        self.ca = Some(Pem::File(path));
    }

    /// Present the client certificate `cert` with its key `key` (PEM).
    pub(crate) fn set_client_cert_pem(&mut self, cert: Vec<u8>, key: Vec<u8>) {
        self.client_cert = Some((Pem::Bytes(cert.into()), Pem::Bytes(key.into())));
    }

    /// As [`set_client_cert_pem`](Self::set_client_cert_pem), from files
    /// read at connect.
    pub(crate) fn set_client_cert_files(&mut self, cert: PathBuf, key: PathBuf) {
        self.client_cert = Some((Pem::File(cert), Pem::File(key)));
    }

    /// Reads the files the options name.
    ///
    /// # Errors
    /// A file that cannot be read, named by its path.
    pub(crate) fn load(&self) -> Result<TlsConfig, RedisError> {
        let root_cert = self.ca.as_ref().map(Pem::read).transpose()?;
        let client_cert = match &self.client_cert {
            Some((cert, key)) => Some(ClientCert {
                cert: cert.read()?,
                key: key.read()?,
            }),
            None => None,
        };
        Ok(TlsConfig {
            root_cert,
            client_cert,
        })
    }
}

/// TLS material read at connect, shared by every connection of a client.
#[derive(Clone, Default)]
pub(crate) struct TlsConfig {
    root_cert: Option<Arc<[u8]>>,
    client_cert: Option<ClientCert>,
}

/// A client certificate (chain) and its private key, in PEM.
#[derive(Clone)]
#[cfg_attr(
    not(any(feature = "tls-rustls", feature = "tls-native-tls")),
    allow(dead_code)
)]
struct ClientCert {
    cert: Arc<[u8]>,
    key: Arc<[u8]>,
}

impl TlsConfig {
    /// Whether the client was given a CA bundle or a client certificate.
    pub(crate) fn is_set(&self) -> bool {
        self.root_cert.is_some() || self.client_cert.is_some()
    }

    /// A `redis::Client` for `url` with these options.
    ///
    /// # Errors
    /// An invalid URL; TLS options with a URL that is not `rediss://`, or
    /// without a TLS feature; a PEM that does not parse.
    pub(crate) fn client(&self, url: &str) -> Result<Client, RedisError> {
        let tls = url.starts_with("rediss://");
        if tls {
            install_crypto_provider()?;
        }
        if !self.is_set() {
            return Client::open(url);
        }
        if !tls {
            return Err(RedisError::from((
                ErrorKind::InvalidClientConfig,
                "TLS options (a CA bundle or a client certificate) need `rediss://` URLs",
                crate::node_name::node_name(url).to_string(),
            )));
        }
        self.build(url.into_connection_info()?)
    }

    #[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
    fn build(&self, info: redis::ConnectionInfo) -> Result<Client, RedisError> {
        Client::build_with_tls(info, self.certificates())
    }

    #[cfg(not(any(feature = "tls-rustls", feature = "tls-native-tls")))]
    fn build(&self, _info: redis::ConnectionInfo) -> Result<Client, RedisError> {
        Err(RedisError::from((
            ErrorKind::InvalidClientConfig,
            "TLS options need the feature `tls-rustls` (or `tls-native-tls`) of lock-runtime",
        )))
    }

    /// `builder` with these options, for a cluster reached through `urls`.
    ///
    /// # Errors
    /// As [`client`](Self::client).
    pub(crate) fn cluster(
        &self,
        builder: redis::cluster::ClusterClientBuilder,
        urls: &[String],
    ) -> Result<redis::cluster::ClusterClientBuilder, RedisError> {
        let tls = urls.iter().any(|url| url.starts_with("rediss://"));
        if tls {
            install_crypto_provider()?;
        }
        if !self.is_set() {
            return Ok(builder);
        }
        if !tls {
            return Err(RedisError::from((
                ErrorKind::InvalidClientConfig,
                "TLS options (a CA bundle or a client certificate) need `rediss://` URLs",
            )));
        }
        self.certify(builder)
    }

    #[cfg(feature = "tls-rustls")]
    fn certify(
        &self,
        builder: redis::cluster::ClusterClientBuilder,
    ) -> Result<redis::cluster::ClusterClientBuilder, RedisError> {
        Ok(builder.certs(self.certificates()))
    }

    /// redis-rs takes a Cluster's certificates with rustls only.
    #[cfg(all(feature = "tls-native-tls", not(feature = "tls-rustls")))]
    fn certify(
        &self,
        _builder: redis::cluster::ClusterClientBuilder,
    ) -> Result<redis::cluster::ClusterClientBuilder, RedisError> {
        Err(RedisError::from((
            ErrorKind::InvalidClientConfig,
            "TLS options (a CA bundle or a client certificate) on Redis Cluster need the \
             feature `tls-rustls` of lock-runtime: with `tls-native-tls`, a Cluster \
             connects with the platform's trust store and no client certificate",
        )))
    }

    #[cfg(not(any(feature = "tls-rustls", feature = "tls-native-tls")))]
    fn certify(
        &self,
        _builder: redis::cluster::ClusterClientBuilder,
    ) -> Result<redis::cluster::ClusterClientBuilder, RedisError> {
        Err(RedisError::from((
            ErrorKind::InvalidClientConfig,
            "TLS options need the feature `tls-rustls` (or `tls-native-tls`) of lock-runtime",
        )))
    }

    /// The options in redis-rs's form, for the backends that take them
    /// rather than a `Client` (Cluster, Sentinel).
    #[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
    pub(crate) fn certificates(&self) -> redis::TlsCertificates {
        redis::TlsCertificates {
            client_tls: self
                .client_cert
                .as_ref()
                .map(|client| redis::ClientTlsConfig {
                    client_cert: client.cert.to_vec(),
                    client_key: client.key.to_vec(),
                }),
            root_cert: self.root_cert.as_ref().map(|ca| ca.to_vec()),
        }
    }
}

/// Installs rustls's `ring` provider as the process default, unless one is
/// installed already (by the application, or by another client). Losing a
/// race with another thread that installs one is fine: one is installed.
#[cfg(feature = "tls-rustls")]
fn install_crypto_provider() -> Result<(), RedisError> {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // rustls 0.23.48 deprecates `ring`'s provider: it has no
        // post-quantum key exchange. It stays this crate's fallback (aws-lc-rs
        // needs a C toolchain with cmake); an application that wants the
        // post-quantum groups installs aws-lc-rs's provider before it makes a
        // client, and this one is not installed (see the security guide).
        #[allow(deprecated)]
        let ring = rustls::crypto::ring::default_provider();
        let _ = ring.install_default();
    }
    Ok(())
}

/// Nothing to install with native-tls.
#[cfg(all(feature = "tls-native-tls", not(feature = "tls-rustls")))]
fn install_crypto_provider() -> Result<(), RedisError> {
    Ok(())
}

/// Without a TLS feature, `rediss://` cannot work: say which to turn on.
#[cfg(not(any(feature = "tls-rustls", feature = "tls-native-tls")))]
fn install_crypto_provider() -> Result<(), RedisError> {
    Err(RedisError::from((
        ErrorKind::InvalidClientConfig,
        "`rediss://` URLs need the feature `tls-rustls` (or `tls-native-tls`) of lock-runtime",
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_options_with_a_plain_url_are_refused() {
        let mut options = TlsOptions::default();
        options.set_ca_pem(b"not read yet".to_vec());
        let config = options.load().expect("bytes need no reading");
        let error = config.client("redis://:secret@127.0.0.1:1").unwrap_err();
        let shown = error.to_string();
        assert!(shown.contains("rediss://"), "{shown}");
        assert!(!shown.contains("secret"), "{shown}");
    }

    #[test]
    fn a_missing_file_is_named() {
        let mut options = TlsOptions::default();
        options.set_client_cert_files("/no/cert.pem".into(), "/no/key.pem".into());
        let error = options.load().err().expect("no such file");
        assert!(error.to_string().contains("/no/cert.pem"), "{error}");
    }

    #[test]
    fn debug_never_shows_a_key() {
        let mut options = TlsOptions::default();
        options.set_client_cert_pem(b"CERT".to_vec(), b"PRIVATE-KEY-BYTES".to_vec());
        let shown = format!("{options:?}");
        assert!(!shown.contains("PRIVATE-KEY-BYTES"), "{shown}");
    }

    #[cfg(not(any(feature = "tls-rustls", feature = "tls-native-tls")))]
    #[test]
    fn rediss_without_a_tls_feature_names_the_feature() {
        let error = TlsConfig::default()
            .client("rediss://127.0.0.1:1")
            .unwrap_err();
        assert!(error.to_string().contains("tls-rustls"), "{error}");
    }
}
