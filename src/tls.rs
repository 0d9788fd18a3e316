//! TLS: the rustls server configuration built from `--secret_pem`,
//! `--secret_key` and, for mutual TLS, `--ssl_client_ca`; REST and gRPC use the same files.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::ServerConfig;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("secret_pem {path}: {message}")]
    Certificate { path: String, message: String },
    #[error("secret_key {path}: {message}")]
    Key { path: String, message: String },
    #[error("secret_pem and secret_key do not form a usable pair: {0}")]
    Pair(String),
    #[error("ssl_client_ca {path}: {message}")]
    ClientCa { path: String, message: String },
}

/// The PEM files TLS is set up from.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    pub certificate: std::path::PathBuf,
    pub key: std::path::PathBuf,
    pub client_ca: Option<std::path::PathBuf>,
}

impl TlsFiles {
    /// The gRPC listener's configuration: the same certificate, key and
    /// client CAs, offering HTTP/2.
    pub fn grpc(&self) -> Result<ServerConfig, TlsError> {
        let mut config = self.rest()?;
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(config)
    }

    /// The REST listener's configuration.
    pub fn rest(&self) -> Result<ServerConfig, TlsError> {
        server_config(&self.certificate, &self.key, self.client_ca.as_deref())
    }
}

/// A server configuration offering HTTP/1.1 over TLS 1.2 and 1.3; with
/// `client_ca`, clients must present a certificate it signed.
pub fn server_config(certificate: &Path, key: &Path, client_ca: Option<&Path>) -> Result<ServerConfig, TlsError> {
    let cert_error = |message: String| TlsError::Certificate {
        path: certificate.display().to_string(),
        message,
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(certificate)
        .map_err(|e| cert_error(e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| cert_error(e.to_string()))?;
    if chain.is_empty() {
        return Err(cert_error("no PEM certificate in the file".into()));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| TlsError::Key {
        path: key.display().to_string(),
        message: format!("no usable PEM private key ({e})"),
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Pair(e.to_string()))?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => builder.with_client_cert_verifier(client_verifier(ca, provider)?),
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|e| TlsError::Pair(e.to_string()))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// Accepts only client certificates that the CAs in `ca` signed.
fn client_verifier(
    ca: &Path,
    provider: Arc<rustls::crypto::CryptoProvider>,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, TlsError> {
    let error = |message: String| TlsError::ClientCa {
        path: ca.display().to_string(),
        message,
    };
    let mut roots = rustls::RootCertStore::empty();
    for certificate in CertificateDer::pem_file_iter(ca).map_err(|e| error(e.to_string()))? {
        roots
            .add(certificate.map_err(|e| error(e.to_string()))?)
            .map_err(|e| error(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(error("no PEM certificate in the file".into()));
    }
    rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| error(e.to_string()))
}
