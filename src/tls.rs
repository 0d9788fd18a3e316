//! HTTPS: the rustls server configuration built from `--secret_pem` and
//! `--secret_key`.

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
}

/// A server configuration offering HTTP/1.1 over TLS 1.2 and 1.3.
pub fn server_config(certificate: &Path, key: &Path) -> Result<ServerConfig, TlsError> {
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
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Pair(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| TlsError::Pair(e.to_string()))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}
